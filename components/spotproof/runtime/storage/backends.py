"""Every checkpoint store backend, declared once: :data:`STORE_BACKENDS`.

A backend is one record (:class:`StoreBackend`), and everything that spells a store reads
it: ``open_store`` (its URL schemes, its class, its SDK's deadlines), ``extras`` (which
extra installs its SDK), ``smoke`` (its emulator, and the fault proxy's way to the
emulator's port), ``plan`` (the lifecycle replay of its bucket rules) and ``cli`` (the
``--store`` choices, by :attr:`StoreBackend.name`).

Two kinds of field:

- what the runtime itself uses is a value here (schemes, deadlines, the extra);
- what lives in code is named by a *dotted path*, imported only by whoever asks for it
  (:func:`load`): the store class, so a trainer imports the SDK of its own store alone,
  and the emulator and lifecycle module, which live in ``smoke`` and ``plan``, layers
  above the runtime (``tests/test_layout.py``) that this module may not import.

So a new store is its own module (``runtime/storage/<store>.py``, an ``objects.FsspecStore``
or another ``contract.ObjectStore``), its emulator and lifecycle module where those live,
and one record below; nothing else names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.runtime.storage import deadlines
from spotproof.runtime.storage.errors import StorageURLError


def load(reference: str) -> Any:
    """What ``reference`` names: ``package.module`` or ``package.module:attribute``,
    imported now."""
    module, _, attribute = reference.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


@dataclass(frozen=True)
class Endpoint:
    """Where an SDK reads its store's endpoint from the environment: an emulator's, in a
    rehearsal (the fault proxy puts itself there)."""

    variable: str
    pattern: str = "(.+)"
    """Where the endpoint is in the variable's value: the regular expression's group 1."""


@dataclass(frozen=True)
class StoreBackend:
    name: str
    """The backend's id everywhere outside the runtime: ``spotproof smoke --store``, an
    emulated ``Bucket.store``."""
    schemes: tuple[str, ...]
    """The URL schemes ``open_store`` opens it for, the usual one first."""
    spelled: str
    """Its URL as an error message shows what is allowed."""
    protocol: str
    """fsspec's name of its filesystem."""
    store: str
    """Its ``objects.FsspecStore`` class (:func:`load`)."""
    emulator: str
    """The context manager that starts its emulator and yields a
    ``smoke.emulation.object_stores.Bucket``."""
    extra: str | None = None
    """The extra of ``pyproject.toml`` that installs its SDK; None: the bare package."""
    imports: tuple[str, ...] = ()
    """The modules :attr:`extra` installs (``extras.PACKAGE_EXTRAS``)."""
    call_limits: Mapping[str, Any] | None = None
    """fsspec filesystem options that bound each call of its SDK (``deadlines``)."""
    sdk_retries: int | None = None
    """The filesystem's own retries around its SDK's, where it has them (``deadlines``)."""
    endpoint: Endpoint | None = None
    lifecycle: str | None = None
    """The module of its bucket's lifecycle semantics (``plan.simulation.lifecycle``)."""


STORE_BACKENDS = (
    StoreBackend(
        name="file",
        schemes=("file",),
        spelled="file:///path",
        protocol="file",
        store="spotproof.runtime.storage.local:LocalStore",
        emulator="spotproof.smoke.emulation.object_stores:file_bucket",
    ),
    StoreBackend(
        name="s3",
        schemes=("s3",),
        spelled="s3://bucket/prefix",
        protocol="s3",
        store="spotproof.runtime.storage.s3:S3Store",
        emulator="spotproof.smoke.emulation.object_stores:s3_bucket",
        extra="s3",
        imports=("s3fs", "botocore"),
        call_limits={"config_kwargs": deadlines.botocore_config()},
        # s3fs retries a timed-out call itself (its ``retries`` attribute, 5 by default, not
        # a constructor argument) around botocore's own attempts: once is enough there.
        sdk_retries=1,
        endpoint=Endpoint("AWS_ENDPOINT_URL"),
        lifecycle="spotproof.plan.simulation.lifecycle.s3",
    ),
    StoreBackend(
        name="gcs",
        schemes=("gs", "gcs"),
        spelled="gs://bucket/prefix",
        protocol="gcs",
        store="spotproof.runtime.storage.gcs:GcsStore",
        emulator="spotproof.smoke.emulation.object_stores:gcs_bucket",
        extra="gcs",
        imports=("gcsfs", "google.cloud.storage"),
        call_limits={"requests_timeout": deadlines.READ_SECONDS},
        endpoint=Endpoint("STORAGE_EMULATOR_HOST"),
        lifecycle="spotproof.plan.simulation.lifecycle.gcs",
    ),
    StoreBackend(
        name="azure",
        schemes=("az", "abfs"),
        spelled="az://container/prefix",
        protocol="abfs",
        store="spotproof.runtime.storage.azure:AzureStore",
        emulator="spotproof.smoke.emulation.object_stores:azure_bucket",
        extra="azure-blob",
        imports=("adlfs",),
        call_limits={
            "connection_timeout": deadlines.CONNECT_SECONDS,
            "read_timeout": deadlines.READ_SECONDS,
        },
        endpoint=Endpoint("AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=([^;]+)"),
        lifecycle="spotproof.plan.simulation.lifecycle.azure",
    ),
)

NAMED = {backend.name: backend for backend in STORE_BACKENDS}
"""Each backend by its :attr:`StoreBackend.name`."""
SCHEMES = {scheme: backend for backend in STORE_BACKENDS for scheme in backend.schemes}
"""The backend of each URL scheme ``open_store`` opens."""
ALLOWED = ", ".join(backend.spelled for backend in STORE_BACKENDS)


def scheme_backend(url: str, scheme: str) -> StoreBackend:
    """The backend that opens ``scheme``; :class:`StorageURLError` for any other."""
    if scheme not in SCHEMES:
        raise StorageURLError(
            f"checkpoint URL {url!r}: unsupported scheme {scheme or '(none)'!r}; allowed: {ALLOWED}"
        )
    return SCHEMES[scheme]
