"""Moving a checkpoint's blobs to and from a store as parts, in parallel.

This module is the I/O half of a checkpoint; ``checkpoint`` is the commit protocol. A blob
is cut into parts of :attr:`TransferPlan.part_bytes`, each its own object, uploaded by
:attr:`TransferPlan.threads` threads with its CRC32C (which the store checks on arrival
where it can). Loading reads the parts straight into one buffer per blob, several at a
time, and verifies each part's CRC32C as soon as its last byte lands, in the thread that
read it, so verification overlaps the reads still running.

Sizes follow the state (:func:`plan`): enough parts to keep every thread busy twice over,
none smaller than 4 MiB (per-request overhead) or larger than 64 MiB (one slow request
must not hold up the save). A load reads whole parts, one request each, unless there are
fewer parts than threads (a checkpoint written with other sizes); only then are parts
split into byte ranges read in parallel. S3 and GCS serve ranges natively (S3's
performance guidelines recommend ranged GETs for parallel downloads), but moto builds the
whole object for every ranged GET, so splitting more than needed would measure the
emulator, not the protocol.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from spotproof.runtime.checkpointer.integrity import crc32c_hex
from spotproof.runtime.checkpointer.layout import part_key, writer_prefix
from spotproof.runtime.checkpointer.manifest import Manifest, Part
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import ObjectStore, StorageError

MiB = 1 << 20
MIN_PART, MAX_PART = 4 * MiB, 64 * MiB
MIN_RANGE = 1 * MiB
READ_ATTEMPTS = 3
"""Reads of a part before a short read or a checksum mismatch counts as the stored bytes'."""
_TRANSIENT = (Failure.UNREACHABLE, Failure.SERVER, Failure.OTHER)


class SaveCancelled(Exception):
    """A save was called off before it committed: superseded (a newer final save took its
    place), or out of time (:class:`SaveDeadline`)."""


class SaveDeadline(threading.Event):
    """The cancel event of a save that must commit by ``at`` (``time.monotonic()``), set
    then by its owner. Knowing when, :func:`upload` also declines to start a part that the
    slowest part so far says cannot finish in time: a part already on the wire cannot be
    called back, so one started late would hold the save, and the process, past the
    deadline (past the grace period, for a final save, into SIGKILL)."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at


@dataclass(frozen=True)
class TransferPlan:
    part_bytes: int
    """Size of each uploaded object (the last part of a blob is shorter)."""
    threads: int
    """Requests in flight at once."""


def plan(
    total_bytes: int,
    *,
    part_bytes: int | None = None,
    threads: int | None = None,
    cpus: int | None = None,
) -> TransferPlan:
    """Part size and thread count for ``total_bytes`` of state.

    Threads: twice the CPUs, between 4 and 16; transfers wait on the network or the disk
    and CRC32C releases the GIL. Parts: ``total / (2 x threads)``, rounded up to a MiB,
    within [4, 64] MiB. Explicit values win.
    """
    threads = threads or min(16, max(4, 2 * (cpus or os.cpu_count() or 1)))
    share = math.ceil(total_bytes / (2 * threads) / MiB) * MiB
    return TransferPlan(
        part_bytes=part_bytes or min(MAX_PART, max(MIN_PART, share)), threads=threads
    )


def upload(
    store: ObjectStore,
    step: int,
    writer: str,
    blobs: Mapping[str, bytes | memoryview],
    transfer: TransferPlan,
    *,
    cancel: threading.Event | None = None,
    attempts: int = 3,
    backoff: float = 0.2,
) -> tuple[Part, ...]:
    """Write every part of ``blobs``; returns them, in order, for the manifest.

    A part that fails transiently is written again, up to ``attempts`` times with
    ``backoff`` seconds doubling between them. Raises :class:`SaveCancelled` as soon as
    ``cancel`` is set, or, for a :class:`SaveDeadline`, as soon as the slowest part so far
    says the next would end past it; and :class:`StorageError` when a part cannot be
    written.
    """
    size = transfer.part_bytes
    jobs = [
        (part_key(step, writer, name, index), name, index, memoryview(blob)[offset : offset + size])
        for name, blob in blobs.items()
        for index, offset in enumerate(range(0, max(len(blob), 1), size))
    ]
    slowest = [0.0]  # seconds of the slowest part written so far, for a SaveDeadline

    def write(job: tuple[str, str, int, memoryview]) -> Part:
        key, name, index, data = job
        digest = crc32c_hex(data)
        for attempt in range(attempts):
            if cancel is not None and cancel.is_set():
                raise SaveCancelled(f"save of step {step} called off between parts")
            if isinstance(cancel, SaveDeadline) and time.monotonic() + slowest[0] > cancel.at:
                raise SaveCancelled(
                    f"save of step {step}: a part takes up to {slowest[0]:.1f} s, more than "
                    "is left before its deadline"
                )
            started = time.monotonic()
            try:
                store.put(key, data, crc32c=digest)
                slowest[0] = max(slowest[0], time.monotonic() - started)
                return Part(key, name, index, len(data), crc32c=digest)
            except StorageError as error:
                if error.failure not in _TRANSIENT or attempt == attempts - 1:
                    raise
                time.sleep(backoff * 2**attempt)
        raise AssertionError("unreachable")

    with ThreadPoolExecutor(transfer.threads, thread_name_prefix="ckpt-upload") as pool:
        return tuple(pool.map(write, jobs))


def download(
    store: ObjectStore, manifest: Manifest, transfer: TransferPlan
) -> dict[str, bytearray]:
    """Every blob of ``manifest``, read into one buffer each and verified part by part.

    A part that arrives short or fails its checksum is read again, whole, up to
    :data:`READ_ATTEMPTS` reads in all: bytes damaged on the way (a flaky NIC, a proxy) are
    not a damaged checkpoint, and falling back to an older step for them would lose work.
    Raises ``ValueError`` naming the part when it is short or fails its checksum every time,
    and
    ``FileNotFoundError`` when one is missing: the caller then skips the checkpoint. The
    sizes the manifest claims are checked against a listing of the writer's prefix before
    any buffer is allocated, so memory follows the bytes really stored, not the claims.
    """
    _check_stored(store, manifest)
    ordered = sorted(manifest.parts, key=lambda p: (p.blob, p.index))
    offsets: dict[Part, int] = {}
    sizes: dict[str, int] = {}
    for part in ordered:
        offsets[part] = sizes.get(part.blob, 0)
        sizes[part.blob] = offsets[part] + part.size
    blobs = {blob: bytearray(size) for blob, size in sizes.items()}
    views = {
        part: memoryview(blobs[part.blob])[offsets[part] : offsets[part] + part.size]
        for part in ordered
    }
    splits = max(1, math.ceil(transfer.threads / max(len(ordered), 1)))
    span = {part: max(MIN_RANGE, math.ceil(part.size / splits)) for part in ordered}
    ranges = [
        (part, start) for part in ordered for start in range(0, max(part.size, 1), span[part])
    ]
    pending = {part: math.ceil(max(part.size, 1) / span[part]) for part in ordered}
    lock = threading.Lock()

    def read(job: tuple[Part, int]) -> None:
        part, start = job
        view = views[part][start : start + span[part]]
        for attempt in range(READ_ATTEMPTS):
            count = store.read_into(part.key, view, start)
            if count == len(view):
                break
            if attempt == READ_ATTEMPTS - 1:
                raise ValueError(f"{part.key}: {start + count} bytes, manifest says {part.size}")
        with lock:
            pending[part] -= 1
            complete = pending[part] == 0
        if complete:  # every range of the part is in: no other thread writes its view now
            problem = part.mismatch(views[part])
            for _ in range(READ_ATTEMPTS - 1):
                if not problem:
                    break
                count = store.read_into(part.key, views[part], 0)
                problem = part.mismatch(views[part][:count])
            if problem:
                raise ValueError(f"{part.key}: {problem} in {READ_ATTEMPTS} reads")

    with ThreadPoolExecutor(transfer.threads, thread_name_prefix="ckpt-download") as pool:
        for _ in pool.map(read, ranges):
            pass
    return blobs


def _check_stored(store: ObjectStore, manifest: Manifest) -> None:
    """Every part of ``manifest`` is listed under its writer's prefix, at least as large
    as the manifest says."""
    stored = store.sizes_under(writer_prefix(manifest.step, manifest.writer))
    for part in manifest.parts:
        if part.key not in stored:
            raise FileNotFoundError(part.key)
        if stored[part.key] < part.size:
            raise ValueError(f"{part.key}: {stored[part.key]} bytes, manifest says {part.size}")
