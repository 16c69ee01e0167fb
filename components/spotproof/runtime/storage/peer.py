"""Another node's memory as an object store: ``peer://host:port/<root>``.

A gang's ranks keep replicas of each other's newest checkpoints
(``runtime.checkpointer.tiers``). Each rank runs a replica server over a directory in its
node's memory (``runtime.storage.replica_server``); a peer writes and reads there through
:class:`PeerStore`, an :class:`ObjectStore` (``contract``) like the buckets', so the same
commit protocol (``runtime.checkpointer.checkpoint``: parts, then a create-only manifest)
and the same verified loads work across nodes unchanged.

The protocol is a few HTTP/1.1 requests on one persistent connection per thread:

- ``PUT /o/<key>`` writes an object of at most :data:`MAX_OBJECT_BYTES`. With
  ``X-Crc32c`` (8 hex digits) the server checks the body against it *before* anything is
  stored and answers 422 on a mismatch, so a part damaged on the way is refused on
  arrival, as S3 refuses one; with ``If-None-Match: *`` the write is create-only (412
  when the key exists), the manifest's commit.
- ``GET /o/<key>``, with an optional ``Range: bytes=a-b``: the bytes, sent with
  ``sendfile`` from the node's memory; 416 for a range that starts past the end.
- ``HEAD /o/<key>``, ``DELETE /o/<key>``, ``DELETE /tree/<prefix>``, and
  ``GET /names/<prefix>`` / ``GET /sizes/<prefix>`` (JSON) for listings.

Every request is signed with the gang's key and every answer checked for the server's
signature (``runtime.storage.replica_auth`` says how, and why so).

Deadlines
---------
Each exchange, sending and answer together, must end within :func:`transfer_seconds` of
its bytes: :data:`REQUEST_SECONDS`, plus its bytes at :data:`FLOOR_BYTES_PER_SECOND`, the
rate at which ``spotproof plan`` assumes a replacement restores its state
(``catalog.RESTORE_MIB_PER_SECOND``). It is one deadline for the whole exchange, not a
timeout per read (:class:`DeadlineSocket`): a peer that sends a byte every few seconds
never resets it. A save or a load of a step as a whole (:meth:`PeerStore.bounded`) shares
one deadline too, that grows by what each request asks for: the peer tier costs a restore
at most :data:`REQUEST_SECONDS` plus what the plan budgets for reading the shard, and then
the bucket is read. The server keeps the same deadlines on its side.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlparse

from spotproof.catalog import RESTORE_MIB_PER_SECOND
from spotproof.runtime.checkpointer.transfer import MAX_PART
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage.contract import ObjectStore, confined, within
from spotproof.runtime.storage.errors import AlreadyExists, StorageError, StorageURLError, failed
from spotproof.runtime.storage.replica_auth import SIGNATURE, ReplicaKey, authority

SCHEME = "peer"
MAX_OBJECT_BYTES = MAX_PART
"""The largest object a server takes: the largest part a checkpoint is cut into (64 MiB,
``CHECKPOINT_PART_KB`` included); manifests are far smaller."""
REQUEST_SECONDS = 10.0
"""What any exchange may take beyond its bytes at the floor rate: a healthy peer answers
from memory in milliseconds, so a peer silent this long is taken for gone."""
FLOOR_BYTES_PER_SECOND = RESTORE_MIB_PER_SECOND * (1 << 20)
"""A peer slower than the plan's restore rate costs more than the bucket it stands in for."""
CONNECT_SECONDS = 5.0
IDLE_SECONDS = 60.0
"""How long a server keeps a connection that sends nothing, the next request's head
included."""
REUSE_SECONDS = IDLE_SECONDS / 2
"""A client opens a new connection instead of one idle longer: the server may be closing it."""


def transfer_seconds(size: int) -> float:
    """The deadline of an exchange that moves ``size`` bytes (see the module)."""
    return REQUEST_SECONDS + size / FLOOR_BYTES_PER_SECOND


def peer_url(host: str, port: int, root: str) -> str:
    """The :class:`PeerStore` URL of ``root`` on the server at ``host:port``."""
    spelled = f"[{host}]" if ":" in host else host
    return f"{SCHEME}://{spelled}:{port}/{root.strip('/')}"


class DeadlineSocket(socket.socket):
    """A socket whose blocking calls all end by one moment, :attr:`until` (monotonic);
    :class:`TimeoutError` once it has passed. None: no deadline."""

    until: float | None = None

    @classmethod
    def adopt(cls, sock: socket.socket) -> DeadlineSocket:
        return cls(sock.family, sock.type, sock.proto, fileno=sock.detach())

    def _left(self) -> float | None:
        if self.until is None:
            return None
        left = self.until - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        super().settimeout(left)
        return left

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._left()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._left()
        return super().recv(bufsize, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._left()  # sendall's timeout bounds all of it, not each send
        super().sendall(data, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._left()
        return super().send(data, flags)

    def send_file(self, descriptor: int, offset: int, count: int) -> int:
        """``count`` bytes of ``descriptor`` from ``offset`` with ``sendfile``, by the
        deadline; returns what could not be sent (the file ended first)."""
        poller = select.poll()
        poller.register(self.fileno(), select.POLLOUT)
        while count > 0:
            left = self._left()  # with a deadline the socket is non-blocking underneath
            if left is not None and not poller.poll(max(1, int(left * 1000))):
                continue  # the deadline check above ends it
            try:
                moved = os.sendfile(self.fileno(), descriptor, offset, count)
            except BlockingIOError:
                continue
            if not moved:
                break
            offset, count = offset + moved, count - moved
        return count


class _Connection(http.client.HTTPConnection):
    """No Nagle: a request's headers and body go out as separate writes, and with Nagle's
    algorithm the second waits for the peer's delayed ACK of the first (up to 40 ms on
    Linux), for every request. Measured here: a 64 MiB restore took 0.17 s with it, mostly
    such waits, against 0.03 s for the bytes."""

    until: float | None = None
    used = 0.0

    def connect(self) -> None:
        left = CONNECT_SECONDS if self.until is None else self.until - time.monotonic()
        raw = socket.create_connection(
            (self.host, self.port), max(0.001, min(CONNECT_SECONDS, left))
        )
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = DeadlineSocket.adopt(raw)
        self.sock.until = self.until

    def settle(self, until: float) -> None:
        """Every call of the next exchange ends by ``until``."""
        self.until = until
        if isinstance(self.sock, DeadlineSocket):
            self.sock.until = until


class _Budget:
    """One deadline for many requests, that grows with the bytes each asks for."""

    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds
        self._lock = threading.Lock()

    def charge(self, size: int) -> float:
        with self._lock:
            self.until += size / FLOOR_BYTES_PER_SECOND
            return self.until


class PeerStore(ObjectStore):
    """The objects under ``<root>`` on the replica server at ``host:port``, reached with
    the gang's ``key``."""

    direct_read_min = 1 << 20
    """A request on a kept-alive connection without Nagle costs a fraction of a
    millisecond here, less than copying a MiB out of scratch."""

    def __init__(self, url: str, key: ReplicaKey, timeout: float | None = None) -> None:
        """``timeout``: what any exchange may take beyond its bytes (:func:`transfer_seconds`);
        None, :data:`REQUEST_SECONDS`."""
        parsed = urlparse(url)
        if parsed.scheme != SCHEME or not parsed.hostname or not parsed.port:
            raise StorageURLError(f"replica URL {url!r}: allowed: peer://host:port/root")
        self.url, self.root = url, parsed.path.strip("/")
        self.host, self.port, self.key = parsed.hostname, parsed.port, key
        self.timeout = REQUEST_SECONDS if timeout is None else timeout
        self.where = authority(self.host, self.port)
        self._local = threading.local()
        self._budget: _Budget | None = None

    def path(self, key: str) -> str:
        return f"{self.root}/{confined(key)}" if self.root else confined(key)

    @contextlib.contextmanager
    def bounded(self) -> Iterator[None]:
        """Every request made inside shares one deadline (see the module): a save or a
        load of one step, however many parts it has."""
        self._budget = _Budget(self.timeout)
        try:
            yield
        finally:
            self._budget = None

    # --- one connection per thread ----------------------------------------------------

    def _connection(self) -> _Connection:
        connection = getattr(self._local, "connection", None)
        if connection is not None and time.monotonic() - connection.used > REUSE_SECONDS:
            self._drop(connection)
            connection = None
        if connection is None:
            connection = _Connection(self.host, self.port)
            self._local.connection = connection
        return connection

    @contextlib.contextmanager
    def _exchange(
        self,
        method: str,
        route: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        expect: int = 0,
    ) -> Iterator[http.client.HTTPResponse]:
        """One signed request and its answer, whose signature is checked, read (or
        drained) before the connection is used again, all by one deadline (``expect``: the
        bytes the answer should bring); a broken connection is dropped and the failure
        raised as one line."""
        size = len(body) if body is not None else 0
        headers = {**(headers or {}), "Content-Length": str(size)}
        target = quote(route)
        nonce = self.key.sign(self.where, method, target, headers)
        seconds = self.timeout + (size + expect) / FLOOR_BYTES_PER_SECOND
        until = time.monotonic() + seconds
        if self._budget is not None:
            until = min(until, self._budget.charge(size + expect))
        connection = self._connection()
        connection.settle(until)
        try:
            connection.request(method, target, body=body, headers=headers)
            answer = connection.getresponse()
            length = answer.getheader("Content-Length") or ""
            if not self.key.answer_verifies(
                nonce, answer.status, length, answer.getheader(SIGNATURE)
            ):
                raise StorageError(
                    f"{self.url}: {method} {route}: HTTP {answer.status} not signed with the "
                    "gang's replica key: this rank's REPLICA_SECRET_FILE differs from the "
                    "holder's, or what answers there is not the gang's replica server",
                    Failure.DENIED,
                )
            yield answer
            answer.read()  # drain what the caller left, so the connection can be reused
            connection.used = time.monotonic()
        except FileNotFoundError:  # the caller's: no such object
            self._drop(connection)
            raise
        except TimeoutError:
            self._drop(connection)
            raise StorageError(
                f"{self.url}: {method} {route}: no whole answer within {seconds:.0f} s (a peer "
                f"slower than {RESTORE_MIB_PER_SECOND} MiB/s is taken for gone)",
                Failure.UNREACHABLE,
            ) from None
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
        route = f"/o/{self.path(key)}"
        with self._exchange("GET", route, headers=headers, expect=len(buffer)) as answer:
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
        with self._exchange("GET", f"/o/{self.path(key)}", expect=limit or 0) as answer:
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
