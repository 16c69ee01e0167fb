"""Azure Blob Storage (``az://``, adlfs): which credentials the store signs in with, and
a reachability check that stays inside the store's prefix (:class:`AzureStore`).

Read from the environment, in this order:

1. ``AZURE_STORAGE_CONNECTION_STRING``: that connection string, as it is (shared key;
   the Azurite emulator).
2. ``AZURE_STORAGE_ACCOUNT_NAME``: that account, with a Microsoft Entra token credential
   from ``azure.identity.aio`` (adlfs drives the asynchronous storage SDK, so its
   ``credential`` must be an ``AsyncTokenCredential``):

   - ``WorkloadIdentityCredential`` when ``AZURE_FEDERATED_TOKEN_FILE`` is set. On AKS
     the workload identity webhook injects it into a labelled pod together with
     ``AZURE_CLIENT_ID``, ``AZURE_TENANT_ID`` and ``AZURE_AUTHORITY_HOST`` (MicrosoftDocs
     azure-aks-docs, ``articles/aks/workload-identity-overview.md``). This is the way
     into an account that refuses shared keys (``allowSharedKeyAccess: false``).
   - ``DefaultAzureCredential`` otherwise: a developer's ``az login``, a managed identity.
3. Neither: :class:`StorageURLError`, one line naming both variables.
"""

from __future__ import annotations

import os
from typing import Any

import fsspec.asyn

from spotproof.runtime.storage.errors import StorageURLError
from spotproof.runtime.storage.objects import FsspecStore

CONNECTION_STRING = "AZURE_STORAGE_CONNECTION_STRING"
ACCOUNT_NAME = "AZURE_STORAGE_ACCOUNT_NAME"
FEDERATED_TOKEN_FILE = "AZURE_FEDERATED_TOKEN_FILE"
WORKLOAD_IDENTITY = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID")


def adlfs_options(url: str) -> dict[str, Any]:
    """``AzureBlobFileSystem`` arguments for ``url`` from the environment (see above)."""
    if os.environ.get(CONNECTION_STRING):
        return {"connection_string": os.environ[CONNECTION_STRING]}
    account = os.environ.get(ACCOUNT_NAME)
    if not account:
        raise StorageURLError(
            f"checkpoint URL {url!r}: az:// needs {ACCOUNT_NAME} (workload identity) "
            f"or {CONNECTION_STRING}; neither is set"
        )
    # anon=False: a credential is given, so adlfs's AZURE_STORAGE_ANON must not matter.
    return {"account_name": account, "credential": _token_credential(url), "anon": False}


def _token_credential(url: str) -> Any:
    try:
        from azure.identity.aio import (  # noqa: PLC0415
            DefaultAzureCredential,
            WorkloadIdentityCredential,
        )
    except ImportError:
        raise StorageURLError(
            f"checkpoint URL {url!r}: {ACCOUNT_NAME} signs in with azure-identity, "
            "which is not installed (pip install azure-identity)"
        ) from None
    token_file = os.environ.get(FEDERATED_TOKEN_FILE)
    if not token_file:
        return DefaultAzureCredential()
    missing = [name for name in WORKLOAD_IDENTITY if not os.environ.get(name)]
    if missing:
        raise StorageURLError(
            f"checkpoint URL {url!r}: workload identity ({FEDERATED_TOKEN_FILE} is set) "
            f"also needs {' and '.join(missing)}"
        )
    # The authority comes from AZURE_AUTHORITY_HOST, which the credential reads itself
    # (public cloud when unset).
    return WorkloadIdentityCredential(
        tenant_id=os.environ["AZURE_TENANT_ID"],
        client_id=os.environ["AZURE_CLIENT_ID"],
        token_file_path=token_file,
    )


class AzureStore(FsspecStore):
    @classmethod
    def filesystem_options(cls, url: str) -> dict[str, Any]:
        return adlfs_options(url)

    def check_reachable(self, bucket: str) -> None:
        """One listing *within the store's prefix*, as every listing of the store: the
        trainer's and the batch workers' role assignments admit a listing only under
        their prefix (``spotproof.catalog.aks.blobs_under``), so a listing of the
        container's root would fail the start of every pod (Azurite evaluates no
        conditions). adlfs cannot tell a missing container from an empty prefix (its
        ``find`` answers ``[]`` for both), so the container client asks: a missing one
        answers ``ContainerNotFound``."""
        _, _, prefix = self.root.partition("/")

        async def first_page() -> None:
            container = self.fs.service_client.get_container_client(bucket)
            blobs = container.list_blobs(
                name_starts_with=f"{prefix}/" if prefix else None, results_per_page=1
            )
            async for _ in blobs:
                break

        from azure.core.exceptions import ResourceNotFoundError  # noqa: PLC0415

        with self.calling("reaching the bucket"):
            try:
                fsspec.asyn.sync(self.fs.loop, first_page)
            except ResourceNotFoundError:
                raise FileNotFoundError(bucket) from None
