"""The replica server: a directory of this node's memory, served to the gang's peers.

It speaks the protocol :class:`~spotproof.runtime.storage.peer.PeerStore` describes, a
thread per connection, each request read and answered by ``replica_requests`` (which says
what a request must be to be taken). What the server itself bounds:

- **connections**: at most :data:`MAX_CONNECTIONS` at once; more are closed unanswered;
- **room**: everything it holds, what is arriving included, at most its ``limit`` (each
  file counted as at least a page, so empty files fill it too); a write that would pass
  it is refused with 507 before its body is read. The limit is ``REPLICA_LIMIT_MIB``, or
  half the file system the tier is on (``replica_room.default_limit``).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import socketserver
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from spotproof.runtime.settings import POD_IP, REPLICA_PORT
from spotproof.runtime.storage import open_store
from spotproof.runtime.storage.local import LocalStore
from spotproof.runtime.storage.peer import DeadlineSocket, peer_url
from spotproof.runtime.storage.replica_auth import Replays, ReplicaKey, authority
from spotproof.runtime.storage.replica_requests import Handler
from spotproof.runtime.storage.replica_room import Room, default_limit

MAX_CONNECTIONS = 64
"""Connections served at once: a holder serves one rank's replica (or a few, where ranks
share a node), with a connection per transfer thread (16 at most)."""


class CannotListen(Exception):
    """The server cannot listen where it was told: one line naming the setting to change."""


def _listen_problem(host: str, port: int, error: OSError) -> str:
    why = error.strerror or type(error).__name__
    if error.errno == errno.EADDRINUSE:
        return (
            f"{REPLICA_PORT.name}={port}: already in use in this pod ({why}); allowed: a port "
            "nothing else in the pod listens on, or 0 for any free one"
        )
    if error.errno == errno.EACCES:
        return f"{REPLICA_PORT.name}={port}: {why}; allowed: 1024 to 65535, or 0"
    return (
        f"{POD_IP.name}={host}: the replica server cannot listen there ({why}); allowed: "
        "this pod's own IP address (the downward API's status.podIP)"
    )


class ReplicaServer:
    """Serves ``directory`` (this node's memory) to the gang's peers, in threads, holding
    at most ``limit`` bytes (None: ``replica_room.default_limit``); :class:`CannotListen` when the
    address or port cannot be bound."""

    def __init__(
        self,
        directory: str,
        key: ReplicaKey,
        host: str = "127.0.0.1",
        port: int = 0,
        limit: int | None = None,
    ) -> None:
        store = open_store(f"file://{directory}")
        assert isinstance(store, LocalStore)
        self.store = store
        self.staging = directory.rstrip("/") + ".incoming"
        shutil.rmtree(self.staging, ignore_errors=True)  # what a killed server left
        os.makedirs(self.staging, exist_ok=True)
        room = Room(directory, default_limit(directory) if limit is None else limit)
        try:
            self._server = Server((host, port), key, self.store, self.staging, room)
        except OSError as error:
            raise CannotListen(_listen_problem(host, port, error)) from None
        self.host, self.port = host, int(self._server.server_address[1])
        self._server.where = authority(host, self.port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="replica-server", daemon=True
        )

    @property
    def limit(self) -> int:
        return self._server.room.limit

    def url(self, root: str) -> str:
        """The :class:`PeerStore` URL of ``root`` on this server."""
        return peer_url(self.host, self.port, root)

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


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        key: ReplicaKey,
        store: LocalStore,
        staging: str,
        room: Room,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.key, self.store, self.staging, self.room = key, store, staging, room
        self.replays = Replays()
        self.where = ""
        self._open, self._lock = 0, threading.Lock()
        super().__init__(address, Handler)

    def server_bind(self) -> None:
        """Without HTTPServer's reverse lookup of its own address (``getfqdn``), which
        waits on the cluster's DNS and names nothing this server uses."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        return DeadlineSocket.adopt(sock), address

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = self._open >= MAX_CONNECTIONS
            self._open += 0 if full else 1
        if full:
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed()

    def _closed(self) -> None:
        with self._lock:
            self._open -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a peer that hung up mid-request (killed, as rehearsals do) learns
        nothing from a traceback on this node's stderr, and its retry is its own."""
