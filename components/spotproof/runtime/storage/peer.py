"""Another node's memory as an object store: ``peer://host:port/<root>``.

A gang's ranks keep replicas of each other's newest checkpoints
(``runtime.checkpointer.tiers``). Each rank runs a :class:`ReplicaServer` over a
directory in its node's memory; a peer writes and reads there through :class:`PeerStore`,
an :class:`ObjectStore` like the buckets', so the same commit protocol
(``runtime.checkpointer.checkpoint``: parts, then a create-only manifest) and the same
verified loads work across nodes unchanged.

The protocol is a few HTTP/1.1 requests on one persistent connection per thread:

- ``PUT /o/<key>`` writes an object. With ``X-Crc32c`` (8 hex digits) the server checks
  the body against it *before* anything is stored and answers 422 on a mismatch, so a part
  damaged on the way is refused on arrival, as S3 refuses one; with ``If-None-Match: *``
  the write is create-only (412 when the key exists), the manifest's commit.
- ``GET /o/<key>``, with an optional ``Range: bytes=a-b``: the bytes, sent with
  ``sendfile`` from the node's memory; 416 for a range that starts past the end.
- ``HEAD /o/<key>``, ``DELETE /o/<key>``, ``DELETE /tree/<prefix>``, and
  ``GET /names/<prefix>`` / ``GET /sizes/<prefix>`` (JSON) for listings.

The server stores through :class:`LocalStore`, so every key stays under its root and
nothing but a regular file it wrote is ever served. It has no authentication: anything
that can reach its port can write replicas or read them, so it belongs on a network
where only the gang's own pods reach it (spotproof's namespace policy admits every pod
of the namespace today, which is no such limit). What it serves is checked against the
manifest's CRC32C by the reader like any bucket's bytes, so a damaged replica is skipped,
never loaded; a forged one whose checksums match is not detected.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote, urlparse

from spotproof.runtime.checkpointer.integrity import CRC32C_HEX, crc32c
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import open_store
from spotproof.runtime.storage.errors import AlreadyExists, StorageError, StorageURLError, failed
from spotproof.runtime.storage.local import LocalStore
from spotproof.runtime.storage.objects import ObjectStore, confined, within

SCHEME = "peer"
MAX_OBJECT_BYTES = 1 << 36
"""The largest object a server takes (64 GiB): more than any part, less than a runaway."""
REQUEST_SECONDS = 60.0
"""How long a request may go unanswered before the peer counts as gone."""
_CHUNK = 1 << 22


class PeerStore(ObjectStore):
    """The objects under ``<root>`` on the replica server at ``host:port``."""

    direct_read_min = 1 << 20
    """A request on a kept-alive connection without Nagle costs a fraction of a
    millisecond here, less than copying a MiB out of scratch."""

    def __init__(self, url: str, timeout: float = REQUEST_SECONDS) -> None:
        parsed = urlparse(url)
        if parsed.scheme != SCHEME or not parsed.hostname or not parsed.port:
            raise StorageURLError(f"replica URL {url!r}: allowed: peer://host:port/root")
        super().__init__(url, fs=None, root=parsed.path.strip("/"))
        self.host, self.port, self.timeout = parsed.hostname, parsed.port, timeout
        self._local = threading.local()

    def path(self, key: str) -> str:
        return f"{self.root}/{confined(key)}" if self.root else confined(key)

    # --- one connection per thread ----------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = _Connection(self.host, self.port, timeout=self.timeout)
            self._local.connection = connection
        return connection

    @contextlib.contextmanager
    def _exchange(
        self, method: str, route: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Iterator[http.client.HTTPResponse]:
        """One request and its response, read (or drained) before the connection is used
        again; a broken connection is dropped and the failure raised as one line."""
        connection = self._connection()
        response = None
        try:
            connection.request(method, quote(route), body=body, headers=headers or {})
            response = connection.getresponse()
            yield response
            response.read()  # drain what the caller left, so the connection can be reused
        except (OSError, http.client.HTTPException) as error:
            self._drop(connection)
            raise failed(self.url, f"{method} {route}", error) from error
        except BaseException:
            self._drop(connection)  # an answer the caller refused may be left unread
            raise

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._local.connection = None

    def _refused(self, response: http.client.HTTPResponse, what: str) -> StorageError:
        text = response.read(300).decode(errors="replace").strip()
        failure = Failure.SERVER if response.status >= 500 else Failure.OTHER
        return StorageError(f"{self.url}: {what}: HTTP {response.status} {text}", failure)

    # --- the operations the checkpoint protocol uses ----------------------------------

    def put(self, key: str, data: bytes | memoryview, *, crc32c: str | None = None) -> None:
        headers = {"X-Crc32c": crc32c} if crc32c else {}
        with self._exchange("PUT", f"/o/{self.path(key)}", memoryview(data), headers) as answer:
            if answer.status != 201:
                raise self._refused(answer, f"writing {key}")

    def put_if_absent(self, key: str, data: bytes) -> None:
        route = f"/o/{self.path(key)}"
        with self._exchange("PUT", route, data, {"If-None-Match": "*"}) as answer:
            if answer.status == 412:
                raise AlreadyExists(key)
            if answer.status != 201:
                raise self._refused(answer, f"creating {key}")

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        if not len(buffer):
            return 0
        headers = {"Range": f"bytes={offset}-{offset + len(buffer) - 1}"}
        with self._exchange("GET", f"/o/{self.path(key)}", headers=headers) as answer:
            if answer.status == 416:
                return 0
            if answer.status == 404:
                raise FileNotFoundError(key)
            if answer.status not in (200, 206):
                raise self._refused(answer, f"reading {key}")
            filled = 0
            while filled < len(buffer):
                count = answer.readinto(buffer[filled:])
                if not count:
                    break
                filled += count
            return filled

    def get(self, key: str, *, limit: int | None = None) -> bytes:
        with self._exchange("GET", f"/o/{self.path(key)}") as answer:
            if answer.status == 404:
                raise FileNotFoundError(key)
            if answer.status != 200:
                raise self._refused(answer, f"reading {key}")
            data = answer.read() if limit is None else answer.read(limit + 1)
        return data if limit is None else within(key, data, limit)

    def exists(self, key: str) -> bool:
        with self._exchange("HEAD", f"/o/{self.path(key)}") as answer:
            return answer.status == 200

    def _listing(self, kind: str, prefix: str) -> Any:
        with self._exchange("GET", f"/{kind}/{self.path(prefix)}") as answer:
            if answer.status != 200:
                raise self._refused(answer, f"listing {prefix}")
            return json.loads(answer.read())

    def list(self, prefix: str) -> list[str]:
        return [self._relative(name) for name in self._listing("names", prefix)]

    def sizes_under(self, prefix: str) -> dict[str, int]:
        found = self._listing("sizes", prefix)
        return {self._relative(name): int(size) for name, size in found.items()}

    def _relative(self, path: str) -> str:
        return path[len(self.root) + 1 :] if self.root else path

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            with self._exchange("DELETE", f"/o/{self.path(key)}") as answer:
                if answer.status not in (204, 404):
                    raise self._refused(answer, f"deleting {key}")

    def delete_prefix(self, prefix: str) -> None:
        with self._exchange("DELETE", f"/tree/{self.path(prefix)}") as answer:
            if answer.status != 204:
                raise self._refused(answer, f"deleting {prefix}")

    def make_durable(self, prefix: str) -> None:
        """Nothing to do: a replica lives in the peer's memory, which no fsync makes
        outlive the node; what it buys is a copy on another node."""


class _Connection(http.client.HTTPConnection):
    """No Nagle: a request's headers and body go out as separate writes, and with Nagle's
    algorithm the second waits for the peer's delayed ACK of the first (up to 40 ms on
    Linux), for every request. Measured here: a 64 MiB restore took 0.17 s with it, mostly
    such waits, against 0.03 s for the bytes."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ReplicaServer:
    """Serves ``directory`` (this node's memory) to the gang's peers, in threads."""

    def __init__(self, directory: str, host: str = "127.0.0.1", port: int = 0) -> None:
        store = open_store(f"file://{directory}")
        assert isinstance(store, LocalStore)
        self.store = store
        handler = type("Handler", (_Handler,), {"store": self.store})
        self._server = _Server((host, port), handler)
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="replica-server", daemon=True
        )

    def url(self, root: str) -> str:
        """The :class:`PeerStore` URL of ``root`` on this server."""
        return f"{SCHEME}://{self.host}:{self.port}/{root.strip('/')}"

    def __enter__(self) -> ReplicaServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start(self) -> ReplicaServer:
        return self.__enter__()

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a peer that hung up mid-request (killed, as rehearsals do) learns
        nothing from a traceback on this node's stderr, and its retry is its own."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store: LocalStore

    def setup(self) -> None:
        super().setup()
        # A response's headers and its body (sendfile) are separate writes: see _Connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a failure reaches the peer as its status, not this node's stderr."""

    def _route(self) -> tuple[str, str]:
        kind, _, key = unquote(self.path).lstrip("/").partition("/")
        return kind, key

    def _answer(self, status: int, body: bytes = b"", kind: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _guarded(self, work: Any) -> None:
        try:
            work()
        except FileNotFoundError:
            self._answer(404, b"no such object")
        except (ValueError, StorageError) as error:  # Unreadable is a ValueError
            self._answer(400, str(error)[:300].encode())

    def do_PUT(self) -> None:
        self._guarded(self._put)

    def _put(self) -> None:
        kind, key = self._route()
        size = int(self.headers.get("Content-Length") or -1)
        if kind != "o" or not 0 <= size <= MAX_OBJECT_BYTES:
            self.close_connection = True
            self._answer(400, b"PUT /o/<key> with a Content-Length of at most 64 GiB")
            return
        data = bytearray(size)
        view, filled = memoryview(data), 0
        while filled < size:
            count = self.rfile.readinto(view[filled : filled + _CHUNK])
            if not count:
                self.close_connection = True
                self._answer(400, b"body shorter than its Content-Length")
                return
            filled += count
        claimed = self.headers.get("X-Crc32c")
        if claimed is not None and (
            not CRC32C_HEX.fullmatch(claimed) or f"{crc32c(data):08x}" != claimed
        ):
            self._answer(422, b"body does not match its X-Crc32c; nothing stored")
            return
        if self.headers.get("If-None-Match") == "*":
            try:
                self.store.put_if_absent(key, bytes(data))
            except AlreadyExists:
                self._answer(412, b"exists")
                return
        else:
            self.store.put(key, data)
        self._answer(201)

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_HEAD(self) -> None:
        self._guarded(self._get)

    def _get(self) -> None:
        kind, key = self._route()
        if kind in ("names", "sizes"):
            found = self.store.sizes_under(key) if kind == "sizes" else self.store.list(key)
            self._answer(200, json.dumps(found).encode(), "application/json")
            return
        if kind != "o":
            self._answer(400, b"unknown route")
            return
        descriptor = self.store.open_regular(confined(key))
        try:
            self._send(descriptor)
        finally:
            os.close(descriptor)

    def _send(self, descriptor: int) -> None:
        """The file (or the requested range of it) as the response."""
        size = os.fstat(descriptor).st_size
        start, end = 0, size - 1
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            first, _, last = ranged[len("bytes=") :].partition("-")
            start, end = int(first), min(int(last), size - 1) if last else size - 1
            if start >= size:
                self._answer(416, b"range starts past the end")
                return
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if self.command == "HEAD":
            return
        self.wfile.flush()
        sent, count = start, end - start + 1
        while count > 0:
            moved = os.sendfile(self.connection.fileno(), descriptor, sent, count)
            if not moved:
                break
            sent, count = sent + moved, count - moved

    def do_DELETE(self) -> None:
        self._guarded(self._delete)

    def _delete(self) -> None:
        kind, key = self._route()
        if kind == "tree":
            self.store.delete_prefix(key)
        elif kind == "o":
            self.store.delete([key])
        else:
            self._answer(400, b"unknown route")
            return
        self._answer(204)
