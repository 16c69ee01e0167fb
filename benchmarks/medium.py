"""Where the benchmarks write, and the page-cache state their reads start from.

Every contender of a row writes to the same directory and reads with the same cache state,
or the comparison says nothing. Two traps this module closes:

- **The medium.** ``tempfile`` and ``spotproof.smoke.emulation.object_stores`` (its ``file``
  store) may land in memory: ``/dev/shm``, or a ``$TMPDIR`` on tmpfs. A "local disk"
  figure measured there is a memory figure (an independent re-run of the capacity row found 2
  GiB taking 5.8-11 s on the real disk where ``/dev/shm`` had committed 5 GiB within 15 s).
  :func:`medium` picks a directory on a disk-backed file system unless told otherwise, and
  every row is labelled with the file system it really ran on, read from
  ``/proc/self/mountinfo``.
- **The cache.** A restore right after a save reads from the page cache. A restarted node
  reads cold. :func:`drop_cache` evicts the files a cold run will read (the kernel's
  ``drop_caches`` when this process may write it, else ``posix_fadvise(POSIX_FADV_DONTNEED)``
  on each file after a ``sync``, which evicts clean pages: ``posix_fadvise(2)``);
  :func:`prime` reads them through first for a warm run; :func:`resident_share` (``mincore(2)``)
  shows which state a run really started from.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs"})
REPO_SCRATCH = Path(__file__).resolve().parents[1] / "out" / "bench"
"""On the repository's file system, ignored by git (``/out/``), removed by ``make clean``."""
_CHUNK = 8 << 20


@dataclass(frozen=True)
class Filesystem:
    type: str
    source: str
    mount_point: str

    @property
    def in_memory(self) -> bool:
        return self.type in MEMORY_FILESYSTEMS


@dataclass(frozen=True)
class Medium:
    """A fresh directory a benchmark owns, and the file system under it."""

    path: Path
    filesystem: Filesystem

    @property
    def label(self) -> str:
        """How rows name it: ``local disk (ext4)`` or ``memory (tmpfs)``."""
        kind = "memory" if self.filesystem.in_memory else "local disk"
        return f"{kind} ({self.filesystem.type})"

    def describe(self) -> str:
        fs = self.filesystem
        return f"{self.path}: {fs.type} on {fs.source}, mounted at {fs.mount_point}"


def filesystem_of(path: str | Path) -> Filesystem:
    """The mount that holds ``path``: the longest mount point above it in
    ``/proc/self/mountinfo`` (``proc(5)``: field 5 is the mount point; after the ``-``
    separator come the file system type and the source)."""
    target = os.path.realpath(path)
    best = Filesystem("unknown", "unknown", "/")
    best_length = -1
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            if "-" not in fields:
                continue
            mount_point = fields[4].replace("\\040", " ")
            tail = fields[fields.index("-") + 1 :]
            inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= best_length and len(tail) >= 2:
                best, best_length = Filesystem(tail[0], tail[1], mount_point), len(mount_point)
    return best


def disk_base(explicit: str | None = None) -> Path:
    """Where a benchmark's "local disk" directory goes: ``explicit`` (``--dir`` or
    ``$BENCH_DIR``) as given, whatever it is on (the rows then say so); else the system's
    temporary directory when it is disk-backed; else the repository's ``out/bench``."""
    if explicit:
        return Path(explicit)
    temporary = Path(tempfile.gettempdir())
    if not filesystem_of(temporary).in_memory:
        return temporary
    REPO_SCRATCH.mkdir(parents=True, exist_ok=True)
    return REPO_SCRATCH


@contextlib.contextmanager
def medium(explicit: str | None = None, prefix: str = "spotproof-bench-") -> Iterator[Medium]:
    """A fresh directory under :func:`disk_base`, removed afterwards."""
    base = disk_base(explicit or os.environ.get("BENCH_DIR"))
    if not base.is_dir():
        raise SystemExit(f"--dir {base}: not a directory; give an existing directory to write in")
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield Medium(path, filesystem_of(path))
    finally:
        shutil.rmtree(path, ignore_errors=True)


def files_under(paths: Iterable[str | Path]) -> list[Path]:
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file())
    return found


COLD_METHODS = ("auto", "drop_caches", "fadvise")
DROP_CACHES = "drop_caches"
FADVISE = "posix_fadvise(DONTNEED)"
_cold = {"method": "auto"}


def choose_cold_method(preference: str) -> None:
    """``auto``: the kernel's ``drop_caches`` where this process may write it, else
    ``posix_fadvise``; ``fadvise`` evicts only the benchmark's own files (kinder to other
    work on the machine); ``drop_caches`` insists on the global drop."""
    if preference not in COLD_METHODS:
        raise SystemExit(f"--cold {preference}: allowed are {', '.join(COLD_METHODS)}")
    _cold["method"] = {"auto": "auto", "drop_caches": DROP_CACHES, "fadvise": FADVISE}[preference]


def drop_cache(paths: Iterable[str | Path]) -> str:
    """Evict ``paths`` (files, or every file under a directory) from the page cache, after
    writing back whatever is dirty. Returns the method used, the same for the whole run:
    ``drop_caches`` (every clean page of the machine, and dentries and inodes; root outside
    a read-only ``/proc``), or ``posix_fadvise(DONTNEED)`` on each file (``posix_fadvise(2)``:
    the kernel drops the file's clean pages in the range; ``fdatasync`` first makes them
    clean)."""
    os.sync()
    if _cold["method"] in ("auto", DROP_CACHES):
        try:
            # proc_sys_vm(5): 3 frees the page cache and reclaimable slab (dentries, inodes).
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            _cold["method"] = DROP_CACHES
            return DROP_CACHES
        except OSError as error:
            if _cold["method"] == DROP_CACHES:
                raise SystemExit(f"--cold drop_caches: {error}; use --cold fadvise") from None
            _cold["method"] = FADVISE
    for file in files_under(paths):
        with contextlib.suppress(FileNotFoundError):
            descriptor = os.open(file, os.O_RDONLY)
            try:
                os.fdatasync(descriptor)
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(descriptor)
    return FADVISE


def prime(paths: Iterable[str | Path]) -> None:
    """Read every file under ``paths`` through once, so the next read finds it cached."""
    buffer = bytearray(_CHUNK)
    for file in files_under(paths):
        with contextlib.suppress(FileNotFoundError), open(file, "rb", buffering=0) as stream:
            while stream.readinto(buffer):
                pass


def resident_share(paths: Iterable[str | Path]) -> float:
    """The share of the bytes of ``paths`` in the page cache now: ``mincore(2)`` on a
    read-only shared mapping of each file, which reports the file's cached pages without
    reading any. NaN where it cannot be told."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    failed = ctypes.c_void_p(-1).value
    resident = total = 0
    for file in files_under(paths):
        size = file.stat().st_size
        if not size:
            continue
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vector = (ctypes.c_ubyte * pages)()
        descriptor = os.open(file, os.O_RDONLY)
        try:
            address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, descriptor, 0)
            if address in (None, failed):
                return float("nan")
            try:
                if libc.mincore(address, size, vector) != 0:
                    return float("nan")
            finally:
                libc.munmap(address, size)
        finally:
            os.close(descriptor)
        resident += sum(v & 1 for v in vector)
        total += pages
    return resident / total if total else float("nan")


class CacheState:
    """The ``before`` of a cold or a warm restore row: evict or prime the files the run
    will read, then record how much of them the page cache held as it started."""

    def __init__(self, paths: dict[str, str], cold: bool) -> None:
        self.paths, self.cold = paths, cold
        self.method = "priming read"
        self.resident: list[float] = []

    def __call__(self, name: str, _round: int) -> None:
        if self.cold:
            self.method = drop_cache([self.paths[name]])
        else:
            prime([self.paths[name]])
        self.resident.append(resident_share([self.paths[name]]))

    def describe(self) -> str:
        low, high = min(self.resident), max(self.resident)
        state = "cold" if self.cold else "warm"
        return (
            f"  cache: {state}, by {self.method} before each run; share of the files in "
            f"the page cache as runs started: {100 * low:.1f}%-{100 * high:.1f}%"
        )
