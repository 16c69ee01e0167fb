"""Moving a checkpoint's blobs to and from a store as parts, in parallel.

This module is the I/O half of a checkpoint; ``checkpoint`` is the commit protocol. A blob
is cut into parts of :attr:`TransferPlan.part_bytes`, each its own object, uploaded by
:attr:`TransferPlan.threads` threads with its CRC32C (which the store checks on arrival
where it can). A blob may also be a :class:`GatheredBlob`, its bytes in several buffers
(a final save's tensors, each in its own memory): a part that lies within one buffer is
uploaded from it as it is, and one that spans several is assembled by the thread that
uploads it (into the blob's idle staging memory, else a part-sized buffer of the thread's),
with a copy that does not hold the GIL. The cut into parts is the blob's either way, so
the manifest and every stored byte are what one buffer would have given.

Loading is ``reading``'s: :func:`download` reads every blob into a buffer of its own.

Sizes follow the state (:func:`plan`): enough parts to keep every thread busy twice over,
none smaller than 4 MiB (per-request overhead) or larger than 64 MiB (one slow request
must not hold up the save).
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from spotproof.runtime.checkpointer.layout import part_key
from spotproof.runtime.checkpointer.manifest import Manifest, Part
from spotproof.runtime.checkpointer.reading import (
    READ_ATTEMPTS,
    check_stored,
    copy_into,
    crc32c_hex_of,
    read_blobs,
    scratch_view,
)
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import ObjectStore, StorageError

__all__ = [
    "READ_ATTEMPTS",
    "GatheredBlob",
    "SaveCancelled",
    "SaveDeadline",
    "TransferPlan",
    "download",
    "plan",
    "upload",
]

MiB = 1 << 20
MIN_PART, MAX_PART = 4 * MiB, 64 * MiB
_TRANSIENT = (Failure.UNREACHABLE, Failure.SERVER, Failure.OTHER)


class GatheredBlob:
    """A blob whose bytes lie in several buffers, in order: uploaded without first being
    copied into one. ``staging``, memory of the blob's size that nothing else uses now
    (already faulted in), is where a part that spans several buffers is assembled; without
    it, each upload thread assembles into a part-sized buffer of its own."""

    def __init__(self, pieces: Iterable[memoryview], staging: memoryview | None = None) -> None:
        self.pieces = [memoryview(piece).cast("B") for piece in pieces if len(piece)]
        self._starts: list[int] = []
        total = 0
        for piece in self.pieces:
            self._starts.append(total)
            total += len(piece)
        self._size = total
        self.staging = staging if staging is not None and len(staging) == total else None

    def __len__(self) -> int:
        return self._size

    def window(self, offset: int, size: int) -> list[memoryview]:
        """The bytes ``[offset, offset + size)``, as slices of the buffers they lie in."""
        end, found = min(offset + size, self._size), []
        index = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while index < len(self.pieces) and self._starts[index] < end:
            start, piece = self._starts[index], self.pieces[index]
            found.append(piece[max(0, offset - start) : end - start])
            index += 1
        return found


Blob = bytes | bytearray | memoryview | GatheredBlob


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
    blobs: Mapping[str, Blob],
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
        (part_key(step, writer, name, index), name, index, *_window(blob, offset, size))
        for name, blob in blobs.items()
        for index, offset in enumerate(range(0, max(len(blob), 1), size))
    ]
    slowest = [0.0]  # seconds of the slowest part written so far, for a SaveDeadline

    def write(job: tuple[str, str, int, list[memoryview], memoryview | None]) -> Part:
        key, name, index, pieces, staging = job
        digest = crc32c_hex_of(pieces)
        data = pieces[0] if len(pieces) == 1 else _joined(pieces, staging)
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


def _window(blob: Blob, offset: int, size: int) -> tuple[list[memoryview], memoryview | None]:
    """The part's bytes, as slices of the buffers they lie in, and where to assemble them."""
    if isinstance(blob, GatheredBlob):
        staging = blob.staging[offset : offset + size] if blob.staging is not None else None
        return blob.window(offset, size), staging
    return [memoryview(blob)[offset : offset + size]], None


def _joined(pieces: list[memoryview], staging: memoryview | None) -> memoryview:
    """``pieces`` copied one after the other into ``staging``, or this thread's scratch."""
    joined = staging if staging is not None else scratch_view(sum(map(len, pieces)))
    position = 0
    for piece in pieces:
        copy_into(joined[position : position + len(piece)], piece)
        position += len(piece)
    return joined[:position]


def download(
    store: ObjectStore, manifest: Manifest, transfer: TransferPlan
) -> dict[str, bytearray]:
    """Every blob of ``manifest``, read into one buffer each and verified part by part
    (``reading.read_blobs``), once a listing of the writer's prefix has shown every part
    at least as large as the manifest says: memory follows the bytes really stored, not the
    claims. ``ValueError`` or ``FileNotFoundError`` make the caller skip the checkpoint."""
    check_stored(store, manifest)
    return read_blobs(store, manifest.parts, transfer.threads)
