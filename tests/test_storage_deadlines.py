"""A store that accepts connections and never answers (or answers too slowly for the
grace period) costs a bounded time: start-up gives up within its deadline, each call
within its SDK timeouts, and a final save past the grace period is abandoned between
parts with the previous checkpoint intact."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.checkpointer import transfer
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.layout import step_prefix
from spotproof.runtime.storage import StorageError, deadlines, open_store
from spotproof.smoke.emulation.fault_proxy import Fault, emulator_port, fault_proxy, through
from spotproof.smoke.emulation.object_stores import AZURITE_ACCOUNT_KEY, Bucket, free_port
from spotproof.smoke.processes.trainer_process import TrainerProcess

pytestmark = pytest.mark.processes


@contextlib.contextmanager
def silent_endpoint() -> Iterator[int]:
    """A port that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    closing = threading.Event()

    def accept() -> None:
        while not closing.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        closing.set()
        server.close()
        for connection in held:
            connection.close()


def _pointed_at(store: str, port: int) -> tuple[str, dict[str, str]]:
    endpoint = f"http://127.0.0.1:{port}"
    return {
        "s3": (
            "s3://silent/ckpt",
            {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1",
            },
        ),
        "gcs": ("gs://silent/ckpt", {"STORAGE_EMULATOR_HOST": endpoint}),
        "azure": (
            "az://silent/ckpt",
            {
                "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=http;"
                f"AccountName=devstoreaccount1;AccountKey={AZURITE_ACCOUNT_KEY};"
                f"BlobEndpoint={endpoint}/devstoreaccount1;"
            },
        ),
    }[store]


def test_within_returns_the_result_or_raises_the_calls_own_error() -> None:
    assert deadlines.within(1, "quick", lambda: 42) == 42
    with pytest.raises(FileNotFoundError):
        deadlines.within(1, "missing", lambda: open("/nonexistent/x"))  # noqa: SIM115


def test_within_gives_up_on_a_call_that_does_not_return() -> None:
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"stuck: no answer within 0\.2 s"):
        deadlines.within(0.2, "stuck", lambda: time.sleep(5))
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("store", ["s3", "gcs", "azure"])
def test_opening_a_store_that_never_answers_fails_within_the_startup_deadline(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    within = deadlines.within

    def timed(seconds: float, what: str, call: Any) -> Any:
        started = time.monotonic()
        try:
            return within(seconds, what, call)
        finally:
            waits.append(time.monotonic() - started)

    # Timed: the wait on the bucket alone. The SDK's import and set-up before it are
    # CPU work, which a busy machine stretches; the deadline bounds the waiting.
    monkeypatch.setattr(deadlines, "within", timed)
    with silent_endpoint() as port:
        url, env = _pointed_at(store, port)
        for key, value in {**env, settings.STORAGE_STARTUP_SECONDS.name: "2"}.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(StorageError, match="reaching the bucket: no answer within 2 s"):
            open_store(url)
    [waited] = waits
    # The slack is for the caller getting the interpreter back after the deadline: the
    # abandoned SDK thread may hold the GIL through a C call, and on a busy machine that
    # took 2 s once (CI, gcs). Without the deadline one attempt alone waits READ_SECONDS (20).
    assert 2 <= waited < 6


def test_one_s3_call_to_a_silent_endpoint_gives_up_after_its_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each attempt waits READ_SECONDS of silence; shortened here, the number kept.
    monkeypatch.setattr(deadlines, "READ_SECONDS", 0.5)
    monkeypatch.setattr(deadlines, "CONNECT_SECONDS", 0.5)
    from spotproof.runtime.storage.backends import NAMED  # noqa: PLC0415
    from spotproof.runtime.storage.opening import _filesystem  # noqa: PLC0415
    from spotproof.runtime.storage.s3 import S3Store  # noqa: PLC0415

    with silent_endpoint() as port:
        url, env = _pointed_at("s3", port)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        store = S3Store(url, _filesystem(url, NAMED["s3"], S3Store, {}), "silent/ckpt")
        started = time.monotonic()
        with pytest.raises(StorageError):
            store.exists("manifests/000000000001.json")
        elapsed = time.monotonic() - started
    # Every attempt waited out its read timeout; between them botocore's standard mode
    # backs off up to 1 s, then 2 s. Left to its defaults one attempt alone takes 60 s.
    assert deadlines.ATTEMPTS * 0.5 <= elapsed < 15


def test_a_trainer_whose_store_never_answers_exits_for_a_retry_in_one_line() -> None:
    with silent_endpoint() as port:
        url, env = _pointed_at("s3", port)
        trainer = TrainerProcess(
            {
                **env,
                "CHECKPOINT_URL": url,
                "CHECKPOINT_INTERVAL": "5",
                "TOTAL_STEPS": "10",
                settings.STORAGE_STARTUP_SECONDS.name: "3",
            },
            time.monotonic(),
        )
        code = trainer.finish(timeout=120)  # a backstop: the bound is below
    assert code == exit_codes.STORAGE_UNAVAILABLE
    [line] = [line for line in trainer.stderr if "event=exit" in line]
    assert "reaching the bucket: no answer within 3 s" in line  # why it left: the deadline
    # How long it waited, from its own events: from opening the store ("restoring") to its
    # exit, the 3 s deadline and a client's set-up; bounded by the deadline plus what this
    # machine took, in the same run, to bring the trainer to that point (imports: seconds
    # of CPU, stretched as much as anything else when the cores are busy). An idle machine
    # holds it to about 3 + 5 s; a trainer that waited its SDK's timeouts would take minutes.
    at = {
        event["event"]: t for t, event in trainer.events if event["event"] in ("restoring", "exit")
    }
    started_up, waited = at["restoring"], at["exit"] - at["restoring"]
    assert waited < 3 + started_up, (waited, started_up)


_SLOWED_TRAINER = {
    "CHECKPOINT_INTERVAL": "10",
    "TOTAL_STEPS": "100000",
    "MODEL_MB": "1",
    "CHECKPOINT_PART_KB": "64",  # ~16 parts: at 2 s a part, more than 3 s of grace
    "STEP_SECONDS": "0.02",
    "GRACE_SECONDS": "3",
}
"""A trainer whose final save cannot fit its grace once every part upload takes 2 s."""


def test_a_final_save_too_slow_for_the_grace_period_is_abandoned_not_killed(
    emulators: dict[str, Bucket],
) -> None:
    emulator = emulators["s3"]
    with fault_proxy(emulator_port("s3", emulator.env)) as proxy:
        url = emulator.prefix(f"slow-final-{id(proxy):x}")
        trainer = TrainerProcess(
            {**through("s3", emulator.env, proxy), **_SLOWED_TRAINER, "CHECKPOINT_URL": url},
            time.monotonic(),
        )
        committed = trainer.wait_for(lambda e: e["event"] == "checkpoint", timeout=120)
        assert committed is not None
        # From now on every part upload takes 2 s: ~16 parts cannot fit in 3 s of grace.
        proxy.add(Fault("PUT", r"/steps/", "delay:2"))
        signalled = time.monotonic()
        trainer.send(signal.SIGTERM)
        code = trainer.finish(timeout=30)
        took = time.monotonic() - signalled
    assert code == exit_codes.PREEMPTED
    [refused] = [e for e in trainer.of("checkpoint_refused") if e["kind"] == "final"]
    assert "deadline" in refused["reason"]
    # One wave of parts: once the first took 2 s, none that would end past the deadline
    # (2.5 s) was started, so the process leaves within about its grace (3 s) and no part
    # on the wire holds it to the SIGKILL. Starting a second wave took 5.2 s.
    threads = transfer.plan(committed["bytes"]).threads  # as the trainer plans, here
    started = {
        where.split("\n")[0]
        for method, where, _ in proxy.log
        if method == "PUT" and step_prefix(refused["step"]) in where
    }
    assert 0 < len(started) <= threads
    assert took < 3 + 2.5  # the grace, then the abandoned payload's deletion and the exit
    with emulator.apply():
        latest = CheckpointStore(url).load_latest()
    assert latest is not None and latest.step >= committed["step"]
    assert latest.step < refused["step"]  # the abandoned step was never committed


def test_a_rank_stopped_by_a_peer_too_slow_to_save_gives_up_within_the_grace(
    emulators: dict[str, Bucket],
) -> None:
    """Rank 1 is preempted and its store slows down, so its shard never lands; rank 0,
    stopped by rank 1's notice, waits for that shard no longer than a grace period, and
    both leave: rank 1 within its grace, rank 0 to wait for the teardown."""
    emulator = emulators["s3"]
    with fault_proxy(emulator_port("s3", emulator.env)) as proxy:
        common = {
            **_SLOWED_TRAINER,
            "CHECKPOINT_URL": emulator.prefix(f"slow-peer-{id(proxy):x}"),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
        }
        origin = time.monotonic()
        healthy = TrainerProcess({**emulator.env, **common, "RANK": "0"}, origin, index=0)
        slowed = TrainerProcess(
            {**through("s3", emulator.env, proxy), **common, "RANK": "1"}, origin, index=1
        )
        try:
            assert healthy.wait_for(lambda e: e["event"] == "checkpoint", timeout=120)
            proxy.add(Fault("PUT", r"/steps/", "delay:2"))  # rank 1's uploads only
            signalled = time.monotonic()
            slowed.send(signal.SIGTERM)
            waiting = healthy.wait_for(lambda e: e["event"] == "awaiting_teardown", timeout=60)
            waited = time.monotonic() - signalled
            code = slowed.finish(timeout=30)
            took = time.monotonic() - signalled
        finally:
            healthy.send(signal.SIGTERM)  # the JobSet's teardown
            healthy.finish(timeout=30)
            slowed.send(signal.SIGKILL)
    assert waiting is not None and waited < 3 + 2 + 2.5
    assert code == exit_codes.PREEMPTED and took < 3 + 2 + 2.5
    [refused] = [e for e in healthy.of("checkpoint_refused") if e["kind"] == "final"]
    assert "deadline" in refused["reason"]


@pytest.mark.parametrize(
    ("extra", "package", "first_with_create_only"),
    [
        ("s3", "s3fs", "2025.7.0"),
        ("gcs", "gcsfs", "2024.12.0"),
        ("azure-blob", "adlfs", "2024.12.0"),
    ],
)
def test_no_store_extra_admits_a_filesystem_without_create_only_writes(
    extra: str, package: str, first_with_create_only: str
) -> None:
    # A manifest is committed with pipe_file(mode="create"); an older filesystem would
    # silently overwrite another writer's commit.
    import tomllib  # noqa: PLC0415

    from packaging.requirements import Requirement  # noqa: PLC0415
    from packaging.version import Version  # noqa: PLC0415

    from tests.support import REPO  # noqa: PLC0415

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    [requirement] = [Requirement(r) for r in extras[extra] if Requirement(r).name == package]
    floor = Version(first_with_create_only)
    assert floor in requirement.specifier
    assert not any(
        Version(v) in requirement.specifier
        for v in ("2024.6.0", "2024.10.0", f"{floor.major}.{floor.minor - 1}.0")
    )
