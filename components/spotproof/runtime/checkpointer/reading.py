"""Reading a checkpoint's parts back to where their bytes go, verified part by part.

The destination is one fresh buffer per blob (:func:`read_blobs`, what
``transfer.download`` returns), or memory that already exists: a restore that holds the
model's tensors reads the parts straight into them (:meth:`StoredBlobs.read_into`, with a
list of (offset in the blob, destination); ``runtime.checkpointer.in_place`` says how a
failure half-way is undone). A part may then fill several destinations and a destination
span several parts; each part's CRC32C is computed over the destinations its bytes landed
in, one after the other.

Reads run several at a time, and each part is verified as soon as its last byte lands, in
the thread that read it, so verification overlaps the reads still running. A load reads
whole parts, one request each, unless there are fewer parts than threads (a checkpoint
written with other sizes); only then are parts split into byte ranges read in parallel.
S3 and GCS serve ranges natively (S3's performance guidelines recommend ranged GETs for
parallel downloads), but moto builds the whole object for every ranged GET, so splitting
more than needed would measure the emulator, not the protocol.

A part that arrives short or fails its checksum is read again, whole, up to
:data:`READ_ATTEMPTS` reads in all: bytes damaged on the way (a flaky NIC, a proxy) are not
a damaged checkpoint, and falling back to an older step for them would lose work.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from spotproof.runtime.checkpointer.integrity import crc32c
from spotproof.runtime.checkpointer.layout import writer_prefix
from spotproof.runtime.checkpointer.manifest import Manifest, Part
from spotproof.runtime.storage import ObjectStore

MiB = 1 << 20
MIN_RANGE = 1 * MiB
READ_ATTEMPTS = 3
"""Reads of a part before a short read or a checksum mismatch counts as the stored bytes'."""


_scratch = threading.local()


def scratch_view(size: int) -> memoryview:
    """``size`` bytes of a buffer private to this thread and reused by its next part: a
    fresh part-sized buffer per part would fault in new memory for every one."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _scratch.buffer = bytearray(size)
    return memoryview(buffer)[:size]


def copy_into(target: memoryview, source: memoryview) -> None:
    """``source``'s bytes into ``target`` (as long), without holding the GIL: a slice
    assignment holds it through the whole ``memcpy``, so the other threads' reads, writes
    and checksums would wait for every copy."""
    if not len(source):
        return
    if target.readonly or source.readonly:
        target[:] = source
        return
    ctypes.memmove(_address(target), _address(source), len(source))


def _address(view: memoryview) -> int:
    return ctypes.addressof((ctypes.c_char * len(view)).from_buffer(view))


def crc32c_hex_of(pieces: Iterable[memoryview]) -> str:
    """CRC32C of ``pieces``, one after the other, as a manifest spells it."""
    value = 0
    for piece in pieces:
        value = crc32c(piece, value)
    return f"{value:08x}"


def check_stored(store: ObjectStore, manifest: Manifest) -> None:
    """Every part of ``manifest`` is listed under its writer's prefix, at least as large
    as the manifest says: checked before anything is allocated or written for them, so
    memory follows the bytes really stored, not the claims."""
    stored = store.sizes_under(writer_prefix(manifest.step, manifest.writer))
    for part in manifest.parts:
        if part.key not in stored:
            raise FileNotFoundError(part.key)
        if stored[part.key] < part.size:
            raise ValueError(f"{part.key}: {stored[part.key]} bytes, manifest says {part.size}")


def read_blobs(store: ObjectStore, parts: Iterable[Part], threads: int) -> dict[str, bytearray]:
    """Every blob of ``parts``, read into one buffer each and verified part by part.
    Raises ``ValueError`` naming a part that is short or fails its checksum every time,
    ``FileNotFoundError`` when one is missing: the caller then skips the checkpoint."""
    ordered = sorted(parts, key=lambda p: (p.blob, p.index))
    sizes: dict[str, int] = {}
    for part in ordered:
        sizes[part.blob] = sizes.get(part.blob, 0) + part.size
    blobs = {blob: bytearray(size) for blob, size in sizes.items()}
    offsets: dict[str, int] = {}
    pieces = []
    for part in ordered:
        offset = offsets.get(part.blob, 0)
        offsets[part.blob] = offset + part.size
        pieces.append((part, [(0, memoryview(blobs[part.blob])[offset : offset + part.size])]))
    _read_pieces(store, pieces, threads, direct_min=0)
    return blobs


@dataclass(frozen=True)
class StoredBlobs:
    """The blobs of a checkpoint whose parts are all listed, not yet read: for a restore
    that reads them straight to where their bytes belong."""

    store: ObjectStore
    manifest: Manifest
    threads: int
    """Reads in flight at once."""

    @property
    def sizes(self) -> dict[str, int]:
        return self.manifest.blob_sizes

    def read(self, blob: str) -> bytearray:
        """``blob`` whole, in a buffer of its own, verified part by part."""
        return read_blobs(self.store, self._parts(blob), self.threads).get(blob, bytearray())

    def read_into(self, blob: str, targets: Sequence[tuple[int, memoryview]]) -> None:
        """Read ``blob`` into ``targets``: (offset in the blob, where those bytes go),
        sorted, not overlapping, within the blob. Bytes no target claims are read into
        scratch, to be verified and dropped. Raises as :func:`read_blobs` does; bytes
        already read into targets then stay there."""
        parts = self._parts(blob)
        claimed = [(offset, view.cast("B")) for offset, view in targets if len(view)]
        end = 0
        for offset, view in claimed:
            if offset < end:
                raise ValueError(f"{blob}: targets overlap or are out of order at {offset}")
            end = offset + len(view)
        if end > sum(part.size for part in parts):
            raise ValueError(f"{blob}: targets reach byte {end}, past the blob's end")
        direct_min = self.store.direct_read_min
        _read_pieces(self.store, _cut(parts, claimed), self.threads, direct_min)

    def _parts(self, blob: str) -> list[Part]:
        return sorted((p for p in self.manifest.parts if p.blob == blob), key=lambda p: p.index)


Pieces = list[tuple[int, memoryview]]
"""Where a part's bytes go: (offset in the part, destination), in order, covering it."""


def _cut(parts: list[Part], targets: Pieces) -> list[tuple[Part, Pieces]]:
    """Each part of a blob with the slices of ``targets`` it fills, and scratch buffers
    for the bytes between them."""
    cut, index, start = [], 0, 0
    for part in parts:
        pieces: Pieces = []
        position, end = start, start + part.size
        while position < end:
            while index < len(targets) and targets[index][0] + len(targets[index][1]) <= position:
                index += 1
            if index < len(targets) and targets[index][0] <= position:
                offset, view = targets[index]
                stop = min(end, offset + len(view))
                pieces.append((position - start, view[position - offset : stop - offset]))
            else:
                stop = min(end, targets[index][0]) if index < len(targets) else end
                pieces.append((position - start, memoryview(bytearray(stop - position))))
            position = stop
        cut.append((part, pieces))
        start = end
    return cut


def _read_pieces(
    store: ObjectStore,
    parts: list[tuple[Part, Pieces]],
    threads: int,
    direct_min: int | None,
) -> None:
    """Read every part into its pieces, several ranges at a time, and verify each part
    once all its ranges are in. ``direct_min``: pieces at least this long are read into
    straight, shorter runs through scratch; None reads every range through scratch."""
    splits = max(1, math.ceil(threads / max(len(parts), 1)))
    ranges = []
    for part, pieces in parts:
        span = max(MIN_RANGE, math.ceil(part.size / splits))
        for start in range(0, max(part.size, 1), span):
            ranges.append((part, pieces, start, min(part.size, start + span)))
    pending = {part: 0 for part, _ in parts}
    for part, *_ in ranges:
        pending[part] += 1
    lock, failed = threading.Lock(), threading.Event()

    def read(job: tuple[Part, Pieces, int, int]) -> None:
        part, pieces, start, end = job
        if failed.is_set():
            return  # the checkpoint is lost already: reading on would only take time
        try:
            for attempt in range(READ_ATTEMPTS):
                count = _fill(store, part.key, _clipped(pieces, start, end), direct_min)
                if count is None:
                    break
                if attempt == READ_ATTEMPTS - 1:
                    raise ValueError(f"{part.key}: {count} bytes, manifest says {part.size}")
            with lock:
                pending[part] -= 1
                complete = pending[part] == 0
            if complete:  # every range of the part is in: no other thread writes it now
                _verify(store, part, pieces, direct_min)
        except BaseException:
            failed.set()
            raise

    with ThreadPoolExecutor(threads, thread_name_prefix="ckpt-download") as pool:
        for _ in pool.map(read, ranges):
            pass


def _verify(store: ObjectStore, part: Part, pieces: Pieces, direct_min: int | None) -> None:
    """The part's pieces hold its bytes, reading it again, whole, up to
    :data:`READ_ATTEMPTS` reads in all; ``ValueError`` if they never do."""
    problem = _mismatch(part, [view for _, view in pieces])
    for _ in range(READ_ATTEMPTS - 1):
        if not problem:
            return
        count = _fill(store, part.key, pieces, direct_min)
        problem = (
            _mismatch(part, [view for _, view in pieces])
            if count is None
            else f"{count} bytes, manifest says {part.size}"
        )
    if problem:
        raise ValueError(f"{part.key}: {problem} in {READ_ATTEMPTS} reads")


def _clipped(pieces: Pieces, start: int, end: int) -> Pieces:
    """The slices of ``pieces`` that bytes ``[start, end)`` of the part go to."""
    clipped = []
    for offset, view in pieces:
        low, high = max(offset, start), min(offset + len(view), end)
        if low < high:
            clipped.append((low, view[low - offset : high - offset]))
    return clipped


def _fill(store: ObjectStore, key: str, pieces: Pieces, direct_min: int | None) -> int | None:
    """Read ``key``'s bytes into ``pieces`` (contiguous, in order); None when all came,
    else where the object ended."""
    if not pieces:  # an empty part is still opened: what is there may be no file at all
        store.read_into(key, memoryview(bytearray()), 0)
    index = 0
    while index < len(pieces):
        start, view = pieces[index]
        if direct_min is not None and len(view) >= direct_min:
            count = store.read_into(key, view, start)
            if count != len(view):
                return start + count
            index += 1
            continue
        run = index
        while run < len(pieces) and (direct_min is None or len(pieces[run][1]) < direct_min):
            run += 1
        scratch = scratch_view(sum(len(view) for _, view in pieces[index:run]))
        count = store.read_into(key, scratch, start)
        if count != len(scratch):
            return start + count
        position = 0
        for _, view in pieces[index:run]:
            copy_into(view, scratch[position : position + len(view)])
            position += len(view)
        index = run
    return None


def _mismatch(part: Part, views: list[memoryview]) -> str | None:
    """Why ``views``, one after the other, are not the part's bytes; None when they are."""
    if sum(len(view) for view in views) != part.size:
        return f"{sum(len(view) for view in views)} bytes, manifest says {part.size}"
    if part.crc32c is not None:
        return None if crc32c_hex_of(views) == part.crc32c else "crc32c mismatch"
    digest = hashlib.sha256()
    for view in views:
        digest.update(view)
    return None if digest.hexdigest() == part.sha256 else "sha256 mismatch"
