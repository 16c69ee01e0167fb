"""Object storage behind one interface: ``file://``, ``s3://``, ``gs://``, ``az://``.

- ``opening``: :func:`open_store`, a store by its URL;
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

This ``__init__`` stays light: the errors and the contract, with ``open_store`` imported on
first use (:func:`__getattr__`), since fsspec takes about a quarter of a second to import on
a busy 2-core machine and many importers only name an error or a backend (the CLI's
``--store`` choices; ``docs/performance.md``, the plan's start).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

# gcsfs otherwise probes every bucket for zonal/HNS support over gRPC, which waits 60 s
# wherever that endpoint is not reachable (emulators, locked-down networks). It reads the
# variable at import, so it must be set before fsspec loads gcsfs: here, before any module
# of the package can import fsspec.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from spotproof.runtime.storage.contract import ObjectStore
from spotproof.runtime.storage.errors import (
    AlreadyExists,
    StorageError,
    StorageURLError,
    Unreadable,
)

if TYPE_CHECKING:
    from spotproof.runtime.storage.opening import open_store

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


def __getattr__(name: str) -> Any:
    """``open_store``, imported from ``opening`` (and fsspec with it) when first asked for."""
    if name == "open_store":
        from spotproof.runtime.storage.opening import open_store  # noqa: PLC0415

        return open_store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
