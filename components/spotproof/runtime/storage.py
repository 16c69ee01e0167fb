"""Object storage behind one interface, over fsspec: ``file://``, ``s3://``, ``gs://``, ``az://``.

The checkpoint protocol needs five operations and one guarantee: ``put_if_absent`` is a
single atomic create-only write. fsspec exposes it for all three clouds as
``pipe_file(..., mode="create")`` (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``,
Azure ``overwrite=False``); locally a fully written temporary file is ``link()``-ed into
place, which fails if the name exists and never exposes a partial file.

Endpoints and credentials come from each SDK's usual environment (``AWS_ENDPOINT_URL``,
``STORAGE_EMULATOR_HOST``, ``AZURE_STORAGE_CONNECTION_STRING``, workload identity...).
Every failure becomes a one-line :class:`StorageError`; a URL is never reinterpreted as a
local path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

# gcsfs otherwise probes every bucket for zonal/HNS support over gRPC, which waits 60 s
# wherever that endpoint is not reachable (emulators, locked-down networks). It reads the
# variable at import, so it must be set before fsspec loads gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import fsspec

from spotproof.runtime.failures import Failure, classify

# gcsfs logs every exhausted retry with a full traceback; the failure reaches the caller as
# one StorageError line, so the log would only repeat it as noise on stderr.
logging.getLogger("gcsfs").setLevel(logging.CRITICAL)

SCHEMES = {"file": "file", "s3": "s3", "gs": "gcs", "gcs": "gcs", "az": "abfs", "abfs": "abfs"}
ALLOWED = "file:///path, s3://bucket/prefix, gs://bucket/prefix, az://container/prefix"


class StorageError(RuntimeError):
    """The store cannot be used: bad URL, no credentials, unreachable, or a failed call."""

    def __init__(self, message: str, failure: Failure = Failure.OTHER) -> None:
        super().__init__(message)
        self.failure = failure


class StorageURLError(StorageError):
    """The URL itself is wrong: retrying cannot help."""


class AlreadyExists(Exception):
    """A create-only write found the object already there."""


def _describe(error: BaseException, failure: Failure) -> str:
    """One line: the kind of failure, then the SDK's own words for it."""
    text = " ".join(str(error).split()) or type(error).__name__
    if failure is Failure.OTHER:
        return f"{type(error).__name__}: {text[:200]}"
    return f"{failure.value} ({text[:200]})"


def _failed(url: str, what: str, error: BaseException) -> StorageError:
    failure = classify(error)
    return StorageError(f"{url}: {what} failed: {_describe(error, failure)}", failure)


class ObjectStore:
    """Keys relative to one root URL."""

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem, root: str, local: bool) -> None:
        self.url = url
        self.fs = fs
        self.root = root.rstrip("/")
        self.local = local

    def path(self, key: str) -> str:
        return f"{self.root}/{key}"

    @contextlib.contextmanager
    def _calling(self, what: str) -> Iterator[None]:
        try:
            yield
        except (AlreadyExists, FileNotFoundError):
            raise
        except Exception as error:
            raise _failed(self.url, what, error) from error

    def _single_request(self, data: bytes) -> dict[str, Any]:
        """gcsfs switches to a resumable upload at ``chunksize``; a single request is what
        carries the precondition everywhere (fake-gcs-server ignores it on resumable ones)."""
        return {"chunksize": len(data) + 1} if self.fs.protocol[0] in ("gcs", "gs") else {}

    def put(self, key: str, data: bytes | memoryview) -> None:
        with self._calling(f"writing {key}"):
            if self.local:
                _write_local(Path(self.path(key)), data)
            else:
                self.fs.pipe_file(self.path(key), bytes(data))

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create ``key`` atomically, or raise :class:`AlreadyExists` and change nothing.

        Any other failure is a :class:`StorageError`, even one whose request reached the
        store: the caller cannot tell from the error whether the object was created.
        """
        try:
            if self.local:
                _create_local(Path(self.path(key)), data)
            else:
                self.fs.pipe_file(self.path(key), data, mode="create", **self._single_request(data))
        except Exception as error:
            if classify(error) is Failure.EXISTS:
                raise AlreadyExists(key) from None
            raise _failed(self.url, f"creating {key}", error) from error

    def get(self, key: str) -> bytes:
        with self._calling(f"reading {key}"):
            return bytes(self.fs.cat_file(self.path(key)))

    def read_into(self, key: str, buffer: memoryview) -> int:
        """Read ``key`` into ``buffer``; returns its size. Locally this is the only copy made
        (the file is read straight into place); remotely the response is copied in once."""
        with self._calling(f"reading {key}"):
            if self.local:
                with open(self.path(key), "rb", buffering=0) as file:
                    size = os.fstat(file.fileno()).st_size
                    if size != len(buffer):
                        return size
                    filled = 0
                    while filled < size:  # one read() returns at most ~2 GiB on Linux
                        count = file.readinto(buffer[filled:])
                        if not count:
                            break
                        filled += count
                    return filled
            data = self.fs.cat_file(self.path(key))
            if len(data) == len(buffer):
                buffer[:] = data
            return len(data)

    def exists(self, key: str) -> bool:
        with self._calling(f"checking {key}"):
            return bool(self.fs.exists(self.path(key)))

    def list(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (keys relative to the root); empty if none."""
        with self._calling(f"listing {prefix}"):
            try:
                entries = self.fs.ls(self.path(prefix), detail=False)
            except FileNotFoundError:
                return []
        return [entry.rstrip("/")[len(self.root) + 1 :] for entry in entries]

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            with self._calling(f"deleting {key}"), contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.path(key))

    def delete_prefix(self, prefix: str) -> None:
        with self._calling(f"deleting {prefix}"), contextlib.suppress(FileNotFoundError):
            if self.fs.exists(self.path(prefix)):
                self.fs.rm(self.path(prefix), recursive=True)


def _write_local(path: Path, data: bytes | memoryview) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _create_local(path: Path, data: bytes) -> None:
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
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def open_store(url: str, **storage_options: Any) -> ObjectStore:
    """The store at ``url``; checks that it is reachable before anything is written."""
    parsed = urlparse(url)
    if parsed.scheme not in SCHEMES:
        scheme = parsed.scheme or "(none)"
        raise StorageURLError(
            f"checkpoint URL {url!r}: unsupported scheme {scheme!r}; allowed: {ALLOWED}"
        )
    protocol = SCHEMES[parsed.scheme]
    local = protocol == "file"
    if local:
        if parsed.netloc not in ("", "localhost"):
            raise StorageURLError(
                f"checkpoint URL {url!r}: file URLs take no host; allowed: file:///absolute/path"
            )
        root = parsed.path
        if not root.startswith("/"):
            raise StorageURLError(
                f"checkpoint URL {url!r}: path must be absolute; allowed: file:///absolute/path"
            )
    else:
        if not parsed.netloc:
            raise StorageURLError(f"checkpoint URL {url!r}: no bucket; allowed: {ALLOWED}")
        root = f"{parsed.netloc}{parsed.path}".rstrip("/")
    try:
        # No instance cache: endpoints and credentials come from the environment, which a
        # cached filesystem would silently ignore after it changes. No listings cache: other
        # writers change the bucket, and a stale listing would hide their manifests.
        options: dict[str, Any] = {"skip_instance_cache": True, **_default_options(protocol)}
        if not local:
            options["use_listings_cache"] = False
        options.update(storage_options)
        fs = fsspec.filesystem(protocol, **options)
    except ImportError as error:
        raise StorageURLError(
            f"checkpoint URL {url!r}: the {protocol} backend is not installed ({error.name})"
        ) from None
    except Exception as error:
        raise _failed(f"checkpoint URL {url!r}", f"setting up {protocol}", error) from None
    store = ObjectStore(url, fs, root, local)
    if local:
        Path(root).mkdir(parents=True, exist_ok=True)
    else:
        bucket = parsed.netloc
        try:
            with store._calling("reaching the bucket"):
                fs.ls(bucket, detail=False)
        except FileNotFoundError:
            raise StorageError(
                f"{url}: bucket {bucket!r} does not exist", Failure.NOT_FOUND
            ) from None
    return store


def _default_options(protocol: str) -> dict[str, Any]:
    if protocol == "gcs" and os.environ.get("STORAGE_EMULATOR_HOST"):
        return {"token": "anon", "endpoint_url": os.environ["STORAGE_EMULATOR_HOST"]}
    if protocol == "abfs" and os.environ.get("AZURE_STORAGE_CONNECTION_STRING"):
        return {"connection_string": os.environ["AZURE_STORAGE_CONNECTION_STRING"]}
    return {}
