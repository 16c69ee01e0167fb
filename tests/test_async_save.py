"""Background saves, and the final save that waits for or supersedes the one in flight."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore, SaveResult
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import StorageError
from spotproof.smoke.emulation.object_stores import Bucket


def _payload(step: int) -> dict[str, bytes]:
    return {"state": bytes([step]) * (2 * 1024 * 1024)}


def _store(bucket: Bucket) -> CheckpointStore:
    # Many small parts: the upload takes long enough to be caught in flight.
    return CheckpointStore(bucket.url, part_bytes=16 * 1024, parallelism=2, keep=10)


def test_capture_runs_between_steps_and_the_upload_in_the_background(bucket: Bucket) -> None:
    done: list[SaveResult] = []
    uploaded_in: list[threading.Thread] = []
    captured_in: list[threading.Thread] = []
    saver = AsyncCheckpointer(
        _store(bucket),
        on_start=lambda step, kind: uploaded_in.append(threading.current_thread()),
        on_done=lambda result, kind: done.append(result),
    )

    def capture() -> dict[str, bytes]:
        captured_in.append(threading.current_thread())
        return _payload(10)

    saver.save_async(10, capture, {})
    result = saver.wait()

    assert result is not None and result.committed and done == [result]
    assert captured_in == [threading.current_thread()]
    assert uploaded_in and uploaded_in[0] is not threading.current_thread()


def test_final_save_supersedes_an_older_save_in_flight(bucket: Bucket) -> None:
    store = _store(bucket)
    started = threading.Event()
    saver = AsyncCheckpointer(store, on_start=lambda step, kind: started.set())
    saver.save_async(10, lambda: _payload(10), {})
    started.wait(10)

    final = saver.save_final(12, lambda: _payload(12), {})

    assert final.committed and final.step == 12
    assert store.committed_steps() == [12]
    # Objects, not one level of names: when the cancel came after some parts were
    # written, moto goes on naming the writer's prefix over their delete markers, which
    # S3 does not (ObjectStore.keys_under); this failed once in CI that way.
    assert store.store.keys_under("steps/000000000010") == []


def test_final_save_of_the_step_in_flight_just_waits_for_it(bucket: Bucket) -> None:
    store = _store(bucket)
    kinds: list[str] = []
    saver = AsyncCheckpointer(store, on_done=lambda result, kind: kinds.append(kind))
    saver.save_async(10, lambda: _payload(10), {})

    final = saver.save_final(10, lambda: _payload(10), {})

    assert final.committed and kinds == ["periodic"]
    assert store.committed_steps() == [10]


def test_next_periodic_save_waits_for_the_previous_one(bucket: Bucket) -> None:
    store = _store(bucket)
    saver = AsyncCheckpointer(store)
    saver.save_async(10, lambda: _payload(10), {})
    saver.save_async(20, lambda: _payload(20), {})
    saver.wait()
    assert store.committed_steps() == [10, 20]


def test_each_save_reports_how_long_it_held_training_up(tmp_path: Path) -> None:
    gate = threading.Event()
    store = CheckpointStore(f"file://{tmp_path}", keep=10)
    slow_put = store.store.put

    def put(*args: Any, **kwargs: Any) -> None:
        gate.wait(10)  # the first upload is still running when the next save is due
        slow_put(*args, **kwargs)

    store.store.put = put  # type: ignore[method-assign]
    results: list[SaveResult] = []
    saver = AsyncCheckpointer(store, on_done=lambda result, kind: results.append(result))

    def capture(step: int) -> dict[str, bytes]:
        time.sleep(0.05)  # the copy out of the device
        return _payload(step)

    saver.save_async(10, lambda: capture(10), {})
    threading.Timer(0.3, gate.set).start()
    saver.save_async(20, lambda: capture(20), {})
    saver.wait()

    first, second = results
    assert first.waited_seconds < 0.05 <= first.capture_seconds
    assert second.waited_seconds >= 0.2 and second.capture_seconds >= 0.05
    assert second.blocked_seconds == second.waited_seconds + second.capture_seconds


def test_a_final_save_leaves_retention_to_the_next_periodic_save(bucket: Bucket) -> None:
    store = CheckpointStore(bucket.url, part_bytes=16 * 1024, keep=1)
    saver = AsyncCheckpointer(store)
    saver.save_async(10, lambda: _payload(10), {})
    saver.wait()

    saver.save_final(20, lambda: _payload(20), {})
    assert store.committed_steps() == [10, 20]

    saver.save_async(30, lambda: _payload(30), {})
    saver.wait()
    assert store.committed_steps() == [30]


class FailingRetention:
    """Deleting old checkpoints fails with a store error, as a listing fault would."""

    def __init__(self, checkpoints: CheckpointStore) -> None:
        self.delete_prefix = checkpoints.store.delete_prefix
        self.failing = True

        def delete_prefix(prefix: str) -> None:
            if self.failing:
                raise StorageError(f"listing {prefix}: SlowDown", Failure.SERVER)
            self.delete_prefix(prefix)

        checkpoints.store.delete_prefix = delete_prefix  # type: ignore[method-assign]


def test_a_retention_failure_after_a_commit_is_reported_not_a_failed_save(
    tmp_path: Path,
) -> None:
    checkpoints = CheckpointStore(f"file://{tmp_path}", keep=1)
    checkpoints.save(1, {"state": b"one"})
    fault = FailingRetention(checkpoints)

    result = checkpoints.save(2, {"state": b"two"})

    assert result.committed
    assert "retention failed, to be retried after the next commit" in result.retention
    assert "SlowDown" in result.retention
    assert checkpoints.committed_steps() == [2]  # the manifest went first; payload stayed
    assert checkpoints.store.keys_under("steps/000000000001")
    fault.failing = False
    assert checkpoints.save(3, {"state": b"three"}).retention == ""
    assert not checkpoints.store.keys_under("steps/000000000001")


def test_a_periodic_saves_failed_retention_reaches_its_callback_not_the_next_wait(
    tmp_path: Path,
) -> None:
    checkpoints = CheckpointStore(f"file://{tmp_path}", keep=1)
    checkpoints.save(1, {"state": b"one"})
    FailingRetention(checkpoints)
    reported: list[tuple[int, str]] = []
    saver = AsyncCheckpointer(
        checkpoints, on_retention_failed=lambda step, why: reported.append((step, why))
    )

    saver.save_async(2, lambda: {"state": b"two"}, {})
    saver.wait()
    saver.save_async(3, lambda: {"state": b"three"}, {})
    result = saver.wait()

    assert result is not None and result.committed and result.step == 3
    assert [step for step, _ in reported] == [2, 3]
    assert "SlowDown" in reported[0][1]
