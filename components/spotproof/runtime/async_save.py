"""Periodic checkpoints in the background, and the final one on preemption.

Training must not stop for a periodic save. :meth:`AsyncCheckpointer.save_async` takes a
*snapshot* the caller has already copied to CPU memory at a step boundary, and serializes
and uploads it in a background thread while training continues. One save is in flight at
a time: a new periodic save first waits for the previous one, so a crash never loses more
than one checkpoint interval.

On preemption :meth:`AsyncCheckpointer.save_final` takes over: a save in flight for the
same step is simply awaited; one for an older step is cancelled (it stops between parts
and deletes what it wrote) so the grace period is spent on the newest state only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotproof.runtime.checkpoint import CheckpointStore, SaveCancelled, SaveResult

Serializer = Callable[[], Mapping[str, bytes]]
"""Turns a snapshot into named blobs; runs in the background for periodic saves."""


@dataclass
class _InFlight:
    step: int
    thread: threading.Thread | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    result: SaveResult | None = None
    error: BaseException | None = None


class AsyncCheckpointer:
    def __init__(
        self,
        store: CheckpointStore,
        on_start: Callable[[int, str], None] | None = None,
        on_done: Callable[[SaveResult, str], None] | None = None,
    ) -> None:
        """``on_start(step, kind)`` fires when the upload begins and ``on_done(result, kind)``
        once a save has committed or been refused; ``kind`` is "periodic" or "final"."""
        self.store = store
        self.on_start = on_start
        self.on_done = on_done
        self._in_flight: _InFlight | None = None

    def save_async(self, step: int, serialize: Serializer, metadata: Mapping[str, Any]) -> None:
        """Start a periodic save of ``step`` in the background, after any previous one."""
        self.wait()
        job = _InFlight(
            step, threading.Thread(name=f"ckpt-{step}", daemon=True, target=lambda: None)
        )
        job.thread = threading.Thread(
            name=f"ckpt-{step}",
            daemon=True,
            target=self._run,
            args=(job, serialize, metadata, "periodic"),
        )
        self._in_flight = job
        job.thread.start()

    def save_final(
        self, step: int, serialize: Serializer, metadata: Mapping[str, Any]
    ) -> SaveResult:
        """Commit ``step`` now, in this thread; waits for or supersedes the save in flight."""
        job = self._in_flight
        if job is not None and job.step == step:
            finished = self.wait()
            if finished is not None:  # committed, or refused because the step already was
                return finished
        elif job is not None:
            job.cancel.set()
            self.wait()
        final = _InFlight(step)
        self._run(final, serialize, metadata, "final")
        if final.error is not None:
            raise final.error
        assert final.result is not None
        return final.result

    def wait(self) -> SaveResult | None:
        """Block until the save in flight (if any) ends; its result, or None if cancelled."""
        job, self._in_flight = self._in_flight, None
        if job is None:
            return None
        if job.thread is not None:
            job.thread.join()
        if job.error is not None and not isinstance(job.error, SaveCancelled):
            raise job.error
        return job.result

    def _run(
        self, job: _InFlight, serialize: Serializer, metadata: Mapping[str, Any], kind: str
    ) -> None:
        try:
            blobs = serialize()
            if self.on_start:
                self.on_start(job.step, kind)
            job.result = self.store.save(job.step, blobs, metadata, cancel=job.cancel)
            if self.on_done:
                self.on_done(job.result, kind)
        except BaseException as error:  # surfaced by wait()/save_final() in the caller's thread
            job.error = error
