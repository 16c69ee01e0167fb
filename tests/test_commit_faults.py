"""A manifest commit that fails is retried and then raised, never mistaken for a lost race,
whatever the step number; and nothing committed is ever lost.

A fault-injecting proxy sits between the runtime and each emulator and breaks exactly the
manifest request of one step: with a TCP reset before it reaches the store, a reset after
the store acted on it (the answer is lost), or an HTTP 503.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore, CommitFailed
from spotproof.runtime.checkpointer.layout import manifest_key, step_prefix
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import AlreadyExists, StorageError
from spotproof.smoke.emulation.fault_proxy import (
    Fault,
    FaultProxy,
    emulator_port,
    fault_proxy,
    through,
)
from spotproof.smoke.emulation.object_stores import Bucket

pytestmark = pytest.mark.processes

PART = 16 * 1024
MANIFEST_METHOD = {"s3": "PUT", "gcs": "POST", "azure": "PUT"}
"""How each store's SDK creates an object (GCS names it in the upload's body)."""


@dataclass
class Proxied:
    store: str
    url: str
    proxy: FaultProxy

    def break_manifest(self, step: int, action: str, times: int | None = None) -> str:
        pattern = re.escape(manifest_key(step))
        self.proxy.add(Fault(MANIFEST_METHOD[self.store], pattern, action, times))
        return pattern

    def checkpoints(self, **options: object) -> CheckpointStore:
        return CheckpointStore(self.url, part_bytes=PART, keep=10, **options)  # type: ignore[arg-type]


@pytest.fixture
def fast_sdk_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDKs back off for seconds between their own retries (Azure 15 s, gcsfs up to
    16 s); shortened here so a test runs in seconds. How many times they retry is kept."""
    original = asyncio.sleep

    async def brief(delay: float, result: object = None) -> object:
        return await original(min(delay, 0.01), result)

    monkeypatch.setattr(asyncio, "sleep", brief)


@pytest.fixture(params=["s3", "gcs", "azure"])
def proxied(
    request: pytest.FixtureRequest,
    emulators: dict[str, Bucket],
    monkeypatch: pytest.MonkeyPatch,
    fast_sdk_backoff: None,
) -> Iterator[Proxied]:
    emulator = emulators[request.param]
    with fault_proxy(emulator_port(request.param, emulator.env)) as proxy:
        for key, value in through(request.param, emulator.env, proxy).items():
            monkeypatch.setenv(key, value)
        name = f"faults-{request.node.name.split('[')[0][-24:]}-{id(proxy):x}"
        yield Proxied(request.param, emulator.prefix(name), proxy)


def _blobs(step: int) -> dict[str, bytes]:
    return {"state": bytes([step % 251]) * (3 * PART + 5), "meta": f"step {step}".encode()}


def test_commit_whose_answer_is_lost_is_committed(proxied: Proxied) -> None:
    checkpoints = proxied.checkpoints()
    pattern = proxied.break_manifest(412, "reset-after", times=1)

    result = checkpoints.save(412, _blobs(412))

    assert result.committed, result.reason
    assert proxied.proxy.seen(MANIFEST_METHOD[proxied.store], pattern)[0] == "reset-after"
    loaded = proxied.checkpoints().load_latest()
    assert loaded is not None and loaded.step == 412 and loaded.blobs == _blobs(412)


@pytest.mark.parametrize("step", [412, 403])
def test_commit_reset_on_every_attempt_raises_and_loses_nothing_committed(
    proxied: Proxied, step: int
) -> None:
    checkpoints = proxied.checkpoints(commit_backoff=0.01)
    assert checkpoints.save(10, _blobs(10)).committed
    pattern = proxied.break_manifest(step, "reset")

    with pytest.raises(CommitFailed) as raised:
        checkpoints.save(step, _blobs(step))

    assert f"commit of step {step} unconfirmed after 3 attempts" in str(raised.value)
    assert raised.value.failure is Failure.UNREACHABLE
    assert "another writer" not in str(raised.value)
    attempts = proxied.proxy.seen(MANIFEST_METHOD[proxied.store], pattern)
    assert len(attempts) >= 3 and set(attempts) == {"reset"}
    proxied.proxy.clear()
    loaded = proxied.checkpoints().load_latest()
    assert loaded is not None and loaded.step == 10 and loaded.blobs == _blobs(10)
    # The payload stays: had the manifest landed after all, it would need it.
    assert checkpoints.store.list(f"{step_prefix(step)}/{checkpoints.writer_id}")


def test_a_commit_that_landed_but_never_got_an_answer_is_unconfirmed_never_denied(
    proxied: Proxied,
) -> None:
    """The first write lands and its answer is lost; every retry is cut before it reaches
    the store. Whether the step is committed only the store can say: the save says it does
    not know, and the next load finds the step."""
    checkpoints = proxied.checkpoints(commit_backoff=0.01)
    proxied.break_manifest(412, "reset-after", times=1)
    proxied.break_manifest(412, "reset")

    with pytest.raises(CommitFailed) as raised:
        checkpoints.save(412, _blobs(412))

    assert "commit of step 412 unconfirmed" in str(raised.value)
    assert "may have landed" in str(raised.value) and "not committed" not in str(raised.value)
    proxied.proxy.clear()
    loaded = proxied.checkpoints().load_latest()
    assert loaded is not None and loaded.step == 412 and loaded.blobs == _blobs(412)


def test_commit_answered_503_is_retried_until_it_lands(proxied: Proxied) -> None:
    checkpoints = proxied.checkpoints(commit_backoff=0.01)
    pattern = proxied.break_manifest(412, "status:503", times=2)

    result = checkpoints.save(412, _blobs(412))

    assert result.committed
    seen = proxied.proxy.seen(MANIFEST_METHOD[proxied.store], pattern)
    assert seen[:2] == ["status:503", "status:503"] and len(seen) >= 3
    loaded = proxied.checkpoints().load_latest()
    assert loaded is not None and loaded.step == 412


def test_commit_refused_403_on_every_attempt_is_a_credential_failure(proxied: Proxied) -> None:
    checkpoints = proxied.checkpoints(commit_backoff=0.01)
    proxied.break_manifest(403, "status:403")

    with pytest.raises(CommitFailed) as raised:
        checkpoints.save(403, _blobs(403))

    assert raised.value.failure is Failure.DENIED


# --- the commit's decisions, one store call at a time ---------------------------------


class _Scripted:
    """Wraps a real store; ``put_if_absent`` and ``get`` of manifests follow a script."""

    def __init__(self, store: object, puts: list[BaseException | None], get: object = None):
        self._store, self.puts, self.get_result = store, puts, get
        self.calls = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def put_if_absent(self, key: str, data: bytes) -> None:
        self.calls += 1
        outcome = self.puts.pop(0) if self.puts else None
        if isinstance(outcome, AlreadyExists) and self.get_result is None:
            self._store.put_if_absent(key, data)  # type: ignore[attr-defined]
        if outcome is not None:
            raise outcome
        self._store.put_if_absent(key, data)  # type: ignore[attr-defined]

    def get(self, key: str, *, limit: int | None = None) -> bytes:
        if key.startswith("manifests/") and isinstance(self.get_result, BaseException):
            raise self.get_result
        return self._store.get(key, limit=limit)  # type: ignore[attr-defined]


def _scripted(tmp_path: Path, puts: list[BaseException | None], get: object = None) -> tuple:
    checkpoints = CheckpointStore(f"file://{tmp_path}", part_bytes=PART, commit_backoff=0.05)
    scripted = _Scripted(checkpoints.store, puts, get)
    checkpoints.store = scripted  # type: ignore[assignment]
    return checkpoints, scripted


def test_commit_backs_off_between_attempts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("spotproof.runtime.checkpointer.checkpoint.time.sleep", slept.append)
    down = StorageError("connection reset", Failure.UNREACHABLE)
    checkpoints, scripted = _scripted(tmp_path, [down, down, None])

    assert checkpoints.save(7, _blobs(7)).committed
    assert scripted.calls == 3 and slept == [0.05, 0.1]


def test_already_exists_with_our_own_bytes_is_our_commit(tmp_path: Path) -> None:
    # The SDK's retry of a request that landed: the store now says "exists", with our bytes.
    checkpoints, _ = _scripted(tmp_path, [AlreadyExists("manifests/000000000007.json")])

    result = checkpoints.save(7, _blobs(7))

    assert result.committed
    loaded = checkpoints.load_latest()
    assert loaded is not None and loaded.step == 7


def test_unreadable_existing_manifest_raises_and_keeps_the_payload(tmp_path: Path) -> None:
    unreadable = StorageError("read timed out", Failure.UNREACHABLE)
    checkpoints, _ = _scripted(tmp_path, [AlreadyExists("m")] * 3, get=unreadable)

    reading_back = re.escape(f"reading back {manifest_key(7)} failed")
    with pytest.raises(CommitFailed, match=reading_back):
        checkpoints.save(7, _blobs(7))

    assert checkpoints.store.list(f"{step_prefix(7)}/{checkpoints.writer_id}")


@pytest.mark.parametrize("proxied", ["s3"], indirect=True)
def test_a_final_save_whose_commit_goes_unanswered_is_said_unknown_not_lost(
    proxied: Proxied, tmp_path: Path
) -> None:
    from tests.test_training_loop import SCRIPT, _finish, _start, _until_step  # noqa: PLC0415

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proxied.proxy.add(Fault(MANIFEST_METHOD[proxied.store], r"manifests/", "reset"))
    trainer = _start(script, proxied.url, CHECKPOINT_INTERVAL="1000", STEP_SECONDS="0.05")
    _until_step(trainer, 3)
    trainer.send_signal(signal.SIGTERM)

    code, lines = _finish(trainer)

    assert code == exit_codes.PREEMPTED, lines
    [said] = [line for line in lines if "event=final_save" in line]
    assert "outcome=unknown" in said and "commit unconfirmed" in said
