"""Periodic checkpoints in the background, and the final one on preemption.

Training must not stop for a periodic save. :meth:`AsyncCheckpointer.save_async` calls the
caller's *capture* (a copy of the state into CPU memory, e.g. ``StateBuffer.capture``) at
the step boundary, then uploads it in a background thread while training continues. One
save is in flight at a time: a new one first waits for the previous upload, which also
makes it safe for capture to reuse one buffer. A crash therefore loses at most one
checkpoint interval, plus the steps trained while the newest checkpoint was uploading.

Each result says how long the save held training up: ``waited_seconds`` for the previous
upload (zero while uploads are shorter than the interval) and ``capture_seconds`` for the
copy. A second buffer would hide the wait, at the cost of twice the state in host memory;
a wait that shows up here says the interval is shorter than an upload.

On preemption :meth:`AsyncCheckpointer.save_final` takes over: a save in flight for the
same step is simply awaited; one for an older step is cancelled (it stops between parts
and deletes what it wrote) so the grace period is spent on the newest state only. Its
capture runs once that save has ended and training has stopped, so nothing writes the
state any more: it need not copy it, and may return views of the tensors' own memory
(``StateBuffer.views``; only a GPU's tensors still need their copy to the host). A part
that spans several tensors is then assembled in the upload thread that sends it, into a
part-sized buffer of that thread's, and a part within one tensor is sent from it as it
is; either way the copy the capture would have made before the first byte left, in the
one thread that waits on it, is spread over the upload threads and overlaps the writes.

The final save gets what is left of the grace period as a deadline: it starts no part
that the slowest so far says cannot end before it, stops between parts once it has passed
rather than be killed mid-upload, and says so.
Retention runs after a periodic commit has been reported, and not at all after a final
one: deleting old checkpoints is no work for the grace period (the next process's first
periodic save catches up). A retention that fails is reported to ``on_retention_failed``
and never fails the save it follows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore, SaveCancelled, SaveResult
from spotproof.runtime.checkpointer.transfer import Blob, SaveDeadline

Blobs = Mapping[str, Blob]
Capture = Callable[[], Blobs]
"""Copies the training state into named blobs (or, for a final save, views it); runs in the
caller's thread, between steps."""


@dataclass
class _InFlight:
    step: int
    waited: float = 0.0
    captured: float = 0.0
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
        on_retention_failed: Callable[[int, str], None] | None = None,
    ) -> None:
        """``on_start(step, kind)`` fires when the upload begins and ``on_done(result, kind)``
        once a save has committed or been refused; ``kind`` is "periodic" or "final".
        ``on_retention_failed(step, reason)`` when retention after the commit of ``step``
        failed (the commit stands)."""
        self.store = store
        self.on_start = on_start
        self.on_done = on_done
        self.on_retention_failed = on_retention_failed
        self._in_flight: _InFlight | None = None

    def save_async(self, step: int, capture: Capture, metadata: Mapping[str, Any]) -> None:
        """Capture ``step`` now and upload it in the background, after any previous upload."""
        started = time.perf_counter()
        self.wait()
        waited = time.perf_counter() - started
        blobs = capture()
        job = _InFlight(step, waited, time.perf_counter() - started - waited)
        job.thread = threading.Thread(
            target=self._upload,
            args=(job, blobs, metadata, "periodic"),
            name=f"checkpoint-{step}",
            daemon=True,
        )
        self._in_flight = job
        job.thread.start()

    def save_final(
        self,
        step: int,
        capture: Capture,
        metadata: Mapping[str, Any],
        deadline_seconds: float | None = None,
    ) -> SaveResult:
        """Commit ``step`` now, in this thread; waits for or supersedes the save in flight.

        With ``deadline_seconds`` (what is left of the grace period) the save is abandoned
        between parts, as soon as the slowest part so far says the next would end past it
        or once it has passed, and :class:`SaveCancelled` says so: nothing of it is
        committed, and the previous checkpoint stays the newest. A commit already under
        way completes."""
        job = self._in_flight
        if job is not None and job.step == step:
            finished = self.wait()
            if finished is not None:  # committed, or refused because the step already was
                return finished
        elif job is not None:
            job.cancel.set()
            self.wait()
        started = time.perf_counter()
        blobs = capture()
        final = _InFlight(step, captured=time.perf_counter() - started)
        timer = None
        if deadline_seconds is not None:
            seconds = max(0.0, deadline_seconds)
            final.cancel = SaveDeadline(time.monotonic() + seconds)
            timer = threading.Timer(seconds, final.cancel.set)
            timer.daemon = True
            timer.start()
        try:
            self._upload(final, blobs, metadata, "final")
        finally:
            if timer is not None:
                timer.cancel()
        if isinstance(final.error, SaveCancelled) and deadline_seconds is not None:
            raise SaveCancelled(
                f"final save of step {step} abandoned: it could not commit within its "
                f"deadline of {deadline_seconds:.1f} s (the grace period left): {final.error}"
            )
        if final.error is not None:
            raise final.error
        assert final.result is not None
        return final.result

    def settled(self, timeout: float) -> bool:
        """Whether no save is in flight, or the one in flight ends within ``timeout``
        seconds (its result is still :meth:`wait`'s to take)."""
        job = self._in_flight
        if job is None or job.thread is None:
            return True
        job.thread.join(timeout)
        return not job.thread.is_alive()

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

    def _upload(self, job: _InFlight, blobs: Blobs, metadata: Mapping[str, Any], kind: str) -> None:
        try:
            if self.on_start:
                self.on_start(job.step, kind)
            result = self.store.save(job.step, blobs, metadata, cancel=job.cancel, prune=False)
            job.result = replace(result, waited_seconds=job.waited, capture_seconds=job.captured)
            if self.on_done:
                self.on_done(job.result, kind)
            if kind == "periodic" and result.committed:
                # After reporting the commit; a final save skips it.
                retention = self.store.prune_after_commit()
                if retention and self.on_retention_failed:
                    self.on_retention_failed(job.step, retention)
        except BaseException as error:  # surfaced by wait()/save_final() in the caller's thread
            job.error = error
