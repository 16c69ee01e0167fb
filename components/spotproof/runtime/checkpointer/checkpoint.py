"""Checkpoints that survive preemption, kills mid-write, and a second writer.

The commit protocol
-------------------
A checkpoint of step ``S`` written by writer ``W`` (one process: host, pid, random suffix):

1. **Payload.** Each named blob is cut into parts and uploaded, several at a time and each
   with its CRC32C, to ``steps/<S>/<W>/<blob>.<part>`` (``runtime.checkpointer.transfer``;
   ``layout`` names the keys). The prefix is private to the writer, so two writers never
   touch each other's payload objects. The store then makes the payload durable
   (``make_durable``: a no-op for object stores, whose PUTs are durable once answered;
   directory fsyncs on a file system).
2. **Commit.** ``manifests/<S>.json`` (``runtime.checkpointer.manifest``) is written
   *last*, with a create-only write (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``, Azure
   ``If-None-Match: *``, local ``link()`` of a fully written temporary file). It lists every
   part with its size and CRC32C. The checkpoint is committed when, and only when, this
   object exists. When the store answers "already exists", the manifest there is read
   back: if it is byte for byte ours, an earlier attempt landed and only its answer was
   lost (the SDKs retry too), so the step *is* committed. Only a different manifest means
   another writer committed step ``S`` first; then this writer's payload is deleted and a
   committed step is never overwritten. Any other failure is retried ``commit_attempts``
   times with backoff and then raised as :class:`CommitFailed`; the payload stays, since
   the manifest may have landed after all, and retention collects it if not.
3. **Load.** Manifests are read newest first; the first one that passes the structural
   checks of :meth:`Manifest.decode` and whose parts all exist with the listed size and
   CRC32C is loaded. Anything else is skipped (and reported), never loaded. A caller that
   passes ``restore`` has the last word: a checkpoint that verifies but that it cannot
   take (:class:`RestoreError`: a blob missing from it, state of another model shape) is
   skipped as well, so one bad save costs the steps since the one before, not the run.
   A restore wrapped in :class:`ReadsInPlace` reads the parts itself, straight into the
   state (``runtime.checkpointer.in_place``), once the manifest decodes and a listing
   shows every part stored: it verifies each part as it lands, and a failure is skipped
   the same way; the next older step's restore then overwrites the whole state.
4. **Retention.** After a commit, committed steps beyond the newest ``keep`` are deleted
   manifest first, then payload, so a reader never finds a manifest without its parts
   because of us. Uncommitted payload of steps older than the oldest kept step is deleted
   too: no manifest can make it the newest checkpoint any more. A commit is a commit: a
   store failure during retention is reported beside it (``SaveResult.retention``), not
   as a failed save, and the next retention deletes what this one left.

Single-object PUTs are atomic on GCS, S3 and Azure, and ``link()`` is atomic locally;
nothing across objects is. The protocol relies on exactly that and nothing more.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from spotproof.runtime.checkpointer import transfer
from spotproof.runtime.checkpointer.layout import (
    MANIFESTS,
    STEPS,
    committed_step,
    manifest_key,
    payload_step,
    step_prefix,
    writer_prefix,
)
from spotproof.runtime.checkpointer.manifest import (
    DEFAULT_KEEP,
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestError,
    Part,
    check_metadata,
    check_name,
    read_commit,
)
from spotproof.runtime.checkpointer.reading import StoredBlobs, check_stored
from spotproof.runtime.checkpointer.transfer import SaveCancelled
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import AlreadyExists, ObjectStore, StorageError, open_store

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "CommitFailed",
    "ReadsInPlace",
    "RestoreError",
    "SaveCancelled",
    "SaveResult",
]

SUPERSEDED = "another writer committed this step first"
"""Why a save did not commit when the step was committed by someone else."""
ALREADY_COMMITTED = "step already committed"
"""Why a save did not start: the step was committed before it."""
DEFAULT_COMMIT_ATTEMPTS, DEFAULT_COMMIT_BACKOFF = 3, 0.2
"""Commit attempts, and seconds before the second; doubled for each one after."""


class CommitFailed(StorageError):
    """The manifest's write got no answer: the step may be committed or not (a read tells)."""


class RestoreError(ValueError):
    """A checkpoint that verifies, which the training state cannot take; raised by a
    ``restore`` callback of :meth:`CheckpointStore.load_latest` to have it skipped."""


Restore = Callable[["Checkpoint"], None]
"""Applies a verified checkpoint to the training state, or raises :class:`RestoreError`."""


class ReadsInPlace:
    """A restore that reads the parts itself (``Checkpoint.stored``, ``blobs`` empty),
    straight to where the state lives; what it raises skips the step as a failed
    verification does (``runtime.checkpointer.in_place``)."""

    def __init__(self, restore: Restore) -> None:
        self.restore = restore

    def __call__(self, checkpoint: Checkpoint) -> None:
        self.restore(checkpoint)


@dataclass(frozen=True)
class SaveResult:
    step: int
    committed: bool
    seconds: float
    bytes: int
    reason: str = ""
    """Why nothing was committed, when ``committed`` is false."""
    waited_seconds: float = 0.0
    """Training time spent waiting for the previous upload before this save's capture."""
    capture_seconds: float = 0.0
    """Training time spent copying the state out (device to host) for this save."""
    retention: str = ""
    """Why retention after this commit failed ("" when it ran, or was not asked for). The
    commit stands: a failed retention only leaves old checkpoints for the next one."""

    @property
    def durable(self) -> bool:
        """Whether the step is committed, by this save or by one before it: all a final save
        is for (a SIGTERM while resuming asks for the step just restored)."""
        return self.committed or self.reason in (ALREADY_COMMITTED, SUPERSEDED)

    @property
    def blocked_seconds(self) -> float:
        """All the time this save held up training; the upload itself ran alongside."""
        return self.waited_seconds + self.capture_seconds


@dataclass(frozen=True)
class Checkpoint:
    step: int
    blobs: dict[str, bytearray]
    """Every blob, read and verified; empty for a restore that reads in place."""
    metadata: Mapping[str, Any]
    skipped: tuple[str, ...] = ()
    """Newer manifests passed over, each with the reason."""
    stored: StoredBlobs | None = None
    """The blobs as stored, every part listed but none read: for a :class:`ReadsInPlace`
    restore, which reads and verifies them itself."""

    @property
    def nbytes(self) -> int:
        """The size of every blob together, read or not."""
        sizes = self.stored.sizes.values() if self.stored else map(len, self.blobs.values())
        return sum(sizes)


def new_writer_id() -> str:
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])[:24].strip("-")
    return f"{host or 'host'}-{os.getpid()}-{secrets.token_hex(4)}"


class CheckpointStore:
    """Save and load checkpoints at one URL (``file://``, ``s3://``, ``gs://``, ``az://``)."""

    rank = 0
    world_size = 1
    """One process; ``spotproof.runtime.checkpointer.gang`` saves shards of a gang of them."""

    def __init__(
        self,
        url: str,
        *,
        keep: int = DEFAULT_KEEP,
        part_bytes: int | None = None,
        parallelism: int | None = None,
        writer_id: str | None = None,
        store: ObjectStore | None = None,
        commit_attempts: int = DEFAULT_COMMIT_ATTEMPTS,
        commit_backoff: float = DEFAULT_COMMIT_BACKOFF,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep = {keep}: at least the newest checkpoint must be kept")
        if commit_attempts < 1:
            raise ValueError(f"commit_attempts = {commit_attempts}: at least one is needed")
        self.store = store or open_store(url)
        self.keep = keep
        self.part_bytes = part_bytes
        self.parallelism = parallelism
        self.writer_id = check_name("writer_id", writer_id or new_writer_id())
        self.commit_attempts = commit_attempts
        self.commit_backoff = commit_backoff

    # --- save --------------------------------------------------------------------------

    def save(
        self,
        step: int,
        blobs: Mapping[str, transfer.Blob],
        metadata: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
        *,
        prune: bool = True,
    ) -> SaveResult:
        """Write and commit ``blobs`` as step ``step``. Raises :class:`SaveCancelled` if
        ``cancel`` is set before the commit; then nothing of this save is committed.

        With ``prune``, retention runs after the commit (see :meth:`prune`); the result's
        ``seconds`` end at the commit either way."""
        started = time.monotonic()
        for name in blobs:
            check_name("blob", name)
        metadata = check_metadata(metadata or {})
        total = sum(len(b) for b in blobs.values())
        if self.store.exists(manifest_key(step)):
            return SaveResult(step, False, 0.0, 0, ALREADY_COMMITTED)

        prefix = writer_prefix(step, self.writer_id)
        try:
            parts = self._upload(step, blobs, cancel)
            outcome = self._finish(step, parts, metadata, cancel)
        except SaveCancelled:
            self.store.delete_prefix(prefix)
            raise
        if outcome == SUPERSEDED:
            self.store.delete_prefix(prefix)
        committed = outcome == ""
        result = SaveResult(step, committed, time.monotonic() - started, total, outcome)
        if committed and prune:
            result = replace(result, retention=self.prune_after_commit())
        return result

    def _finish(
        self,
        step: int,
        parts: tuple[Part, ...],
        metadata: dict[str, Any],
        cancel: threading.Event | None,
    ) -> str:
        """Protocol step 2, once the payload is durable: "" when ``step`` is committed with
        these parts, :data:`SUPERSEDED` when another writer's commit is there, else why not."""
        manifest = Manifest(step, self.writer_id, time.time(), parts, metadata)
        return "" if self._commit(step, manifest.encode()) else SUPERSEDED

    def _upload(
        self,
        step: int,
        blobs: Mapping[str, transfer.Blob],
        cancel: threading.Event | None,
    ) -> tuple[Part, ...]:
        """Protocol step 1: this writer's payload of ``step``, durable; raises
        :class:`SaveCancelled` (leaving the payload to the caller) once ``cancel`` is set."""
        total = sum(len(b) for b in blobs.values())
        parts = transfer.upload(
            self.store,
            step,
            self.writer_id,
            blobs,
            self._plan(total),
            cancel=cancel,
            attempts=self.commit_attempts,
            backoff=self.commit_backoff,
        )
        self.store.make_durable(writer_prefix(step, self.writer_id))
        if cancel is not None and cancel.is_set():
            raise SaveCancelled(f"save of step {step} superseded")
        return tuple(parts)

    def _plan(self, total_bytes: int) -> transfer.TransferPlan:
        return transfer.plan(total_bytes, part_bytes=self.part_bytes, threads=self.parallelism)

    def _commit(self, step: int, manifest: bytes) -> bool:
        """Create the manifest of ``step``: True once ours is the committed one, False
        when another writer's is. Raises :class:`CommitFailed` when neither can be told."""
        key = manifest_key(step)
        failure: StorageError | None = None
        for attempt in range(self.commit_attempts):
            if attempt:
                time.sleep(self.commit_backoff * 2 ** (attempt - 1))
            try:
                self.store.put_if_absent(key, manifest)
                return True
            except AlreadyExists:
                try:
                    return self.store.get(key, limit=MAX_MANIFEST_BYTES) == manifest
                except (StorageError, FileNotFoundError, ValueError) as error:
                    failure = StorageError(f"reading back {key} failed: {error}")
            except StorageError as error:
                failure = error
        raise CommitFailed(
            f"commit of step {step} unconfirmed after {self.commit_attempts} attempts (its "
            f"manifest may have landed; the next start reads what the store holds): {failure}",
            failure.failure if failure else Failure.OTHER,
        )

    # --- load --------------------------------------------------------------------------

    def committed_steps(self) -> list[int]:
        """Steps that have a manifest, oldest first (not yet verified)."""
        steps = (committed_step(key) for key in self.store.list(MANIFESTS))
        return sorted(step for step in steps if step is not None)

    def load_latest(
        self,
        on_skip: Callable[[int, str], None] | None = None,
        restore: Restore | None = None,
    ) -> Checkpoint | None:
        """The newest checkpoint whose every part verifies, and that ``restore`` (when
        given) took without :class:`RestoreError`; None when there is none."""
        skipped: list[str] = []
        for step in reversed(self.committed_steps()):
            try:
                return self._load_and_restore(step, tuple(skipped), restore)
            except (ManifestError, ValueError, MemoryError, FileNotFoundError) as error:
                skipped.append(f"step {step}: {error}")
                if on_skip:
                    on_skip(step, str(error))
        return None

    def _load_and_restore(
        self, step: int, skipped: tuple[str, ...], restore: Restore | None
    ) -> Checkpoint:
        if isinstance(restore, ReadsInPlace):
            return self._restore_in_place(step, skipped, restore)
        checkpoint = self._load(step, skipped)
        if restore is not None:
            restore(checkpoint)
        return checkpoint

    def _restore_in_place(
        self, step: int, skipped: tuple[str, ...], restore: ReadsInPlace
    ) -> Checkpoint:
        """``step`` opened (manifest decoded, every part listed), handed to ``restore``; a
        store holding a step in several places tries the next one when this raises."""
        manifest = self._shard(step)
        check_stored(self.store, manifest)
        threads = self._plan(sum(manifest.blob_sizes.values())).threads
        stored = StoredBlobs(self.store, manifest, threads)
        checkpoint = Checkpoint(step, {}, manifest.metadata, skipped, stored)
        restore(checkpoint)
        return checkpoint

    def _shard(self, step: int) -> Manifest:
        """This process's part of ``step``: the whole checkpoint, or its rank's shard of a
        gang's (``spotproof.runtime.checkpointer.gang``); :class:`GangMismatch` when neither
        fits."""
        commit = read_commit(self.store.get(manifest_key(step), limit=MAX_MANIFEST_BYTES))
        if commit.step != step:
            raise ValueError(f"manifest names step {commit.step}")
        return commit.shard_for(self.rank, self.world_size)

    def _load(self, step: int, skipped: tuple[str, ...]) -> Checkpoint:
        manifest = self._shard(step)
        total = sum(manifest.blob_sizes.values())
        blobs = transfer.download(self.store, manifest, self._plan(total))
        return Checkpoint(step, blobs, manifest.metadata, skipped)

    # --- retention ---------------------------------------------------------------------

    def prune_after_commit(self) -> str:
        """:meth:`prune`, with a store failure returned as its one line ("" when none)."""
        try:
            self.prune()
        except (StorageError, FileNotFoundError) as error:
            return f"retention failed, to be retried after the next commit: {error}"
        return ""

    def delete_step(self, step: int) -> None:
        """Delete committed ``step``, manifest first (the protocol's step 4)."""
        self.store.delete([manifest_key(step)])
        self.store.delete_prefix(step_prefix(step))

    def prune(self) -> list[int]:
        """Delete committed steps beyond the newest ``keep`` (manifest first), and
        uncommitted payload older than the oldest kept step. Returns the steps deleted."""
        committed = self.committed_steps()
        doomed = committed[: -self.keep]
        for step in doomed:
            self.delete_step(step)
        kept = committed[-self.keep :]
        if kept:
            for name in self.store.list(STEPS):
                step = payload_step(name)
                if step is not None and step < kept[0] and step not in committed:
                    self.store.delete_prefix(step_prefix(step))
        return doomed
