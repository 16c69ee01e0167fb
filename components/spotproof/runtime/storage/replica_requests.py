"""One request to a replica server (``runtime.storage.replica_server``): its head, its
signature, and what it asks.

- **who**: a request is read as far as its head (at most :data:`MAX_HEAD_BYTES`) and
  refused with 401, its connection closed, unless it is signed with the gang's key
  (``runtime.storage.replica_auth``), recently, and for the first time; nothing more of
  it, its body least of all, is read first. Every answer to a signed request is signed.
- **how much**: a body is streamed to a staging file beside the served directory in
  :data:`CHUNK` reads, its CRC32C checked as it arrives, and moved into place only when
  whole (``LocalStore.place``); one request brings at most ``peer.MAX_OBJECT_BYTES``, and
  only once the server's room has taken it (``replica_server``). So what a request can
  make the process hold is a chunk and a head, never its Content-Length.
- **how long**: the next request's head must arrive within ``peer.IDLE_SECONDS`` of the
  last answer, a body or an answer within ``peer.transfer_seconds`` of its bytes: each one
  deadline for the whole (``peer.DeadlineSocket``), not a timeout per read.
- **what**: one Content-Length of ASCII digits (none twice, no Transfer-Encoding), else
  400 and the connection closed, as after any body left unread, since what follows could
  not be told from the next request; a Range ``bytes=a-b`` with ``a <= b``; error bodies
  are fixed words, never a path or an error's text. Keys go through :class:`LocalStore`,
  so every one stays under the root, and only a regular file it wrote is ever served.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import tempfile
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol
from urllib.parse import unquote

from spotproof.runtime.checkpointer.integrity import CRC32C_HEX, crc32c
from spotproof.runtime.storage.contract import confined
from spotproof.runtime.storage.errors import AlreadyExists, StorageError, Unreadable
from spotproof.runtime.storage.local import LocalStore
from spotproof.runtime.storage.peer import (
    IDLE_SECONDS,
    MAX_OBJECT_BYTES,
    DeadlineSocket,
    transfer_seconds,
)
from spotproof.runtime.storage.replica_auth import (
    NONCE,
    SIGNATURE,
    SIGNED,
    TIME,
    Replays,
    ReplicaKey,
)
from spotproof.runtime.storage.replica_room import Room

MAX_HEAD_BYTES = 16 * 1024
"""A request's line and headers together; the client's are a few hundred bytes."""
CHUNK = 256 * 1024
"""What a body is read in: the most of it a connection holds at once."""
_LENGTH = re.compile(r"[0-9]{1,19}")
_RANGE = re.compile(r"bytes=([0-9]{1,19})-([0-9]{0,19})")


class _Head:
    """The connection's reader while a request's head is read: at most ``left`` bytes."""

    def __init__(self, raw: Any, left: int) -> None:
        self.raw, self.left = raw, left

    def readline(self, size: int = -1) -> bytes:
        wanted = self.left + 1 if size < 0 else min(size, self.left + 1)
        line: bytes = self.raw.readline(wanted)
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong("request head")
        return line


class Serving(Protocol):
    """What a request reads of the server that accepted it (``replica_server.Server`` is
    one): named here so that a request depends on these, not on the server that runs it."""

    where: str
    """The server's own ``host:port``, which a request's signature must name."""
    key: ReplicaKey
    replays: Replays
    store: LocalStore
    staging: str
    room: Room


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and sendfile are separate writes: see peer
    server: Serving  # type: ignore[assignment]
    connection: DeadlineSocket

    def version_string(self) -> str:
        return "spotproof-replica"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a failure reaches the peer as its status, not this node's stderr."""

    def handle_expect_100(self) -> bool:
        return True  # the final answer comes instead, after the signature is checked

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Fixed words, never the request's own echoed back; the connection closed."""
        self._answer(code, str(code).encode(), close=True)

    def handle_one_request(self) -> None:
        self.nonce: str | None = None
        self.unread = 0
        self.command, self.requestline, self.request_version = "", "", "HTTP/1.1"
        self.connection.until = time.monotonic() + IDLE_SECONDS
        raw, self.rfile = self.rfile, _Head(self.rfile, MAX_HEAD_BYTES)  # type: ignore[assignment]
        try:
            self.raw_requestline = self.rfile.readline()
            if not self.raw_requestline:
                self.close_connection = True
                return
            parsed = self.parse_request()
        except http.client.LineTooLong:
            self._answer(431, b"request head too long", close=True)
            return
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        finally:
            self.rfile = raw
        if not parsed:
            return
        with contextlib.suppress(TimeoutError, ConnectionError):
            self._admitted()

    def _admitted(self) -> None:
        """The request, once its head is sound and it is the gang's."""
        for name in (*SIGNED, TIME, NONCE, SIGNATURE, "Host"):
            if len(self.headers.get_all(name) or []) > 1:
                return self._answer(400, f"{name} twice".encode(), close=True)
        if "Transfer-Encoding" in self.headers:
            return self._answer(400, b"Transfer-Encoding is not taken", close=True)
        length = self.headers.get("Content-Length") or "0"
        if not _LENGTH.fullmatch(length):
            return self._answer(400, b"Content-Length is not a number", close=True)
        self.unread = int(length)
        where, key = self.server.where, self.server.key
        refused = key.refusal(where, self.command, self.path, self.headers.get)
        if refused is not None:  # nothing more for whoever sent it, on this connection
            return self._answer(401, f"unauthenticated: {refused}".encode(), close=True)
        first = self.server.replays.first(str(self.headers[NONCE]))
        if not first:
            status, why = (401, b"replayed") if first is False else (503, b"too many requests")
            return self._answer(status, why, close=True)
        self.nonce = str(self.headers[NONCE])
        work = {"PUT": self._put, "GET": self._get, "HEAD": self._get, "DELETE": self._delete}
        if self.unread and self.command != "PUT":
            return self._answer(400, b"only a PUT has a body")
        if self.command not in work:
            return self._answer(501, b"unsupported method")
        try:
            work[self.command]()
        except FileNotFoundError:
            self._answer(404, b"no such object")
        except (Unreadable, NotADirectoryError, IsADirectoryError, FileExistsError):
            self._answer(409, b"not an object this server holds there")
        except (TimeoutError, ConnectionError):
            raise
        except (ValueError, StorageError, OSError):
            self._answer(500, b"refused", close=True)

    def _answer(
        self, status: int, body: bytes = b"", kind: str = "text/plain", *, close: bool = False
    ) -> None:
        self._start(status, len(body), kind, close=close)
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _start(self, status: int, length: int, kind: str, *, close: bool = False) -> None:
        """The status line and headers, signed when the request was; the connection
        closed after it when asked, or when a body was left unread (what follows it could
        not be told from the next request)."""
        self.connection.until = time.monotonic() + transfer_seconds(length)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        if self.nonce is not None:
            signature = self.server.key.sign_answer(self.nonce, status, str(length))
            self.send_header(SIGNATURE, signature)
        if close or self.unread:
            self.send_header("Connection", "close")
        self.end_headers()

    def _route(self) -> tuple[str, str]:
        kind, _, key = unquote(self.path).lstrip("/").partition("/")
        return kind, confined(key) if key else key

    # --- PUT -------------------------------------------------------------------------------

    def _put(self) -> None:
        kind, key = self._route()
        if kind != "o" or not key:
            return self._answer(400, b"PUT /o/<key>")
        if self.unread > MAX_OBJECT_BYTES:
            return self._answer(413, b"larger than any object a checkpoint writes")
        room, length = self.server.room, self.unread
        if not room.take(length):
            return self._answer(507, b"this replica server is full")
        stored = False
        try:
            descriptor, staged = tempfile.mkstemp(dir=self.server.staging)
        except OSError:
            room.arrived(length, stored)
            raise
        try:
            self.connection.until = time.monotonic() + transfer_seconds(length)
            digest = self._receive(descriptor, length)
            if digest is None:
                return self._answer(400, b"body shorter than its Content-Length")
            claimed = self.headers.get("X-Crc32c")
            if claimed is not None and (
                not CRC32C_HEX.fullmatch(claimed) or f"{digest:08x}" != claimed
            ):
                return self._answer(422, b"body does not match its X-Crc32c; nothing stored")
            create_only = self.headers.get("If-None-Match") == "*"
            try:
                self.server.store.place(key, staged, create_only=create_only)
            except AlreadyExists:
                return self._answer(412, b"exists")
            stored = True
            self._answer(201)
        finally:
            os.close(descriptor)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)
            room.arrived(length, stored)

    def _receive(self, descriptor: int, length: int) -> int | None:
        """The body into ``descriptor``, a chunk at a time; its CRC32C, or None when the
        peer hung up first."""
        buffer = memoryview(bytearray(min(CHUNK, max(length, 1))))
        digest = 0
        while self.unread:
            count = self.rfile.readinto(buffer[: min(len(buffer), self.unread)])
            if not count:
                return None
            digest = crc32c(buffer[:count], digest)
            written = 0
            while written < count:
                written += os.write(descriptor, buffer[written:count])
            self.unread -= count
        os.fsync(descriptor)
        return digest

    # --- GET, HEAD, DELETE ---------------------------------------------------------------

    def _get(self) -> None:
        kind, key = self._route()
        if kind in ("names", "sizes"):
            store = self.server.store
            found = store.sizes_under(key) if kind == "sizes" else store.list(key)
            return self._answer(200, json.dumps(found).encode(), "application/json")
        if kind != "o":
            return self._answer(400, b"unknown route")
        descriptor = self.server.store.open_regular(key)
        try:
            self._send(descriptor)
        finally:
            os.close(descriptor)

    def _send(self, descriptor: int) -> None:
        """The file (or the requested range of it) as the answer."""
        size = os.fstat(descriptor).st_size
        start, end = 0, size - 1
        ranged = self.headers.get("Range")
        if ranged is not None:
            asked = _RANGE.fullmatch(ranged)
            if asked is None:
                return self._answer(400, b"Range: bytes=first-last")
            start = int(asked.group(1))
            end = min(int(asked.group(2)), size - 1) if asked.group(2) else size - 1
            if asked.group(2) and int(asked.group(2)) < start:
                return self._answer(416, b"range ends before it starts")
            if start >= size:
                return self._answer(416, b"range starts past the end")
        self._start(206 if ranged else 200, end - start + 1, "application/octet-stream")
        if self.command == "HEAD":
            return
        if self.connection.send_file(descriptor, start, end - start + 1):
            self.close_connection = True  # the file ended early: the answer is short

    def _delete(self) -> None:
        kind, key = self._route()
        if kind == "tree":
            self.server.store.delete_prefix(key)
        elif kind == "o":
            self.server.store.delete([key])
        else:
            return self._answer(400, b"unknown route")
        self._answer(204)
