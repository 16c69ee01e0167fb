"""A fault-injecting HTTP proxy on loopback, between the runtime and a storage emulator.

It forwards every request unchanged, except those a :class:`Fault` matches, which it
answers with an HTTP error, drops with a TCP reset before or *after* forwarding them
(after: the emulator acted on the request, but the client never hears the answer: the
ambiguous failure a real network produces), delays, or holds: never forwards and never
answers, while the client waits (the rehearsal's aimed kill, ``smoke.processes.aimed_kill``,
lands there).
The storage tests inject their faults with it too.

Each request is read whole from the client (answering ``Expect: 100-continue`` itself),
sent to the emulator on a fresh connection with ``Connection: close``, and the emulator's
answer is read until it closes and passed back. Client connections stay open across
requests, as the SDKs expect.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from spotproof.runtime.storage.backends import NAMED

_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass
class Fault:
    """What to do to requests whose method matches and whose target matches ``target``."""

    method: str
    """Regular expression the whole method must match (``PUT``, ``PUT|POST``)."""
    target: str
    """Regular expression searched in the request target (path and query, URL-encoded) and
    the first 4 KiB of its body (GCS names the object of an upload in the body)."""
    action: str
    """``status:<code>``, ``reset`` (before forwarding), ``reset-after`` (after),
    ``delay:<seconds>`` (forwarded that much later: a slow store) or ``hold`` (never
    forwarded nor answered; the connection is read and discarded until the client goes)."""
    times: int | None = None
    """How many matching requests to hit; None for every one."""
    accept: Callable[[re.Match[str]], bool] | None = None
    """A further condition on the match of ``target``; None accepts every match."""
    hits: int = 0
    last: re.Match[str] | None = None
    """The match of ``target`` in the newest request hit."""
    hit: threading.Event = field(default_factory=threading.Event)
    """Set at the first hit."""

    def matches(self, method: str, where: str) -> re.Match[str] | None:
        if self.times is not None and self.hits >= self.times:
            return None
        if re.fullmatch(self.method, method) is None:
            return None
        found = re.search(self.target, where)
        if found is None or (self.accept is not None and not self.accept(found)):
            return None
        return found


@dataclass
class FaultProxy:
    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    log: list[tuple[str, str, str]] = field(default_factory=list)
    """Every request seen: (method, target and the start of its body, what was done)."""
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._closed = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def seen(self, method: str, target: str) -> list[str]:
        """What was done to the requests matching ``method`` and ``target``, in order."""
        with self._lock:
            return [done for m, t, done in self.log if m == method and re.search(target, t)]

    # --- serving ---------------------------------------------------------------------

    def start(self) -> FaultProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        reader = _Reader(client)
        try:
            while True:
                request = reader.request()
                if request is None:
                    return
                method, target, head, body = request
                action = self._decide(method, target, body)
                if action == "hold":
                    while client.recv(65536):
                        pass
                    return
                if action in ("reset", "reset-after"):
                    if action == "reset-after":
                        self._forward(head, body)
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                    return
                if action.startswith("delay:"):
                    time.sleep(float(action.split(":", 1)[1]))
                    client.sendall(self._forward(head, body))
                    continue
                if action.startswith("status:"):
                    code = int(action.split(":", 1)[1])
                    payload = b'{"error": "injected by the fault proxy"}'
                    client.sendall(
                        f"HTTP/1.1 {code} Injected\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(payload)}\r\n\r\n".encode()
                        + payload
                    )
                    continue
                client.sendall(self._forward(head, body))
        except OSError:
            return
        finally:
            client.close()

    def _decide(self, method: str, target: str, body: bytes) -> str:
        where = f"{target}\n{body[:4096].decode('latin-1')}"
        with self._lock:
            for fault in self.faults:
                found = fault.matches(method, where)
                if found is not None:
                    fault.hits += 1
                    fault.last = found
                    fault.hit.set()
                    self.log.append((method, where, fault.action))
                    return fault.action
            self.log.append((method, where, "forwarded"))
            return "forward"

    def _forward(self, head: bytes, body: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
            upstream.sendall(head + body)
            chunks = []
            while chunk := upstream.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


class _Reader:
    """Reads whole HTTP/1.1 requests off a client socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def _take(self, count: int) -> bytes:
        while len(self.buffer) < count:
            if not self._fill():
                raise OSError("client closed mid-request")
        taken, self.buffer = self.buffer[:count], self.buffer[count:]
        return taken

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise OSError("client closed mid-request")
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def request(self) -> tuple[str, str, bytes, bytes] | None:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                return None
        raw_head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        request_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
        method, target, _version = request_line.split(" ", 2)
        headers = [line.split(":", 1) for line in header_lines if ":" in line]
        names = {name.strip().lower(): value.strip() for name, value in headers}
        if names.get("expect", "").lower() == "100-continue":
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if names.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                body += self._take(size)
                self._line()
                if size == 0:
                    break
            kept = [(n, v) for n, v in headers if n.strip().lower() != "transfer-encoding"]
            kept.append(("Content-Length", f" {len(body)}"))
            headers = kept
        else:
            body = self._take(int(names.get("content-length", "0")))
        dropped = {"connection", "keep-alive", "expect"}
        lines = [f"{n}:{v}" for n, v in headers if n.strip().lower() not in dropped]
        head = "\r\n".join([request_line, *lines, "Connection: close", "", ""]).encode("latin-1")
        return method, target, head, body


@contextlib.contextmanager
def fault_proxy(upstream_port: int) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream_port).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def emulator_port(store: str, env: dict[str, str]) -> int:
    """The loopback port of the emulator an environment points ``store``'s SDK at (where
    its backend's ``endpoint`` says it reads it)."""
    where = NAMED[store].endpoint
    if where is None:
        raise ValueError(f"store {store!r} is reached through no endpoint")
    endpoint = re.search(where.pattern, env[where.variable])[1]
    return int(re.search(r":(\d+)(/|$)", endpoint)[1])


def through(store: str, env: dict[str, str], proxy: FaultProxy) -> dict[str, str]:
    """``env`` with the emulator's endpoint replaced by the proxy's."""
    port = emulator_port(store, env)
    return {key: value.replace(f":{port}", f":{proxy.port}") for key, value in env.items()}
