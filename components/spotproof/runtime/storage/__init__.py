"""Object storage behind one interface: ``file://``, ``s3://``, ``gs://``, ``az://``.

- ``backends``: every store, declared once (its schemes, class, deadlines, extra,
  emulator and lifecycle rules), read by :func:`open_store` and the layers above;
- ``contract``: :class:`ObjectStore`, what the checkpoint protocol asks of any store;
- ``objects``: ``FsspecStore``, the contract over fsspec, for the small objects and
  names of every bucket and all of Azure's (adlfs);
- ``azure``: the adlfs options for ``az://`` (a connection string, or an account with a
  Microsoft Entra token credential: workload identity on AKS), and a reachability check
  that stays inside the store's prefix;
- ``local``: a directory, with explicit durability and no copies;
- ``s3``: checkpoint parts through botocore's synchronous client, checksummed;
- ``gcs``: checkpoint parts through google-cloud-storage, checksummed;
- ``peer`` with the ``replica_*`` modules: another node's memory (``peer://``, opened by
  the checkpointer's memory tier, not by :func:`open_store`);
- ``errors``: one-line errors whose kind is decided by exception type.

Endpoints and credentials come from each SDK's usual environment (``AWS_ENDPOINT_URL``,
``STORAGE_EMULATOR_HOST``, ``AZURE_STORAGE_CONNECTION_STRING`` or
``AZURE_STORAGE_ACCOUNT_NAME``, workload identity...).
A URL is never reinterpreted as a local path.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

# gcsfs otherwise probes every bucket for zonal/HNS support over gRPC, which waits 60 s
# wherever that endpoint is not reachable (emulators, locked-down networks). It reads the
# variable at import, so it must be set before fsspec loads gcsfs.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import fsspec

from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import deadlines
from spotproof.runtime.storage.backends import ALLOWED, StoreBackend, load, scheme_backend
from spotproof.runtime.storage.contract import ObjectStore
from spotproof.runtime.storage.errors import (
    AlreadyExists,
    StorageError,
    StorageURLError,
    Unreadable,
    failed,
)
from spotproof.runtime.storage.objects import FsspecStore

__all__ = [
    "AlreadyExists",
    "ObjectStore",
    "StorageError",
    "StorageURLError",
    "Unreadable",
    "open_store",
]

# gcsfs logs every exhausted retry with a full traceback; the failure reaches the caller as
# one StorageError line, so the log would only repeat it as noise on stderr.
logging.getLogger("gcsfs").setLevel(logging.CRITICAL)


def _usable_directory(url: str, root: Path) -> None:
    """Create ``root`` and check that this user may write there: a path under a file, on a
    read-only mount or owned by someone else is the URL's fault, so it is a URL error."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StorageURLError(
            f"checkpoint URL {url!r}: cannot create directory {str(root)!r}: {error.strerror}"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise StorageURLError(
            f"checkpoint URL {url!r}: directory {str(root)!r} is not writable by this user"
        )


def open_store(url: str, *, create: bool = True, **storage_options: Any) -> ObjectStore:
    """The store at ``url``; checks that it is reachable before anything is written.
    ``create=False`` opens a ``file://`` store to read, creating nothing (``spotproof
    status``, the drill): a missing directory is a store with nothing in it."""
    parsed = urlparse(url)
    backend = scheme_backend(url, parsed.scheme)
    if "@" in parsed.netloc:
        raise StorageURLError(
            f"checkpoint URL {url!r}: credentials in a URL are refused (they end up in "
            "logs); give them the SDK's way: workload identity, or its environment variables"
        )
    kind: type[FsspecStore] = load(backend.store)
    local = backend.protocol == "file"
    root = _local_root(url) if local else _bucket_root(url)
    store = kind(url, _filesystem(url, backend, kind, storage_options), root)
    if local:
        if create:
            _usable_directory(url, Path(root))
        return store
    try:
        deadlines.within(
            deadlines.startup_seconds(),
            f"{url}: reaching the bucket",
            lambda: store.check_reachable(parsed.netloc),
        )
    except FileNotFoundError:
        raise StorageError(
            f"{url}: bucket {parsed.netloc!r} does not exist", Failure.NOT_FOUND
        ) from None
    return store


def _local_root(url: str) -> str:
    parsed = urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise StorageURLError(
            f"checkpoint URL {url!r}: file URLs take no host; allowed: file:///absolute/path"
        )
    if not parsed.path.startswith("/"):
        raise StorageURLError(
            f"checkpoint URL {url!r}: path must be absolute; allowed: file:///absolute/path"
        )
    return parsed.path


def _bucket_root(url: str) -> str:
    parsed = urlparse(url)
    if not parsed.netloc:
        raise StorageURLError(f"checkpoint URL {url!r}: no bucket; allowed: {ALLOWED}")
    return f"{parsed.netloc}{parsed.path}".rstrip("/")


def _filesystem(
    url: str, backend: StoreBackend, kind: type[FsspecStore], storage_options: dict[str, Any]
) -> Any:
    # No instance cache: endpoints and credentials come from the environment, which a
    # cached filesystem would silently ignore after it changes. No listings cache: other
    # writers change the bucket, and a stale listing would hide their manifests.
    protocol = backend.protocol
    options: dict[str, Any] = {
        "skip_instance_cache": True,
        **(backend.call_limits or {}),
        **kind.filesystem_options(url),
    }
    if protocol != "file":
        options["use_listings_cache"] = False
    options.update(storage_options)
    try:
        fs = fsspec.filesystem(protocol, **options)
    except ImportError:
        # fsspec names the driver's package in words, with no module name to read.
        raise StorageURLError(
            f"checkpoint URL {url!r}: its store's driver is not installed; allowed: install "
            f"spotproof[{backend.extra or protocol}] in the image"
        ) from None
    except Exception as error:
        raise failed(f"checkpoint URL {url!r}", f"setting up {protocol}", error) from None
    if backend.sdk_retries is not None:
        fs.retries = backend.sdk_retries
    return fs
