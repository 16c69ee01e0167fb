"""The object store over fsspec: the buckets' and a directory's implementation of the
contract (``contract.ObjectStore``).

The protocol needs a few operations and one guarantee: ``put_if_absent`` is a single
atomic create-only write. fsspec exposes it for all three clouds as
``pipe_file(..., mode="create")`` (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``,
Azure ``overwrite=False``). Bulk data (checkpoint parts) goes through :meth:`FsspecStore.put`
with the part's CRC32C and :meth:`FsspecStore.read_into` with a byte range; subclasses
replace those two where a faster or safer path exists (``local``, ``s3``, ``gcs``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import fsspec

from spotproof.runtime.failures import Failure, classify
from spotproof.runtime.storage.contract import ObjectStore, confined, within
from spotproof.runtime.storage.errors import (
    AlreadyExists,
    StorageError,
    Unreadable,
    failed,
)


@contextlib.contextmanager
def past_end_reads_nothing() -> Iterator[None]:
    """A ranged read that starts where the object has already ended (HTTP 416) has read
    nothing; the caller then finds the object shorter than it should be."""
    try:
        yield
    except Exception as error:
        if classify(error) is not Failure.PAST_END:
            raise


class FsspecStore(ObjectStore):
    """Keys relative to one root URL, through an fsspec filesystem."""

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem, root: str) -> None:
        self.url = url
        self.fs = fs
        self.root = root.rstrip("/")

    @classmethod
    def filesystem_options(cls, url: str) -> dict[str, Any]:
        """What its fsspec filesystem needs beyond the environment its SDK reads itself
        (``open_store`` adds the deadlines of ``backends``)."""
        return {}

    def path(self, key: str) -> str:
        return f"{self.root}/{confined(key)}"

    @contextlib.contextmanager
    def calling(self, what: str) -> Iterator[None]:
        """Turns any SDK failure inside the block into one :class:`StorageError` line."""
        try:
            yield
        except (AlreadyExists, FileNotFoundError, Unreadable, StorageError):  # said already
            raise
        except Exception as error:
            raise failed(self.url, what, error) from error

    # --- bulk data ---------------------------------------------------------------------

    def put(self, key: str, data: bytes | memoryview, *, crc32c: str | None = None) -> None:
        with self.calling(f"writing {key}"):
            self.fs.pipe_file(self.path(key), bytes(data))

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        if not len(buffer):
            return 0
        end = offset + len(buffer)
        with self.calling(f"reading {key}"), past_end_reads_nothing():
            data = self.fs.cat_file(self.path(key), start=offset, end=end)
            count = min(len(data), len(buffer))
            buffer[:count] = data[:count]
            return count
        return 0

    def make_durable(self, prefix: str) -> None:
        """Nothing to do: a bucket's PUT is durable once answered."""

    # --- small objects and names -------------------------------------------------------

    def _single_request(self, data: bytes) -> dict[str, Any]:
        """gcsfs switches to a resumable upload at ``chunksize``; a single request is what
        carries the precondition everywhere (fake-gcs-server ignores it on resumable ones)."""
        return {"chunksize": len(data) + 1} if self.fs.protocol[0] in ("gcs", "gs") else {}

    def put_if_absent(self, key: str, data: bytes) -> None:
        """One request, ``mode="create"``: fsspec's atomic create-only write."""
        try:
            self.fs.pipe_file(self.path(key), data, mode="create", **self._single_request(data))
        except Exception as error:
            if classify(error) is Failure.EXISTS:
                raise AlreadyExists(key) from None
            raise failed(self.url, f"creating {key}", error) from error

    def get(self, key: str, *, limit: int | None = None) -> bytes:
        """The whole of ``key``; with ``limit``, :class:`Unreadable` if it holds more than
        ``limit`` bytes, and never more than ``limit + 1`` read (one ranged request)."""
        with self.calling(f"reading {key}"):
            if limit is None:
                return bytes(self.fs.cat_file(self.path(key)))
            data = bytes(self.fs.cat_file(self.path(key), start=0, end=limit + 1))
        return within(key, data, limit)

    def sizes_under(self, prefix: str) -> dict[str, int]:
        """Every object under ``prefix`` (keys relative to the root) and its size, from one
        fresh full listing: what a loader checks a manifest's size claims against before it
        allocates for them. Not :meth:`list`'s names at one level: moto names a prefix whose
        objects are all deleted in a versioned bucket (only delete markers left), where S3
        lists common prefixes of current objects only (seaweedfs#10416 compares AWS and
        Ceph)."""
        path = self.path(prefix)
        with self.calling(f"listing {prefix}"):
            self.fs.invalidate_cache(path)
            try:
                found = self.fs.find(path, detail=True)
            except FileNotFoundError:
                return {}
        return {
            self._relative(name): int(info.get("size") or 0)
            for name, info in found.items()
            if info.get("type") != "directory"
        }

    def exists(self, key: str) -> bool:
        with self.calling(f"checking {key}"):
            return bool(self.fs.exists(self.path(key)))

    def list(self, prefix: str) -> list[str]:
        with self.calling(f"listing {prefix}"):
            try:
                entries = self.fs.ls(self.path(prefix), detail=False)
            except FileNotFoundError:
                return []
        return [self._relative(entry) for entry in entries]

    def _relative(self, path: str) -> str:
        """The key of an SDK path under the root."""
        return path.rstrip("/")[len(self.root) + 1 :]

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            with self.calling(f"deleting {key}"), contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.path(key))

    DELETE_PASSES = 3

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix``. A bulk delete reports failures per key
        without raising (s3fs's ``_bulk_delete``: "we report on successes but don't raise
        on any errors"), so what a fresh listing still shows is deleted again, up to
        :attr:`DELETE_PASSES` times; a :class:`StorageError` names what survives them."""
        path = self.path(prefix)
        with self.calling(f"deleting {prefix}"), contextlib.suppress(FileNotFoundError):
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)  # directories too, on a file system
        for _ in range(self.DELETE_PASSES - 1):
            left = self.keys_under(prefix)
            if not left:
                return
            with self.calling(f"deleting {prefix}"), contextlib.suppress(FileNotFoundError):
                self.fs.rm([self.path(key) for key in left])
        left = self.keys_under(prefix)
        if left:
            raise StorageError(
                f"{self.url}: deleting {prefix}: {len(left)} object(s) left after "
                f"{self.DELETE_PASSES} passes, e.g. {left[0]}",
                Failure.OTHER,
            )

    def check_reachable(self, bucket: str) -> None:
        """Fails with one line unless ``bucket`` can be listed with these credentials."""
        with self.calling("reaching the bucket"):
            self.fs.ls(bucket, detail=False)
