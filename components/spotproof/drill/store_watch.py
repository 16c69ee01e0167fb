"""The checkpoint store's side of a drill: which steps are committed, and when.

A trainer's ``checkpoint`` line says it committed a step; the store is where that has to be
true. This watcher reads the trainer's checkpoint prefix with the runtime's own reader
(``CheckpointStore.committed_steps`` and ``manifest.read_commit``, which refuses a malformed
manifest) and records each newly committed step as a ``CHECKPOINT`` mark with
``source="store"`` at the manifest's own ``created`` time. The judge then holds the trainer
to it: a final checkpoint the trainer reported but the store does not have was not
committed.

Object stores offer no watch a drill could use with the caller's read-only access, so this
one lists the manifests every ``poll_seconds``; a listing is one request, and manifests are
few (``KEEP_CHECKPOINTS``).
"""

from __future__ import annotations

import threading

from spotproof.drill.timeline import Mark, Timeline
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.layout import manifest_key
from spotproof.runtime.checkpointer.manifest import ManifestError, read_commit
from spotproof.runtime.messages import first_line
from spotproof.runtime.storage import StorageError

SOURCE = "store"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024


class StoreWatch:
    """Polls one checkpoint URL in a thread; :meth:`stop` ends it."""

    def __init__(self, store: CheckpointStore, timeline: Timeline, *, poll_seconds: float = 2.0):
        self.store, self.timeline, self.poll_seconds = store, timeline, poll_seconds
        self.seen: set[int] = set()
        self.errors: list[str] = []
        """The last few listing failures, one line each (the drill goes on without them)."""
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-store-watch", daemon=True)

    def start(self) -> StoreWatch:
        self.seen = set(self._committed())
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the polling, after one last look."""
        self._stopped.set()
        self._thread.join(timeout=self.poll_seconds + 5)
        self.poll()

    def poll(self) -> None:
        """Records every step committed since the last look."""
        for step in self._committed():
            if step in self.seen:
                continue
            try:
                commit = read_commit(
                    self.store.store.get(manifest_key(step), limit=MAX_MANIFEST_BYTES)
                )
            except (StorageError, ManifestError, FileNotFoundError) as error:
                self._failed(f"manifest of step {step}: {first_line(error)}")
                continue
            self.seen.add(step)
            self.timeline.add(commit.created, Mark.CHECKPOINT, step=step, source=SOURCE)

    def _committed(self) -> list[int]:
        try:
            return self.store.committed_steps()
        except (StorageError, FileNotFoundError) as error:
            self._failed(f"listing {self.store.store}: {first_line(error)}")
            return []

    def _failed(self, line: str) -> None:
        self.errors = [*self.errors[-4:], line]

    def _run(self) -> None:
        while not self._stopped.wait(self.poll_seconds):
            self.poll()
