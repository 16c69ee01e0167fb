"""The smoke-test trainer as the Job runs it: env in, JSON lines out, exit codes that mean
what the Job's podFailurePolicy expects, and bit-exact resume."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from spotproof.runtime import exit_codes
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.gang import DEFAULT_SHARD_TIMEOUT
from spotproof.runtime.checkpointer.layout import manifest_key
from spotproof.runtime.checkpointer.manifest import GangManifest, Manifest
from spotproof.runtime.checkpointer.torch_state import StateBuffer
from spotproof.runtime.run_settings import RunSettings
from spotproof.runtime.settings import usable_cpus
from spotproof.smoke.data_parallel import Alone
from spotproof.smoke.emulation.fault_proxy import Fault, emulator_port, fault_proxy, through
from spotproof.smoke.emulation.object_stores import Bucket
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.processes.warm import Zygote, warm_trainers
from spotproof.smoke.train import ConfigError, TrainConfig, build

pytestmark = pytest.mark.processes


def _env(url: str, **overrides: object) -> dict[str, str]:
    env = {
        "CHECKPOINT_URL": url,
        "CHECKPOINT_INTERVAL": "10",
        "TOTAL_STEPS": "60",
        "SEED": "7",
        "MODEL_MB": "1",
        "CHECKPOINT_PART_KB": "64",
    }
    env.update({k: str(v) for k, v in overrides.items()})
    return env


EVERY_INTERVAL = [10, 20, 30, 40, 50, 60]
LAST_PERIODIC_SUPERSEDED = [10, 20, 30, 40, 60]
"""On a loaded machine the periodic save of step 50 can still be uploading when training
completes at 60; the final save then supersedes it, as it would on preemption."""


def _committed_steps(process: TrainerProcess) -> list[int]:
    return [e["step"] for e in process.of("checkpoint")]


def _run(env: dict[str, str], zygote: Zygote | None = None) -> TrainerProcess:
    """A trainer run to its end: started afresh, or forked warm from ``zygote``."""
    process = TrainerProcess(env, time.monotonic(), zygote=zygote)
    process.finish(timeout=120)
    return process


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """Where the trainers that resume are forked from (``smoke.processes.warm``): each would cost
    seconds of imports. The first run, and each test of how the process itself starts or
    leaves, start afresh."""
    with warm_trainers() as warm:
        yield warm


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path}/ckpt"


@dataclass(frozen=True)
class FreshRun:
    """A run from scratch to its end, never interrupted: its events and its checkpoints."""

    process: TrainerProcess
    checkpoints: Path

    def copied_to(self, url: str) -> None:
        """Its checkpoints, as another run's starting point at ``url``."""
        shutil.copytree(self.checkpoints, url.removeprefix("file://"))


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory: pytest.TempPathFactory) -> FreshRun:
    checkpoints = tmp_path_factory.mktemp("ref") / "ckpt"
    process = _run(_env(f"file://{checkpoints}"))
    assert process.popen.returncode == exit_codes.COMPLETED, process.stderr[-3:]
    return FreshRun(process, checkpoints)


@pytest.fixture(scope="module")
def reference_digest(fresh_run: FreshRun) -> str:
    return str(fresh_run.process.first("done")["digest"])  # type: ignore[index]


def test_fresh_start_resumes_at_zero_and_completes(fresh_run: FreshRun) -> None:
    process = fresh_run.process
    names = [e["event"] for _, e in process.events]
    assert names[:2] == ["restoring", "resumed"]
    assert process.first("resumed")["step"] == 0  # type: ignore[index]
    assert names[-2:] == ["done", "exit"] and process.first("done")["step"] == 60  # type: ignore[index]
    assert process.first("exit")["code"] == exit_codes.COMPLETED  # type: ignore[index]
    assert _committed_steps(process) in (EVERY_INTERVAL, LAST_PERIODIC_SUPERSEDED)


def test_checkpoint_events_say_how_long_each_save_held_training_up(fresh_run: FreshRun) -> None:
    process = fresh_run.process
    events = process.of("checkpoint")
    assert _committed_steps(process) in (EVERY_INTERVAL, LAST_PERIODIC_SUPERSEDED)
    for event in events:
        assert 0 < event["capture_seconds"] <= event["blocked_seconds"]
    assert all(e["kind"] == "periodic" for e in events[:-1]) and events[-1]["kind"] == "final"


def test_checkpoint_event_is_printed_only_after_its_manifest_exists(
    url: str, zygote: Zygote
) -> None:
    process = TrainerProcess(_env(url, STEP_SECONDS="0.01"), time.monotonic(), zygote=zygote)
    store = CheckpointStore(url)
    seen = 0
    while process.finish(timeout=0.001) is None or seen < len(process.of("checkpoint")):
        events = process.of("checkpoint")
        for event in events[seen:]:
            assert store.store.exists(f"manifests/{event['step']:012d}.json"), event
        seen = len(events)
    assert _committed_steps(process) in (EVERY_INTERVAL, LAST_PERIODIC_SUPERSEDED)
    assert seen == len(process.of("checkpoint"))


def test_sigterm_saves_the_current_step_and_exits_preempted(
    url: str, reference_digest: str, zygote: Zygote
) -> None:
    first = TrainerProcess(_env(url, STEP_SECONDS="0.02", EMIT_STEPS="1"), time.monotonic())
    first.wait_for(lambda e: e["event"] == "step" and e["step"] >= 23)
    first.send(signal.SIGTERM)
    assert first.finish(timeout=30) == exit_codes.PREEMPTED
    preempted = first.first("preempted")
    final = [e for e in first.of("checkpoint") if e["kind"] == "final"]
    assert preempted is not None and final and final[0]["step"] == preempted["step"]
    assert final[0]["since_signal"] < 15

    second = _run(_env(url), zygote)
    assert second.first("resumed")["step"] == preempted["step"]  # type: ignore[index]
    assert second.first("done")["digest"] == reference_digest  # type: ignore[index]


def test_corrupt_newest_checkpoint_is_skipped_and_the_previous_one_resumed(
    url: str, fresh_run: FreshRun, reference_digest: str, zygote: Zygote
) -> None:
    fresh_run.copied_to(url)
    store = CheckpointStore(url)
    newest = store.committed_steps()[-1]
    part = Manifest.decode(store.store.get(f"manifests/{newest:012d}.json")).parts[0]
    data = bytearray(store.store.get(part.key))
    data[-1] ^= 0xFF
    store.store.put(part.key, bytes(data))

    second = _run(_env(url), zygote)

    assert second.first("skipped")["step"] == newest  # type: ignore[index]
    assert second.first("resumed")["step"] == store.committed_steps()[-2]  # type: ignore[index]
    assert second.first("done")["digest"] == reference_digest  # type: ignore[index]


IDENTITY = {"seed": 7, "model_mb": 1.0}
"""The run identity of ``_env``'s runs, as their checkpoints record it."""


def test_a_newest_checkpoint_that_verifies_but_does_not_restore_is_skipped(
    url: str, fresh_run: FreshRun, reference_digest: str, zygote: Zygote
) -> None:
    fresh_run.copied_to(url)
    CheckpointStore(url).save(70, {"skeleton": b"not a skeleton", "tensors": b""}, IDENTITY)

    second = _run(_env(url), zygote)

    assert second.first("skipped")["step"] == 70  # type: ignore[index]
    assert "the skeleton is unreadable" in second.first("skipped")["reason"]  # type: ignore[index]
    assert second.first("resumed")["step"] == 60  # type: ignore[index]
    assert second.first("done")["digest"] == reference_digest  # type: ignore[index]


def _half_restorable_state() -> dict[str, bytes | memoryview]:
    """A model of the run's shape with other weights, and an optimizer over only some of
    its parameters: a restore loads the weights, then fails at the optimizer."""
    config = TrainConfig(total_steps=60, seed=99, model_mb=1)
    model, _, _ = build(config, Alone())
    optimizer = torch.optim.AdamW(list(model.parameters())[:2], lr=1e-3)
    model(torch.randn(2, model[0].in_features)).sum().backward()
    optimizer.step()
    return StateBuffer().capture(model, optimizer, 10)


def test_when_no_checkpoint_restores_the_trainer_refuses_to_train_over_them(url: str) -> None:
    """Checkpoints that exist and fit nothing of this run are most likely another run's,
    at a URL given by mistake: training from step 0 there would prune them away."""
    CheckpointStore(url).save(10, _half_restorable_state())  # no identity: an older release's

    done = _trainer_exit(_env(url))

    assert done.returncode == exit_codes.BAD_CONFIG
    assert "does not fit this model" in _events(done.stdout)["skipped"]["reason"]
    assert "resumed" not in _events(done.stdout)
    assert done.stderr.count("\n") == 2  # the skipped checkpoint, and why it exits
    assert "no checkpoint under the CHECKPOINT_URL fits these objects" in done.stderr
    assert CheckpointStore(url).committed_steps() == [10]


def _events(stdout: str) -> dict[str, dict[str, object]]:
    """The first event of each name a trainer printed."""
    found: dict[str, dict[str, object]] = {}
    for line in stdout.splitlines():
        event = json.loads(line)
        found.setdefault(event["event"], event)
    return found


def test_a_gang_checkpoint_this_process_cannot_split_fails_in_one_line(url: str) -> None:
    shards = tuple(Manifest(20, f"g1-rank{rank:05d}", 1.0, ()) for rank in range(2))
    store = CheckpointStore(url).store
    store.put_if_absent(manifest_key(20), GangManifest(20, 1.0, shards).encode())

    done = _trainer_exit(_env(url))

    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1
    assert "step 20 was checkpointed by 2 ranks and this gang has 1" in done.stderr


def test_rerun_of_a_finished_job_completes_at_once_with_the_same_digest(
    url: str, fresh_run: FreshRun, reference_digest: str, zygote: Zygote
) -> None:
    fresh_run.copied_to(url)
    again = _run(_env(url), zygote)
    assert again.first("resumed")["step"] == 60  # type: ignore[index]
    assert again.first("done")["digest"] == reference_digest  # type: ignore[index]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"CHECKPOINT_URL": ""}, "CHECKPOINT_URL is required"),
        ({"TOTAL_STEPS": "lots"}, "TOTAL_STEPS='lots': not a whole number; allowed 1 to"),
        ({"CHECKPOINT_INTERVAL": "0"}, "CHECKPOINT_INTERVAL='0': allowed 1 to"),
        ({"CHECKPOINT_URL": "my-bucket/ckpt"}, "unsupported scheme '(none)'"),
        ({"SEED": str(2**64)}, f"SEED='{2**64}': allowed 0 to {2**32 - 1}"),
        ({"MODEL_MB": "nan"}, "MODEL_MB='nan': not a number; allowed 0.01 to 65536"),
        ({"CHECKPOINT_URL": "file:///proc/spotproof/ckpt"}, "cannot create directory"),
    ],
)
def test_bad_configuration_fails_the_job_at_once(
    url: str, env: dict[str, str], says: str, zygote: Zygote
) -> None:
    done = _warm_exit(zygote, {**_env(url), **env, "PATH": "/usr/bin:/bin"})
    assert done.returncode == exit_codes.BAD_CONFIG
    assert set(_events(done.stdout)) <= {"restoring", "exit"}  # nothing trained or saved
    assert done.stderr.count("\n") == 1 and says in done.stderr


def _warm_exit(zygote: Zygote, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A trainer forked with exactly ``env``, run to its exit, as ``subprocess.run`` says."""
    trainer = zygote.spawn(env)
    out, err = trainer.stdout.read(), trainer.stderr.read()
    return subprocess.CompletedProcess([], trainer.wait(60), out, err)


def _trainer_exit(
    env: dict[str, str], timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spotproof.smoke.train"],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


BACKSTOP_SECONDS = 120
"""How long a trainer that should leave of itself may run before the test gives up on it:
far below what it would wait were the bound under test not applied (a gang's rendezvous
waits 600 s by default), far above a cold start on a loaded machine. The tests judge why
it left, from its line and its events, not how long that took on this machine."""


def test_credentials_in_a_checkpoint_url_are_refused_and_never_printed(
    url: str, zygote: Zygote
) -> None:
    done = _warm_exit(zygote, _env("s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/ckpt"))
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1 and "credentials in a URL are refused" in done.stderr
    assert "wJalrXUtnFEMI" not in done.stderr and "AKIAEXAMPLE" not in done.stderr


def test_a_checkpoint_url_under_a_file_fails_in_one_line(tmp_path: Path, zygote: Zygote) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    done = _warm_exit(zygote, _env(f"file://{tmp_path}/a-file/ckpt"))
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1 and "Not a directory" in done.stderr


def test_a_checkpoint_of_another_run_is_refused_not_resumed(url: str) -> None:
    CheckpointStore(url).save(10, {"skeleton": b"", "tensors": b""}, IDENTITY)
    done = _trainer_exit(_env(url, SEED=8))
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stdout.count('"resumed"') == 0
    assert done.stderr.count("\n") == 1
    assert "step 10 of another run (seed=7, model_mb=1.0; this one has seed=8" in done.stderr
    # Nothing of the other run was touched.
    assert CheckpointStore(url).committed_steps() == [10]


def test_unreachable_store_exits_for_a_retry_in_one_line(url: str) -> None:
    from spotproof.smoke.emulation.object_stores import free_port  # noqa: PLC0415

    env = _env(
        "s3://spotproof-smoke/x",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_MAX_ATTEMPTS="1",
    )
    done = subprocess.run(
        [sys.executable, "-m", "spotproof.smoke.train"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == exit_codes.STORAGE_UNAVAILABLE
    assert done.stderr.count("\n") == 1 and "endpoint unreachable" in done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("SEED", "-1", "SEED='-1': allowed 0 to 4294967295"),
        ("MODEL_MB", "inf", "MODEL_MB='inf': not a number; allowed 0.01 to 65536"),
        ("MODEL_MB", "1e999", "MODEL_MB='1e999': allowed 0.01 to 65536"),
        ("STEP_SECONDS", "nan", "STEP_SECONDS='nan': not a number; allowed 0 to 86400"),
        ("GRACE_SECONDS", "-inf", "GRACE_SECONDS='-inf': not a number; allowed 1 to 86400"),
        ("TRAIN_THREADS", "100000", "TRAIN_THREADS='100000': allowed 1 to"),
        ("TRAIN_THREADS", "0", "TRAIN_THREADS='0': allowed 1 to"),
        ("KEEP_CHECKPOINTS", "0", "KEEP_CHECKPOINTS='0': allowed 1 to 1000"),
        ("CHECKPOINT_PART_KB", "1e3", "CHECKPOINT_PART_KB='1e3': not a whole number"),
        ("SEED", "٣", "SEED='٣': not a whole number; allowed 0 to 4294967295"),
        ("TOTAL_STEPS", "1_000", "TOTAL_STEPS='1_000': not a whole number"),
        ("KEEP_CHECKPOINTS", " 5 ", "KEEP_CHECKPOINTS=' 5 ': not a whole number"),
        ("TOTAL_STEPS", "9" * 5000, "TOTAL_STEPS='99999"),
        ("WORLD_SIZE", "-1", "WORLD_SIZE='-1': allowed 1 to 16"),
        ("RENDEZVOUS_SECONDS", "0", "RENDEZVOUS_SECONDS='0': allowed 10 to 86400"),
        ("CHECKPOINT_PART_KB", "65537", "CHECKPOINT_PART_KB='65537': allowed 0 to 65536"),
        ("EMIT_STEPS", "yes", "EMIT_STEPS='yes': allowed 0 or 1"),
        ("PEER_WAIT_SECONDS", "1e9", "PEER_WAIT_SECONDS='1e9': allowed 0 to 86400"),
    ],
)
def test_each_variable_is_refused_outside_its_range_naming_the_range(
    url: str, variable: str, value: str, says: str
) -> None:
    """The reference run's own settings, and training()'s, each read once."""
    env = _env(url, **{variable: value})
    with pytest.raises(ConfigError) as raised:
        TrainConfig.from_env(env)
        RunSettings.from_env(env)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_train_threads_may_use_every_cpu_the_process_may_run_on(url: str) -> None:
    cpus = str(usable_cpus())
    assert TrainConfig.from_env(_env(url, TRAIN_THREADS=cpus)).threads == int(cpus)


@pytest.mark.parametrize(
    ("gang", "says"),
    [
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK='2': allowed 0 to 1"),
        ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR is required"),
        (
            {"WORLD_SIZE": "2", "MASTER_ADDR": "rank 0!", "MASTER_PORT": "1"},
            "MASTER_ADDR='rank 0!'",
        ),
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "0"}, "MASTER_PORT='0'"),
        ({"WORLD_SIZE": "3"}, "WORLD_SIZE=3: must divide the batch of 16 rows"),
        (
            {
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29999",
                "PEER_SILENCE_SECONDS": "1",
            },
            "PEER_SILENCE_SECONDS='1': allowed 3 to 86400",
        ),
    ],
)
def test_a_gang_that_cannot_assemble_is_refused_at_once_in_one_line(
    url: str, gang: dict[str, str], says: str
) -> None:
    done = _trainer_exit({**_env(url), **gang}, timeout=BACKSTOP_SECONDS)
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1 and says in done.stderr
    assert '"restoring"' not in done.stdout  # refused before it joined any gang: at once


def test_a_rank_whose_peers_never_come_leaves_after_the_rendezvous_timeout(url: str) -> None:
    from spotproof.smoke.emulation.object_stores import free_port  # noqa: PLC0415

    gang = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    env = _env(url, **gang, MASTER_PORT=free_port(), RENDEZVOUS_SECONDS=10)
    done = _trainer_exit(env | {"PEER_WAIT_SECONDS": "0"}, timeout=BACKSTOP_SECONDS)
    assert done.returncode == exit_codes.PEER_LOST, done.stderr
    # Its own deadline ended the wait (the default's 600 s would outlast the backstop).
    assert "did not assemble at 127.0.0.1" in done.stderr and "within 10 s" in done.stderr


def test_a_rank_whose_peer_dies_inside_a_save_leaves_with_the_gang_not_after_the_shard_wait(
    emulators: dict[str, Bucket],
) -> None:
    """Rank 1 is killed while its shard of step 10 uploads (the proxy holds it, so it never
    lands), with both ranks at step 20 waiting on that save. Rank 0 waits together with its
    peer, so the next collective tells it the peer is gone and it waits to be torn down;
    waiting on the missing shard alone it sat out the shard timeout (120 s) first."""
    from spotproof.smoke.emulation.object_stores import free_port  # noqa: PLC0415

    s3 = emulators["s3"]
    with fault_proxy(emulator_port("s3", s3.env)) as proxy:
        held = proxy.add(Fault("PUT", r"steps/0*10/[^/?]*-rank00001/", "hold"))
        gang = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_port()}
        url = s3.prefix(f"peer-dies-mid-save-{id(proxy):x}")
        env = {
            **through("s3", s3.env, proxy),
            **_env(url, **gang, TOTAL_STEPS=1000, EMIT_STEPS=1),
        }
        ranks = [
            TrainerProcess({**env, "RANK": str(rank)}, time.monotonic(), index=rank)
            for rank in (0, 1)
        ]
        try:
            assert held.hit.wait(BACKSTOP_SECONDS), "rank 1 never uploaded step 10"
            for rank in ranks:  # both trained on to the next save, which waits for step 10's
                assert rank.wait_for(lambda e: (e["event"], e.get("step")) == ("step", 20))
            ranks[1].send(signal.SIGKILL)
            ranks[1].finish()
            killed = ranks[0].now()
            waiting = ranks[0].wait_for(
                lambda e: e["event"] == "awaiting_teardown", BACKSTOP_SECONDS
            )
            assert waiting is not None, ranks[0].stderr[-5:]
            [(lost_at, _)] = [(t, e) for t, e in ranks[0].events if e["event"] == "peer_lost"]
            assert lost_at - killed < DEFAULT_SHARD_TIMEOUT / 2
            assert not [e for _, e in ranks[0].events if e.get("step", 0) > 20]
            ranks[0].send(signal.SIGTERM)  # the JobSet deletes the survivor's pod
            assert ranks[0].finish(timeout=60) == exit_codes.PEER_LOST
        finally:
            for rank in ranks:
                rank.send(signal.SIGKILL)
                rank.finish()


def test_sigterm_while_the_gang_assembles_leaves_at_once_preempted(url: str) -> None:
    from spotproof.smoke.emulation.object_stores import free_port  # noqa: PLC0415

    gang = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    port = free_port()
    process = TrainerProcess(_env(url, **gang, MASTER_PORT=port), time.monotonic())
    # Rank 0 serves the rendezvous store once torch is imported and its guard is up, and
    # then waits there for rank 1; a fixed sleep raced a slow import on a busy machine.
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        assert time.monotonic() < deadline, "rank 0 never served its store"
        time.sleep(0.1)
    process.send(signal.SIGTERM)
    sent = time.monotonic()
    code = process.finish(timeout=30)
    assert code == exit_codes.PREEMPTED
    assert time.monotonic() - sent < 10
    assert process.first("preempted")["step"] == 0  # type: ignore[index]
