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

Every key stays under the root (``contract.confined``), and every file is opened through
:meth:`LocalStore._open`: the directory it is in must resolve to the root or below it, the
file itself must not be a symbolic link (``O_NOFOLLOW``), and what is opened must be a
regular file, checked on the open descriptor (``fstat``) so it cannot be swapped after the
check. ``O_NONBLOCK`` makes a FIFO fail that check instead of blocking the open forever.
What a read finds there otherwise is :class:`Unreadable`, which a loader skips like a
corrupt checkpoint.

The store itself is refused (:class:`StorageURLError`: exit 2 for a trainer, and no
retry) where skipping would be wrong:

- a folder directly under the root (``manifests/``, ``steps/``: every key is in one) that
  is a link out of the root, or is no directory (a file put in its place). Read as
  missing, it would let a trainer start from step 0 as if nothing had been committed, and
  write over the run; followed, it would read and write somewhere else;
- a listing of a folder that resolves out of the root or is no directory;
- a write that would follow a link out of the root, at any depth.

A missing folder is only empty: a store opened to read (``open_store(url, create=False)``:
``spotproof status``, the drill) creates nothing, and lists nothing where nothing is.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from spotproof.runtime.storage.contract import confined, within
from spotproof.runtime.storage.errors import (
    AlreadyExists,
    StorageError,
    StorageURLError,
    Unreadable,
    failed,
)
from spotproof.runtime.storage.objects import FsspecStore

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_REFUSED = {errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG}
"""What ``open`` answers for a link (ELOOP under O_NOFOLLOW), a FIFO without a reader
(ENXIO), a directory or a name too long: not a file this store wrote."""


class LocalStore(FsspecStore):
    direct_read_min = 64 * 1024
    """One ``preadv`` per destination this long; a model of many small tensors still costs
    few system calls."""

    def _inside(self, directory: Path, refused: type[Exception] = Unreadable) -> Path:
        """``directory``, when it resolves to the root or below it; else ``refused``."""
        root = os.path.realpath(self.root)
        real = os.path.realpath(directory)
        if real != root and not real.startswith(root + os.sep):
            raise refused(
                f"{directory} resolves to {real}, outside the store's root; allowed: a "
                "directory inside it"
            )
        return directory

    def _folder(self, path: Path) -> None:
        """:class:`StorageURLError` unless ``path`` is missing, or a directory that resolves
        inside the root."""
        self._inside(path, StorageURLError)
        if os.path.lexists(path) and not path.is_dir():
            kind = "a link to no directory" if path.is_symlink() else "no directory"
            raise StorageURLError(
                f"{path} is {kind}, where the store keeps a folder of its objects; allowed: "
                "a directory"
            )

    def _top(self, key: str, *, folder: bool) -> None:
        """:meth:`_folder` of the folder under the root that holds ``key`` (its first
        segment), or that ``key`` is when ``folder``."""
        first, _, rest = confined(key).partition("/")
        if first and (rest or folder):
            self._folder(Path(self.root, first))

    def path(self, key: str) -> str:
        self._top(key, folder=False)
        return super().path(key)

    def _make_parent(self, path: Path) -> None:
        """Create ``path``'s directory, once its nearest existing ancestor is inside the
        root: ``mkdir`` follows links, and must not create directories elsewhere."""
        existing = path.parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        self._inside(existing, StorageURLError)
        path.parent.mkdir(parents=True, exist_ok=True)

    def _open(self, key: str, flags: int) -> int:
        """A descriptor of the regular file at ``key``; for anything else
        :class:`Unreadable` (to read) or :class:`StorageURLError` (to write), and
        ``FileNotFoundError`` when nothing is there."""
        path = Path(self.path(key))
        refused, what = (Unreadable, key) if flags == _READ else (StorageURLError, path)
        self._inside(path.parent, refused)
        try:
            descriptor = os.open(path, flags, 0o644)
        except OSError as error:
            if error.errno in _REFUSED:
                raise refused(f"{what}: not a regular file ({error.strerror})") from None
            raise
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise refused(f"{what}: not a regular file")
        return descriptor

    def list(self, prefix: str) -> list[str]:
        """Names directly under the folder ``prefix``: none where it is missing, and
        :class:`StorageURLError` where it is no directory inside the root."""
        folder = Path(self.root, confined(prefix)) if prefix else Path(self.root)
        self._folder(folder)
        return super().list(prefix) if folder.is_dir() else []

    def sizes_under(self, prefix: str) -> dict[str, int]:
        self._top(prefix, folder=True)
        return super().sizes_under(prefix)

    def delete_prefix(self, prefix: str) -> None:
        self._top(prefix, folder=True)
        super().delete_prefix(prefix)

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
        except (Unreadable, StorageError):
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
