"""Checkpoints that survive preemption, kills mid-write, and a second writer.

The commit protocol
-------------------
A checkpoint of step ``S`` written by writer ``W`` (one process: host, pid, random suffix):

1. **Payload.** Each named blob is cut into parts of at most ``part_bytes`` and uploaded,
   several at a time, to ``steps/<S>/<W>/<blob>.<part>``. The prefix is private to the
   writer, so two writers never touch each other's payload objects.
2. **Commit.** ``manifests/<S>.json`` is written *last*, with a create-only write
   (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``, Azure ``If-None-Match: *``,
   local ``link()`` of a fully written temporary file). It lists every part with its size
   and sha256. The checkpoint is committed when, and only when, this object exists. If
   another writer committed step ``S`` first, the write is refused and this writer's
   payload is deleted: a committed step is never overwritten.
3. **Load.** Manifests are read newest first; the first one whose parts all exist with the
   listed size and sha256 is loaded. A manifest that does not parse, or whose parts are
   missing, short or corrupt, is skipped (and reported), never loaded.
4. **Retention.** After a commit, committed steps beyond the newest ``keep`` are deleted
   manifest first, then payload, so a reader never finds a manifest without its parts
   because of us. Uncommitted payload of steps older than the oldest kept step is deleted
   too: no manifest can make it the newest checkpoint any more.

Single-object PUTs are atomic on GCS, S3 and Azure, and ``link()`` is atomic locally;
nothing across objects is. The protocol relies on exactly that and nothing more.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from spotproof.runtime.storage import AlreadyExists, ObjectStore, open_store

FORMAT_VERSION = 1
DEFAULT_PART_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 3


class SaveCancelled(Exception):
    """A save was superseded (a newer final save took its place) before it committed."""


@dataclass(frozen=True)
class Part:
    key: str
    """Object key relative to the checkpoint root."""
    blob: str
    """Which named blob this part belongs to."""
    index: int
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    step: int
    writer: str
    created: float
    parts: tuple[Part, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = {"format": FORMAT_VERSION, **asdict(self), "parts": [asdict(p) for p in self.parts]}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        body = json.loads(data)
        if body.get("format") != FORMAT_VERSION:
            raise ValueError(f"unknown manifest format {body.get('format')!r}")
        return cls(
            step=int(body["step"]),
            writer=str(body["writer"]),
            created=float(body["created"]),
            parts=tuple(Part(**p) for p in body["parts"]),
            metadata=body.get("metadata") or {},
        )


@dataclass(frozen=True)
class SaveResult:
    step: int
    committed: bool
    seconds: float
    bytes: int
    reason: str = ""
    """Why nothing was committed, when ``committed`` is false."""


@dataclass(frozen=True)
class Checkpoint:
    step: int
    blobs: dict[str, bytearray]
    metadata: Mapping[str, Any]
    skipped: tuple[str, ...] = ()
    """Newer manifests passed over, each with the reason."""


def new_writer_id() -> str:
    host = socket.gethostname().split(".")[0][:24] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"


def manifest_key(step: int) -> str:
    """The commit object of ``step``."""
    return f"manifests/{step:012d}.json"


def step_prefix(step: int) -> str:
    """Where every writer's payload of ``step`` lives."""
    return f"steps/{step:012d}"


class CheckpointStore:
    """Save and load checkpoints at one URL (``file://``, ``s3://``, ``gs://``, ``az://``)."""

    def __init__(
        self,
        url: str,
        *,
        keep: int = DEFAULT_KEEP,
        part_bytes: int = DEFAULT_PART_BYTES,
        parallelism: int = 4,
        writer_id: str | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep = {keep}: at least the newest checkpoint must be kept")
        self.store = store or open_store(url)
        self.keep = keep
        self.part_bytes = part_bytes
        self.parallelism = parallelism
        self.writer_id = writer_id or new_writer_id()

    # --- save --------------------------------------------------------------------------

    def save(
        self,
        step: int,
        blobs: Mapping[str, bytes | memoryview],
        metadata: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
    ) -> SaveResult:
        """Write and commit ``blobs`` as step ``step``. Raises :class:`SaveCancelled` if
        ``cancel`` is set before the commit; then nothing of this save is committed."""
        started = time.monotonic()
        total = sum(len(b) for b in blobs.values())
        if self.store.exists(manifest_key(step)):
            return SaveResult(step, False, 0.0, 0, "step already committed")

        prefix = f"{step_prefix(step)}/{self.writer_id}"
        jobs = [
            (
                f"{prefix}/{name}.{index:05d}",
                name,
                index,
                memoryview(blob)[offset : offset + self.part_bytes],
            )
            for name, blob in blobs.items()
            for index, offset in enumerate(range(0, max(len(blob), 1), self.part_bytes))
        ]

        def upload(job: tuple[str, str, int, memoryview]) -> Part:
            key, name, index, data = job
            if cancel is not None and cancel.is_set():
                raise SaveCancelled(f"save of step {step} superseded")
            digest = hashlib.sha256(data).hexdigest()
            self.store.put(key, data)
            return Part(key, name, index, len(data), digest)

        try:
            with ThreadPoolExecutor(self.parallelism, thread_name_prefix="ckpt-upload") as pool:
                parts = tuple(pool.map(upload, jobs))
            if cancel is not None and cancel.is_set():
                raise SaveCancelled(f"save of step {step} superseded")
            manifest = Manifest(step, self.writer_id, time.time(), parts, dict(metadata or {}))
            self.store.put_if_absent(manifest_key(step), manifest.encode())
        except AlreadyExists:
            self.store.delete_prefix(prefix)
            return SaveResult(
                step,
                False,
                time.monotonic() - started,
                total,
                "another writer committed this step first",
            )
        except SaveCancelled:
            self.store.delete_prefix(prefix)
            raise
        result = SaveResult(step, True, time.monotonic() - started, total)
        self.prune()
        return result

    # --- load --------------------------------------------------------------------------

    def committed_steps(self) -> list[int]:
        """Steps that have a manifest, oldest first (not yet verified)."""
        steps = []
        for key in self.store.list("manifests"):
            name = key.rsplit("/", 1)[-1]
            if name.endswith(".json") and name[:-5].isdigit():
                steps.append(int(name[:-5]))
        return sorted(steps)

    def load_latest(self, on_skip: Callable[[int, str], None] | None = None) -> Checkpoint | None:
        """The newest checkpoint whose every part verifies; None when there is none."""
        skipped: list[str] = []
        for step in reversed(self.committed_steps()):
            try:
                return self._load(step, tuple(skipped))
            except (ValueError, KeyError, TypeError, MemoryError, FileNotFoundError) as error:
                reason = f"step {step}: {error}"
                skipped.append(reason)
                if on_skip:
                    on_skip(step, str(error))
        return None

    def _load(self, step: int, skipped: tuple[str, ...]) -> Checkpoint:
        try:
            manifest = Manifest.decode(self.store.get(manifest_key(step)))
        except (json.JSONDecodeError, TypeError) as error:
            raise ValueError(f"manifest unreadable ({error})") from None
        if manifest.step != step:
            raise ValueError(f"manifest names step {manifest.step}")

        # Each blob is one buffer; every part is read straight into its place and verified
        # there, in parallel: no joins, no second copy of the state.
        ordered = sorted(manifest.parts, key=lambda p: (p.blob, p.index))
        sizes: dict[str, int] = {}
        offsets: dict[Part, int] = {}
        for part in ordered:
            offsets[part] = sizes.get(part.blob, 0)
            sizes[part.blob] = offsets[part] + part.size
        blobs = {blob: bytearray(size) for blob, size in sizes.items()}

        def fetch(part: Part) -> None:
            view = memoryview(blobs[part.blob])[offsets[part] : offsets[part] + part.size]
            size = self.store.read_into(part.key, view)
            if size != part.size:
                raise ValueError(f"{part.key}: {size} bytes, manifest says {part.size}")
            if hashlib.sha256(view).hexdigest() != part.sha256:
                raise ValueError(f"{part.key}: sha256 mismatch")

        with ThreadPoolExecutor(self.parallelism, thread_name_prefix="ckpt-download") as pool:
            list(pool.map(fetch, ordered))
        return Checkpoint(step, blobs, manifest.metadata, skipped)

    # --- retention ---------------------------------------------------------------------

    def prune(self) -> list[int]:
        """Delete committed steps beyond the newest ``keep`` (manifest first), and
        uncommitted payload older than the oldest kept step. Returns the steps deleted."""
        committed = self.committed_steps()
        doomed = committed[: -self.keep]
        for step in doomed:
            self.store.delete([manifest_key(step)])
            self.store.delete_prefix(step_prefix(step))
        kept = committed[-self.keep :]
        if kept:
            oldest_kept = kept[0]
            for name in self.store.list("steps"):
                leaf = name.rstrip("/").rsplit("/", 1)[-1]
                if leaf.isdigit() and int(leaf) < oldest_kept and int(leaf) not in committed:
                    self.store.delete_prefix(step_prefix(int(leaf)))
        return doomed
