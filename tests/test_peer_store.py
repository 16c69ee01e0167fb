"""Another node's memory as an object store (``runtime.storage.peer``): a replica server
on loopback, written and read through ``PeerStore`` with the checkpoint protocol."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.integrity import crc32c_hex
from spotproof.runtime.storage import AlreadyExists, StorageError, Unreadable
from spotproof.runtime.storage.peer import PeerStore
from spotproof.runtime.storage.replica_server import ReplicaServer
from tests.replica_wire import KEY, SECRET, answer, connect, head

pytestmark = pytest.mark.processes


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReplicaServer]:
    with ReplicaServer(str(tmp_path / "replicas"), KEY) as running:
        yield running


def test_a_checkpoint_saved_to_a_peer_loads_back_verified(server: ReplicaServer) -> None:
    store = CheckpointStore(
        server.url("rank-00001"), store=PeerStore(server.url("rank-00001"), KEY)
    )
    state = random.Random(1).randbytes(3 * 2**20 + 5)
    assert store.save(7, {"model": state}).committed
    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 7 and bytes(loaded.blobs["model"]) == state


def test_a_part_damaged_on_the_way_is_refused_on_arrival(
    server: ReplicaServer, tmp_path: Path
) -> None:
    peer = PeerStore(server.url("rank-00001"), KEY)
    with pytest.raises(StorageError, match="422"):
        peer.put("steps/1/part", b"the bytes that arrived", crc32c=crc32c_hex(b"the bytes sent"))
    assert not (tmp_path / "replicas" / "rank-00001" / "steps" / "1" / "part").exists()


def test_a_manifest_is_created_once(server: ReplicaServer) -> None:
    peer = PeerStore(server.url("rank-00001"), KEY)
    peer.put_if_absent("manifests/1.json", b"first")
    with pytest.raises(AlreadyExists):
        peer.put_if_absent("manifests/1.json", b"second")
    assert peer.get("manifests/1.json") == b"first"


def test_ranged_reads_fill_the_buffer_and_stop_at_the_end(server: ReplicaServer) -> None:
    peer = PeerStore(server.url("r"), KEY)
    peer.put("object", bytes(range(100)))
    buffer = bytearray(30)
    assert peer.read_into("object", memoryview(buffer), 80) == 20
    assert bytes(buffer[:20]) == bytes(range(80, 100))
    assert peer.read_into("object", memoryview(buffer), 100) == 0


def test_a_key_that_leaves_the_servers_directory_is_refused(
    server: ReplicaServer, tmp_path: Path
) -> None:
    (tmp_path / "secret").write_bytes(b"not for peers")
    with pytest.raises(Unreadable, match="leaves the store's root"):
        PeerStore(server.url(""), KEY).get("../secret")
    with connect(server.port) as raw:
        raw.sendall(head("GET", "/o/../secret", server.port))
        status, _, body = answer(raw)
    assert (status, b"not for peers" in body) == (409, False)


def test_a_peer_that_is_gone_is_one_storage_error(tmp_path: Path) -> None:
    with ReplicaServer(str(tmp_path), KEY) as gone:
        url = gone.url("rank-00000")
    with pytest.raises(StorageError, match="unreachable"):
        PeerStore(url, KEY, timeout=2).list("manifests")


def test_a_bad_replica_url_is_one_line() -> None:
    with pytest.raises(StorageError, match="allowed: peer://host:port/root"):
        PeerStore("peer://nowhere/root", KEY)


PUSHER = """
import random, sys
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.storage.peer import PeerStore
from spotproof.runtime.storage.replica_auth import ReplicaKey

peer = PeerStore(sys.argv[1], ReplicaKey(sys.argv[2].encode()))
store = CheckpointStore(sys.argv[1], store=peer, part_bytes=256 * 1024, parallelism=1)
for step in range(1, 10_000):
    store.save(step, {"model": random.Random(step).randbytes(8 * 2**20)})
    print(step, flush=True)
"""


def test_a_replica_push_killed_mid_part_never_leaves_a_loadable_half_step(
    server: ReplicaServer, tmp_path: Path
) -> None:
    url = server.url("rank-00003")
    pusher = subprocess.Popen(
        [sys.executable, "-c", PUSHER, url, SECRET.decode()],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    try:
        assert pusher.stdout is not None
        finished = int(pusher.stdout.readline())  # one replica is whole
        parts = tmp_path / "replicas" / "rank-00003" / "steps"
        deadline = time.monotonic() + 60
        # Kill it once the next step's parts are arriving: somewhere inside a part, or
        # between parts, never after its manifest.
        while time.monotonic() < deadline:
            arriving = [p for p in parts.glob("*") if int(p.name) > finished]
            if arriving and any(arriving[0].rglob("*.0*")):
                break
            time.sleep(0.001)
        pusher.send_signal(signal.SIGKILL)
        pusher.wait()
    finally:
        pusher.kill()
        pusher.wait()
    reader = CheckpointStore(url, store=PeerStore(url, KEY))
    loaded = reader.load_latest()
    assert loaded is not None
    assert bytes(loaded.blobs["model"]) == random.Random(loaded.step).randbytes(8 * 2**20)
