"""Talking to a replica server as the tests must: a gang's key, raw requests on a real
socket (signed or not, framed right or wrong), and a server in a process of its own whose
memory can be read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spotproof.runtime.storage.replica_auth import ReplicaKey, authority

SECRET = b"the gang's replica secret, 32 bytes or more"
KEY = ReplicaKey(SECRET)


def head(
    method: str,
    target: str,
    port: int,
    *,
    key: ReplicaKey | None = KEY,
    headers: dict[str, str] | None = None,
    extra: list[tuple[str, str]] | None = None,
    host: str = "127.0.0.1",
) -> bytes:
    """A request head for ``target``, signed with ``key`` (None: unsigned) over
    ``headers``; ``extra`` header lines go out after them, unsigned (a second
    Content-Length, say)."""
    fields = dict(headers or {})
    fields.setdefault("Content-Length", "0")
    if key is not None:
        key.sign(authority(host, port), method, target, fields)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in [*fields.items(), *(extra or [])]]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def connect(port: int, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection((host, port), timeout=10)
    sock.settimeout(10)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the next answer on ``sock``."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {received!r}")
        received += chunk
    top, _, rest = received.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(status_line.split()[1]), headers, rest[:length]


def closed(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (reads end), within its timeout."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, TimeoutError):
        return False


SERVER = """
import sys, time
from spotproof.runtime.storage.replica_auth import ReplicaKey
from spotproof.runtime.storage.replica_server import ReplicaServer
limit = int(sys.argv[3]) if sys.argv[3] != "-" else None
server = ReplicaServer(sys.argv[1], ReplicaKey.from_file(sys.argv[2]), limit=limit).start()
print(server.port, flush=True)
time.sleep(3600)
"""


@contextmanager
def server_process(directory: Path, limit: int | None = None) -> Iterator[tuple[int, int]]:
    """A replica server in a process of its own: ``(pid, port)``."""
    secret = directory.parent / f"{directory.name}.secret"
    secret.write_bytes(SECRET)
    argv = [sys.executable, "-c", SERVER, str(directory), str(secret), str(limit or "-")]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert process.stdout is not None
        yield process.pid, int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")
