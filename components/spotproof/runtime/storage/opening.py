"""Opening a store by its URL: :func:`open_store`, the one way in for every caller.

It lives apart from the package's ``__init__`` because it needs fsspec, and whoever only
names the package's errors or its backends (the CLI, for its ``--store`` choices) should
not pay for importing fsspec.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import fsspec

from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import deadlines
from spotproof.runtime.storage.backends import ALLOWED, StoreBackend, load, scheme_backend
from spotproof.runtime.storage.contract import ObjectStore
from spotproof.runtime.storage.errors import StorageError, StorageURLError, failed
from spotproof.runtime.storage.objects import FsspecStore


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
