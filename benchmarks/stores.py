"""Where a benchmark's contenders write, and the limit's plain I/O of the same bytes.

On disk the limit is ``write`` + ``fsync`` and an unbuffered ``read``. On S3 it is botocore's
``put_object``/``get_object`` moving bytes only: no checksum calculated or validated, which
since botocore 1.36 takes a setting (:func:`bytes_only_client`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from spotproof.runtime.storage import open_store
from spotproof.runtime.storage.replica_server import ReplicaServer

PART = 64 << 20
BENCH_BUCKET = "spotproof-bench"  # unversioned, so removed rounds free moto's memory
S3_LABEL = "S3 emulator (moto, loopback)"


class Store:
    """Where one store's contenders write: a local directory or the emulator's bucket."""

    def __init__(self, name: str, root: str, label: str) -> None:
        self.name, self.root, self.label = name, root, label
        self.unchecked_requests = 0
        """Requests of the limit's S3 client that carried a checksum (must stay 0)."""

    def url(self, prefix: str) -> str:
        return f"file://{self.root}/{prefix}" if self.name == "file" else f"{self.root}/{prefix}"

    def fs(self) -> Any:
        return open_store(self.url("any")).fs

    def open(self, path: str, mode: str) -> Any:
        if self.name == "file":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return open(path, mode)
        return self.fs().open(path.removeprefix("s3://"), mode)

    def remove(self, path: str) -> None:
        if self.name == "file":
            target = Path(path)
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        else:
            self.fs().rm(path.removeprefix("s3://"), recursive=True)


def bytes_only_client(store: Store) -> Any:
    """A botocore S3 client that moves bytes and nothing else. Since botocore 1.36 (boto3
    1.36) the default is ``when_supported``: a CRC32 computed for every PutObject body
    (``x-amz-checksum-crc32``) and ``x-amz-checksum-mode: ENABLED`` on every GetObject, the
    stored checksum then validated over the body. ``when_required`` for both turns that off
    where the operation does not require it (neither does). Sources: "Data Integrity
    Protections for Amazon S3", https://docs.aws.amazon.com/sdkref/latest/guide/feature-dataintegrity.html
    (settings ``request_checksum_calculation`` / ``response_checksum_validation``, env
    ``AWS_REQUEST_CHECKSUM_CALCULATION`` / ``AWS_RESPONSE_CHECKSUM_VALIDATION``), and
    botocore 1.43's ``Config`` docstring and ``configprovider.py`` (default
    ``when_supported``). A hook counts any request that still carries a checksum header."""
    import botocore.session  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    config = Config(
        max_pool_connections=16,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    client = botocore.session.get_session().create_client("s3", config=config)

    def count(request: Any, **_: Any) -> None:
        if any("checksum" in header.lower() for header in request.headers):
            store.unchecked_requests += 1

    client.meta.events.register("before-send.s3", count)
    return client


def file_io(store: Store) -> tuple[Callable[[str, Any], None], Callable[[str], bytes]]:
    def put(path: str, data: memoryview | bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view, done = memoryview(data), 0
            while done < len(view):
                done += os.write(descriptor, view[done:])
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def get(path: str) -> bytes:
        with open(path, "rb", buffering=0) as file:
            return file.read()

    return put, get


def s3_io(store: Store) -> tuple[Callable[[str, Any], None], Callable[[str], bytes]]:
    client = bytes_only_client(store)

    def put(path: str, data: memoryview | bytes) -> None:
        bucket, key = path.removeprefix("s3://").split("/", 1)
        client.put_object(Bucket=bucket, Key=key, Body=bytes(data))

    def get(path: str) -> bytes:
        bucket, key = path.removeprefix("s3://").split("/", 1)
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()

    return put, get


def _serve_memory(pipe: Connection) -> None:
    """Another node's memory: a replica server over a tmpfs directory, until told to stop."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with (
        tempfile.TemporaryDirectory(prefix="holder-", dir=shm) as memory,
        ReplicaServer(memory) as server,
    ):
        pipe.send(server.url("replicas"))
        pipe.recv()


@contextlib.contextmanager
def replica_holder() -> Iterator[str]:
    """A holder in a process of its own, as a surviving rank's node is: the ``peer://`` URL
    of its memory while the block runs; its memory freed afterwards."""
    ours, theirs = multiprocessing.Pipe()
    holder = multiprocessing.get_context("spawn").Process(target=_serve_memory, args=(theirs,))
    holder.start()
    try:
        yield ours.recv()
    finally:
        ours.send("stop")
        holder.join(10)
