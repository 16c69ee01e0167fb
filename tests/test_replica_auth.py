"""Only the gang reaches its replicas (``runtime.storage.replica_auth``): a replica server
refuses every request not signed with the gang's secret, recently and once, before it
reads a byte of the body, and a client believes no answer its holder did not sign. Real
servers on loopback, real sockets."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.tiers import MemoryTier
from spotproof.runtime.group import memory_tier, tier_disagreement
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage import StorageError, replica_auth
from spotproof.runtime.storage.peer import PeerStore
from spotproof.runtime.storage.replica_auth import ReplicaKey
from spotproof.runtime.storage.replica_server import ReplicaServer
from tests.replica_wire import KEY, SECRET, answer, closed, connect, head

pytestmark = pytest.mark.processes

OUTSIDER = ReplicaKey(b"a secret that is not the gang's, 32 bytes or more")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReplicaServer]:
    with ReplicaServer(str(tmp_path / "replicas"), KEY) as running:
        yield running


@pytest.fixture
def held(server: ReplicaServer) -> CheckpointStore:
    """Step 10 of rank 1, replicated by the gang."""
    url = server.url("rank-00001")
    store = CheckpointStore(url, store=PeerStore(url, KEY))
    assert store.save(10, {"model": b"the gang's weights" * 1000}).committed
    return store


def _files(server: ReplicaServer) -> list[str]:
    root = Path(server.store.root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("method", "target", "body"),
    [
        ("PUT", "/o/rank-00001/manifests/000000000099.json", b"{}"),
        ("GET", "/o/rank-00001/manifests/000000000010.json", b""),
        ("HEAD", "/o/rank-00001/manifests/000000000010.json", b""),
        ("DELETE", "/tree/", b""),
        ("DELETE", "/o/rank-00001/manifests/000000000010.json", b""),
        ("GET", "/names/rank-00001/manifests", b""),
        ("GET", "/sizes/rank-00001", b""),
    ],
)
def test_an_unsigned_request_is_refused_on_every_route_and_changes_nothing(
    server: ReplicaServer, held: CheckpointStore, method: str, target: str, body: bytes
) -> None:
    before = _files(server)
    with connect(server.port) as raw:
        raw.sendall(
            head(method, target, server.port, key=None, headers={"Content-Length": str(len(body))})
        )
        status, headers, text = answer(raw)
        assert (status, headers.get("connection")) == (401, "close")
        assert closed(raw)
    assert b"weights" not in text and _files(server) == before


def test_an_outsiders_self_consistent_step_is_never_written(
    server: ReplicaServer, held: CheckpointStore
) -> None:
    url = server.url("rank-00001")
    forged = CheckpointStore(url, store=PeerStore(url, OUTSIDER))
    with pytest.raises(StorageError, match="HTTP 401 not signed with the gang's replica key"):
        forged.save(99, {"model": b"an outsider's weights"})
    assert held.committed_steps() == [10]
    assert not any("000000000099" in name for name in _files(server))


def test_an_outsider_can_neither_read_the_weights_nor_wipe_the_replicas(
    server: ReplicaServer, held: CheckpointStore
) -> None:
    outsider = PeerStore(server.url(""), OUTSIDER)
    with pytest.raises(StorageError):
        outsider.get("rank-00001/manifests/000000000010.json")
    with pytest.raises(StorageError):
        outsider.delete_prefix("")
    loaded = held.load_latest()
    assert loaded is not None and bytes(loaded.blobs["model"]) == b"the gang's weights" * 1000


def test_a_request_sent_again_is_refused_as_a_replay(server: ReplicaServer) -> None:
    PeerStore(server.url(""), KEY).put("rank-00001/object", b"kept")
    request = head("DELETE", "/o/rank-00001/object", server.port)
    with connect(server.port) as first:
        first.sendall(request)
        assert answer(first)[0] == 204
    PeerStore(server.url(""), KEY).put("rank-00001/object", b"kept")
    with connect(server.port) as again:
        again.sendall(request)
        status, _, text = answer(again)
    assert (status, text) == (401, b"replayed")
    assert PeerStore(server.url(""), KEY).get("rank-00001/object") == b"kept"


def test_a_request_signed_for_another_server_is_refused(
    server: ReplicaServer, tmp_path: Path
) -> None:
    with ReplicaServer(str(tmp_path / "other"), KEY) as other, connect(server.port) as raw:
        raw.sendall(head("DELETE", "/tree/", other.port))  # signed for the other's address
        status, _, text = answer(raw)
    assert (status, text) == (401, b"unauthenticated: signature does not verify")


def test_a_request_signed_long_ago_is_refused(
    server: ReplicaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = time.time
    monkeypatch.setattr(replica_auth.time, "time", lambda: real() - 120)
    request = head("GET", "/names/", server.port)
    monkeypatch.setattr(replica_auth.time, "time", real)
    with connect(server.port) as raw:
        raw.sendall(request)
        status, _, text = answer(raw)
    assert (status, text) == (
        401,
        b"unauthenticated: signed more than 30 s from this server's clock",
    )


class _Impostor(BaseHTTPRequestHandler):
    """Answers anything with an empty listing, as whatever took a lost holder's address."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    def log_message(self, *_: Any) -> None:
        return None


def test_an_answer_not_signed_by_the_gang_is_never_believed() -> None:
    impostor = ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    try:
        peer = PeerStore(f"peer://127.0.0.1:{impostor.server_address[1]}/rank-00001", KEY)
        with pytest.raises(StorageError, match="not the gang's replica server"):
            peer.list("manifests")
    finally:
        impostor.shutdown()
        impostor.server_close()


# --- the secret ------------------------------------------------------------------------------


def _tier_env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"MEMORY_TIER_DIR": str(tmp_path / "tier"), "WORLD_SIZE": "2", **more}


def test_a_memory_tier_without_a_secret_refuses_to_start_naming_the_setting(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as refused:
        memory_tier(_tier_env(tmp_path))
    assert str(refused.value).startswith(
        "MEMORY_TIER_DIR is set but REPLICA_SECRET_FILE is not: a replica server without the "
        "gang's secret would take anyone's writes and serve its weights; allowed: the path of "
        "a file holding a random secret of 32 to 4096 bytes"
    )


def test_a_trainer_with_a_tier_and_no_secret_exits_2_in_one_line(tmp_path: Path) -> None:
    env = {
        **_tier_env(tmp_path),
        "RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
        "CHECKPOINT_URL": f"file://{tmp_path / 'bucket'}",
        "CHECKPOINT_INTERVAL": "10",
        "TOTAL_STEPS": "20",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-m", "spotproof.smoke.train"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1 and "REPLICA_SECRET_FILE is not" in done.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [(b"short secret\n", "holds 12 bytes"), (b"x" * 5000, "holds 4160 bytes")],
)
def test_a_secret_of_the_wrong_size_is_refused_without_showing_it(
    tmp_path: Path, content: bytes, says: str
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        memory_tier(_tier_env(tmp_path, REPLICA_SECRET_FILE=str(secret)))
    message = str(refused.value)
    assert message.startswith(f"REPLICA_SECRET_FILE='{secret}': {says}; allowed: ")
    assert content.strip()[:8].decode() not in message


def test_a_secret_is_never_in_a_repr(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET + b"\n")
    tier = memory_tier(_tier_env(tmp_path, REPLICA_SECRET_FILE=str(secret)))
    assert isinstance(tier, MemoryTier) and tier.key.fingerprint() == KEY.fingerprint()
    assert SECRET.decode()[:10] not in repr(tier) + repr(tier.key)


def test_ranks_holding_different_secrets_are_told_so_naming_the_setting() -> None:
    seen = [(4, KEY.fingerprint()), (4, OUTSIDER.fingerprint())]
    assert tier_disagreement(seen) == (
        "REPLICA_SECRET_FILE differs between the ranks of the gang; allowed: one Secret, "
        "mounted by every pod of the gang"
    )


def test_a_full_replay_memory_refuses_new_requests_rather_than_forget_old_ones() -> None:
    seen = replica_auth.Replays(most=2, seconds=60)
    assert [seen.first("a"), seen.first("b"), seen.first("a"), seen.first("c")] == [
        True,
        True,
        False,
        None,
    ]
