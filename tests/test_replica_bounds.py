"""What a request can make a replica server hold, and for how long
(``runtime.storage.replica_server``, ``replica_requests``, ``peer``): bodies go to disk as
they arrive, within one request's bound and the server's; every transfer, either way, ends
by one deadline; a restore whose holder trickles falls back to the bucket in time. Real
servers, in threads or in a process of their own whose memory is read from /proc."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.runtime.checkpointer.transfer import MAX_PART
from spotproof.runtime.storage import StorageError, peer, replica_requests
from spotproof.runtime.storage.peer import PeerStore
from spotproof.runtime.storage.replica_server import MAX_CONNECTIONS, ReplicaServer
from tests.replica_wire import KEY, answer, closed, connect, head, rss_mib, server_process
from tests.test_tiers import Cluster, shard

pytestmark = pytest.mark.processes

HEADROOM_MIB = 24
"""What the tests let a server's resident memory grow by: a few chunks and heads, where a
body held whole would be tens or hundreds of MiB."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReplicaServer]:
    with ReplicaServer(str(tmp_path / "replicas"), KEY) as running:
        yield running


def test_requests_that_claim_huge_bodies_and_send_none_leave_the_servers_memory_alone(
    tmp_path: Path,
) -> None:
    """Before: four header-only PUTs took the server from 29 MiB to 2,077 MiB."""
    with server_process(tmp_path / "replicas") as (pid, port):
        before = rss_mib(pid)
        held = []
        claims = [
            (
                "unsigned",
                head(
                    "PUT",
                    "/o/rank-00001/a",
                    port,
                    key=None,
                    headers={"Content-Length": str(64 << 30)},
                ),
            ),
            (
                "too large",
                head("PUT", "/o/rank-00001/b", port, headers={"Content-Length": str(64 << 30)}),
            ),
            *(
                (
                    f"within bounds {n}",
                    head(
                        "PUT",
                        f"/o/rank-00001/c{n}",
                        port,
                        headers={"Content-Length": str(MAX_PART)},
                    ),
                )
                for n in range(16)
            ),
        ]
        for _, request in claims:
            sock = connect(port)
            sock.sendall(request)
            held.append(sock)
        time.sleep(1)
        grown = rss_mib(pid) - before
        for sock in held:
            sock.close()
    assert grown < HEADROOM_MIB


def test_a_body_is_written_as_it_arrives_never_held_whole(tmp_path: Path) -> None:
    body = random.Random(3).randbytes(MAX_PART)
    with server_process(tmp_path / "replicas") as (pid, port):
        before, peak, done = rss_mib(pid), 0.0, threading.Event()

        def watch() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_mib(pid))
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            PeerStore(f"peer://127.0.0.1:{port}/rank-00001", KEY).put("part", body)
        finally:
            done.set()
            watcher.join()
    assert (tmp_path / "replicas" / "rank-00001" / "part").read_bytes() == body
    assert peak - before < HEADROOM_MIB


def test_a_larger_object_than_any_part_is_refused_unread(server: ReplicaServer) -> None:
    with connect(server.port) as raw:
        raw.sendall(head("PUT", "/o/x", server.port, headers={"Content-Length": str(MAX_PART + 1)}))
        status, headers, _ = answer(raw)
        assert (status, headers.get("connection")) == (413, "close") and closed(raw)


def test_no_write_passes_the_servers_limit(tmp_path: Path) -> None:
    with ReplicaServer(str(tmp_path / "replicas"), KEY, limit=1 << 20) as server:
        store = PeerStore(server.url("rank-00001"), KEY)
        store.put("first", bytes(600 << 10))
        with pytest.raises(StorageError, match="HTTP 507"):
            store.put("second", bytes(600 << 10))
        filled = 0
        with pytest.raises(StorageError, match="HTTP 507"):
            for filled in range(1 << 20):  # a page each: empty files fill it too
                store.put(f"empty-{filled}", b"")
        assert filled < 424 // 4
        store.delete(["first"])
        store.put("second", bytes(500 << 10))  # room again once something is deleted
    held = sum(p.stat().st_size for p in (tmp_path / "replicas").rglob("*") if p.is_file())
    assert held <= 1 << 20


def test_a_connection_past_the_most_is_closed_unanswered(server: ReplicaServer) -> None:
    held = [connect(server.port) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.5)  # every one accepted and handed to its thread
        with connect(server.port) as extra:
            assert closed(extra)
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.5)
    assert PeerStore(server.url(""), KEY).list("") == []


# --- deadlines ------------------------------------------------------------------------------


def _trickler(stop: threading.Event) -> tuple[socket.socket, threading.Thread]:
    """A listener that answers every connection a byte of an HTTP answer at a time, 0.2 s
    apart, for as long as ``stop`` is unset: a peer that is slow but never silent."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n" + b"X" * 10_000:
                if stop.wait(0.2):
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_a_peer_that_trickles_its_answer_is_given_up_at_the_deadline() -> None:
    """Before: a peer sending a byte every 20 s kept a restore going past 200 s."""
    stop = threading.Event()
    listener, _ = _trickler(stop)
    try:
        store = PeerStore(
            f"peer://127.0.0.1:{listener.getsockname()[1]}/rank-00001", KEY, timeout=1
        )
        started = time.monotonic()
        with pytest.raises(StorageError, match="no whole answer within 1 s"):
            store.read_into("part", memoryview(bytearray(1024)))
        assert time.monotonic() - started < 3
    finally:
        stop.set()
        listener.close()


def test_a_client_that_trickles_its_body_is_cut_off_by_the_servers_deadline(
    server: ReplicaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica_requests, "transfer_seconds", lambda _: 1.0)
    with connect(server.port) as raw:
        raw.sendall(
            head("PUT", "/o/rank-00001/part", server.port, headers={"Content-Length": "100"})
        )
        started = time.monotonic()
        with pytest.raises(OSError):
            for _ in range(100):
                raw.sendall(b"x")
                time.sleep(0.1)
        assert time.monotonic() - started < 4
    assert not (Path(server.store.root) / "rank-00001" / "part").exists()


def test_a_connection_that_sends_its_head_a_byte_at_a_time_is_closed(
    server: ReplicaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica_requests, "IDLE_SECONDS", 1.0)
    with connect(server.port) as raw:
        started = time.monotonic()
        with pytest.raises(OSError):
            for byte in head("GET", "/names/", server.port) * 10:
                raw.sendall(bytes([byte]))
                time.sleep(0.1)
        assert time.monotonic() - started < 4


def test_a_restore_whose_holder_trickles_falls_back_to_the_bucket_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=2)
    cluster.save_steps([10, 20, 30])  # the bucket has 20; memory 20 and 30
    cluster.lose_node(1)  # rank 1's step 30 is only on its holder, rank 0
    monkeypatch.setattr(peer, "REQUEST_SECONDS", 1.0)

    def trickle(handler: replica_requests.Handler, descriptor: int) -> None:
        handler._start(200, 1 << 20, "application/octet-stream")
        for _ in range(1 << 20):
            handler.wfile.write(b"x")
            time.sleep(0.2)

    monkeypatch.setattr(replica_requests.Handler, "_send", trickle)
    started = time.monotonic()
    restored = cluster.restore()
    assert [(step, tier) for step, tier, _ in restored] == [(20, "memory"), (20, "bucket")]
    assert [data for _, _, data in restored] == [shard(0, 20), shard(1, 20)]
    assert time.monotonic() - started < 15
