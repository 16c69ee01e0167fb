"""A directory as a checkpoint store: durable, and with no copy between memory and disk.

POSIX makes a write durable only after ``fsync`` of the file *and* of every directory
whose entries changed (fsync(2): "Calling fsync() does not necessarily ensure that the
entry in the directory containing the file has also reached disk. For that an explicit
fsync() on a file descriptor for the directory is also needed."). So:

- a part is written with ``os.write`` straight from the caller's memory and fsynced;
- :meth:`LocalStore.make_durable` then fsyncs the writer's directory and each parent up
  to the root, once for all parts, before the manifest may name them;
- the manifest is written to a temporary file, fsynced, ``link()``-ed into place (atomic,
  and refused when the name exists) and its directory fsynced.

Reads go straight into the caller's buffer with ``preadv``.

Every key stays under the root (``objects.confined``), and every file is opened through
:meth:`LocalStore._open`: the directory it is in must resolve to the root or below it, the
file itself must not be a symbolic link (``O_NOFOLLOW``), and what is opened must be a
regular file, checked on the open descriptor (``fstat``) so it cannot be swapped after the
check. ``O_NONBLOCK`` makes a FIFO fail that check instead of blocking the open forever.
Anything else is :class:`Unreadable`, which a loader skips like a corrupt checkpoint.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from spotproof.runtime.storage.errors import AlreadyExists, Unreadable, failed
from spotproof.runtime.storage.objects import ObjectStore, within

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_REFUSED = {errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG}
"""What ``open`` answers for a link (ELOOP under O_NOFOLLOW), a FIFO without a reader
(ENXIO), a directory or a name too long: not a file this store wrote."""


class LocalStore(ObjectStore):
    direct_read_min = 64 * 1024
    """One ``preadv`` per destination this long; a model of many small tensors still costs
    few system calls."""

    def _inside(self, directory: Path) -> Path:
        """``directory``, when it resolves to the root or below it."""
        root = os.path.realpath(self.root)
        real = os.path.realpath(directory)
        if real != root and not real.startswith(root + os.sep):
            raise Unreadable(f"{directory} resolves to {real}, outside the store's root")
        return directory

    def _make_parent(self, path: Path) -> None:
        """Create ``path``'s directory, once its nearest existing ancestor is inside the
        root: ``mkdir`` follows links, and must not create directories elsewhere."""
        existing = path.parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        self._inside(existing)
        path.parent.mkdir(parents=True, exist_ok=True)

    def _open(self, key: str, flags: int) -> int:
        """A descriptor of the regular file at ``key``; :class:`Unreadable` for anything
        else, ``FileNotFoundError`` when nothing is there."""
        path = Path(self.path(key))
        self._inside(path.parent)
        try:
            descriptor = os.open(path, flags, 0o644)
        except OSError as error:
            if error.errno in _REFUSED:
                raise Unreadable(f"{key}: not a regular file ({error.strerror})") from None
            raise
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise Unreadable(f"{key}: not a regular file")
        return descriptor

    def open_regular(self, key: str) -> int:
        """A read-only descriptor of the regular file at ``key``, with the checks every
        read here makes; the caller closes it (``peer`` serves parts with ``sendfile``)."""
        return self._open(key, _READ)

    def put(self, key: str, data: bytes | memoryview, *, crc32c: str | None = None) -> None:
        path = Path(self.path(key))
        with self.calling(f"writing {key}"):
            self._make_parent(path)
            descriptor = self._open(key, _WRITE)
            try:
                _write_all(descriptor, memoryview(data).cast("B"))
                os.fsync(descriptor)
            finally:
                os.close(descriptor)

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        with self.calling(f"reading {key}"):
            descriptor = self._open(key, _READ)
            try:
                filled = 0
                while filled < len(buffer):  # one call moves at most ~2 GiB on Linux
                    count = os.preadv(descriptor, [buffer[filled:]], offset + filled)
                    if not count:
                        break
                    filled += count
                return filled
            finally:
                os.close(descriptor)

    def get(self, key: str, *, limit: int | None = None) -> bytes:
        """In 1 MiB reads, so a ``limit`` costs memory only as far as the file goes."""
        with self.calling(f"reading {key}"), os.fdopen(self._open(key, _READ), "rb") as file:
            chunks = []
            count = 0
            while limit is None or count <= limit:
                chunk = file.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                count += len(chunk)
        data = b"".join(chunks)
        return data if limit is None else within(key, data, limit)

    def make_durable(self, prefix: str) -> None:
        with self.calling(f"syncing {prefix}"):
            directory, root = Path(self.path(prefix)), Path(self.root)
            while True:
                if directory.is_dir():
                    _fsync_directory(directory)
                if directory == root or root not in directory.parents:
                    break
                directory = directory.parent

    def place(self, key: str, staged: str, *, create_only: bool = False) -> None:
        """Move ``staged``, a file already written on this file system, to ``key``:
        replacing what is there atomically (``rename``; durable after :meth:`make_durable`,
        as :meth:`put` is), or, ``create_only``, refused with :class:`AlreadyExists` when
        the name exists (``link``, its directory synced, as :meth:`put_if_absent` does). The
        replica server streams a body there as it arrives, so none is held whole in memory."""
        path = Path(self.path(key))
        self._make_parent(path)
        self._inside(path.parent)
        if not create_only:
            os.rename(staged, path)
            return
        try:
            os.link(staged, path)
        except FileExistsError:
            raise AlreadyExists(key) from None
        _fsync_directory(path.parent)

    def put_if_absent(self, key: str, data: bytes) -> None:
        path = Path(self.path(key))
        try:
            self._make_parent(path)
            self._inside(path.parent)
            descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            try:
                with os.fdopen(descriptor, "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.link(temporary, path)  # atomic, and refuses an existing name
            finally:
                os.unlink(temporary)
            _fsync_directory(path.parent)
        except FileExistsError:
            raise AlreadyExists(key) from None
        except Unreadable:
            raise
        except Exception as error:
            raise failed(self.url, f"creating {key}", error) from error


def _write_all(descriptor: int, data: memoryview) -> None:
    written = 0
    while written < len(data):
        written += os.write(descriptor, data[written:])


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        # Some file systems (and FUSE mounts) cannot fsync a directory: nothing more can be
        # done there. A real I/O error still fails the save.
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(descriptor)
