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
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from spotproof.runtime.storage.errors import AlreadyExists, failed
from spotproof.runtime.storage.objects import ObjectStore


class LocalStore(ObjectStore):
    def put(self, key: str, data: bytes | memoryview, *, crc32c: str | None = None) -> None:
        path = Path(self.path(key))
        with self.calling(f"writing {key}"):
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(descriptor, memoryview(data).cast("B"))
                os.fsync(descriptor)
            finally:
                os.close(descriptor)

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        with self.calling(f"reading {key}"):
            descriptor = os.open(self.path(key), os.O_RDONLY)
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

    def make_durable(self, prefix: str) -> None:
        with self.calling(f"syncing {prefix}"):
            directory, root = Path(self.path(prefix)), Path(self.root)
            while True:
                if directory.is_dir():
                    _fsync_directory(directory)
                if directory == root or root not in directory.parents:
                    break
                directory = directory.parent

    def put_if_absent(self, key: str, data: bytes) -> None:
        path = Path(self.path(key))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
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
