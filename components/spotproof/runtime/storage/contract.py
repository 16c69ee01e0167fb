"""What the checkpoint protocol asks of a store, apart from how any store does it.

:class:`ObjectStore` is the contract: keys relative to one root, a few operations on them,
and one guarantee, that :meth:`ObjectStore.put_if_absent` is a single atomic create-only
write (a checkpoint's commit). The checkpointer and the batch results are written against
it alone. Its implementations:

- ``objects.FsspecStore``: the buckets and a directory, through fsspec, with
  ``local``, ``s3``, ``gcs`` and ``azure`` replacing what their SDK does better;
- ``peer.PeerStore``: another node's memory, over the replica server's own protocol.

Every implementation keeps its keys under its root (:func:`confined`), and bounds what a
read of a small object may bring (:func:`within`).
"""

from __future__ import annotations

from typing import Protocol

from spotproof.runtime.storage.errors import Unreadable


def confined(key: str) -> str:
    """``key`` when it names something under the store's root: relative, no empty, ``.``
    or ``..`` segment, no NUL. Object stores take such names literally, but a file system
    resolves them, and a key that leaves the root there reads or writes outside it."""
    segments = key.rstrip("/").split("/") if key.rstrip("/") else []
    if "\0" in key or key.startswith("/") or any(s in ("", ".", "..") for s in segments):
        raise Unreadable(f"key {key!r:.120} leaves the store's root")
    return key


def within(key: str, data: bytes, limit: int) -> bytes:
    """``data`` read from ``key``, unless there was more of it than ``limit`` bytes."""
    if len(data) > limit:
        raise Unreadable(f"{key}: more than the {limit} bytes it may hold")
    return data


class ObjectStore(Protocol):
    """Keys relative to one root URL. A protocol: any class with these methods is a store,
    and the implementations here name it as their base to say so.

    Failures are one-line errors of ``errors``: ``StorageError`` (its kind decides a
    retry), ``AlreadyExists`` for a create-only write that found its key, ``Unreadable``
    for what a loader skips, and ``FileNotFoundError`` for a missing key where a method
    says so."""

    url: str
    root: str
    """Where the keys are, as the store's SDK names it (a bucket and prefix, a path)."""

    direct_read_min: int | None = None
    """A restore in place (``runtime.checkpointer.reading``) reads a destination at least
    this long straight into it, one request each, and shorter ones next to each other
    through one scratch buffer; None reads every range through scratch. None for the
    buckets: a request costs milliseconds there, and moto builds the whole object for
    every ranged GET."""

    def path(self, key: str) -> str:
        """``key`` as the store's SDK names it, under the root (:func:`confined`)."""

    # --- bulk data ---------------------------------------------------------------------

    def put(self, key: str, data: bytes | memoryview, *, crc32c: str | None = None) -> None:
        """Write ``key``. ``crc32c`` (8 hex digits) is the data's checksum; a store that can
        check it on arrival refuses a corrupted upload (see ``s3``)."""

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        """Read ``len(buffer)`` bytes of ``key`` from ``offset`` into ``buffer``; returns how
        many there were (fewer only where the object ends first)."""

    def make_durable(self, prefix: str) -> None:
        """Everything written under ``prefix`` survives a crash from here on. An object
        store's PUT is durable once answered; a file system needs more (``local``)."""

    # --- small objects and names -------------------------------------------------------

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Create ``key`` atomically, or raise ``AlreadyExists`` and change nothing.

        Any other failure is a ``StorageError``, even one whose request reached the store:
        the caller cannot tell from the error whether the object was created.
        """

    def get(self, key: str, *, limit: int | None = None) -> bytes:
        """The whole of ``key``; with ``limit``, ``Unreadable`` if it holds more than
        ``limit`` bytes (:func:`within`), reading no more than ``limit + 1``."""

    def sizes_under(self, prefix: str) -> dict[str, int]:
        """Every object under ``prefix`` (keys relative to the root) and its size, from one
        fresh full listing: what a loader checks a manifest's size claims against before it
        allocates for them."""

    def keys_under(self, prefix: str) -> list[str]:
        """Every object under ``prefix`` (keys relative to the root): :meth:`sizes_under`'s
        keys."""
        return list(self.sizes_under(prefix))

    def exists(self, key: str) -> bool:
        """Whether ``key`` is there."""

    def list(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (keys relative to the root); empty if none."""

    def delete(self, keys: list[str]) -> None:
        """Delete each of ``keys``; one already gone is no failure."""

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix``, or raise ``StorageError`` naming what is
        left."""
