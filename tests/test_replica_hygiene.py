"""A replica server's bad input and bad settings, each one line (``runtime.storage``,
``runtime.group``): a port in use or an address not the pod's stops every rank with exit 2
naming the setting, as does a tier set on one rank only; framing it cannot trust closes
the connection; a reversed range is refused; no error shows where the server keeps its
files. Real servers on loopback, real trainers in a gang of two where a gang is the
point."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.group import memory_tier
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage.peer import PeerStore
from spotproof.runtime.storage.replica_server import CannotListen, ReplicaServer
from spotproof.smoke.emulation.object_stores import free_port
from tests.replica_wire import KEY, SECRET, answer, closed, connect, head

pytestmark = pytest.mark.processes


def _gang(tmp_path: Path, ranks: list[dict[str, str]]) -> list[tuple[int, str]]:
    """A gang of smoke trainers, rank ``r`` with ``ranks[r]`` added to its environment:
    each one's exit status and last line on stderr."""
    secret = tmp_path / "replica-secret"
    secret.write_bytes(SECRET)
    base = {
        "CHECKPOINT_URL": f"file://{tmp_path / 'bucket'}",
        "CHECKPOINT_INTERVAL": "10",
        "TOTAL_STEPS": "40",
        "MODEL_MB": "1",
        "WORLD_SIZE": str(len(ranks)),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RENDEZVOUS_SECONDS": "60",
        "REPLICA_SECRET_FILE": str(secret),
        "SPOTPROOF_EVENTS": "",
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "spotproof.smoke.train"],
            env={**os.environ, **base, "RANK": str(rank), **more},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, more in enumerate(ranks)
    ]
    done = []
    for process in processes:
        _, err = process.communicate(timeout=180)
        assert "Traceback" not in err, err
        done.append((process.returncode, err.strip().splitlines()[-1]))
    return done


def _tier(tmp_path: Path, rank: int, **more: str) -> dict[str, str]:
    return {"MEMORY_TIER_DIR": str(tmp_path / f"node-{rank}"), "REPLICA_PORT": "0", **more}


def test_a_replica_port_in_use_stops_every_rank_in_one_line_naming_it(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = _gang(tmp_path, [_tier(tmp_path, 0, REPLICA_PORT=str(port)), _tier(tmp_path, 1)])
    for code, line in done:
        assert code == exit_codes.BAD_CONFIG
        assert f"rank 0: REPLICA_PORT={port}: already in use in this pod" in line


def test_a_memory_tier_on_one_rank_only_stops_every_rank_naming_it(tmp_path: Path) -> None:
    """Before: the ranks waited for each other in different collectives until gloo's
    timeout, which names no setting."""
    done = _gang(tmp_path, [_tier(tmp_path, 0), {}])
    for code, line in done:
        assert code == exit_codes.BAD_CONFIG
        assert "MEMORY_TIER_DIR is set on rank(s) 0 but not on 1" in line


def test_a_pod_ip_that_is_not_the_pods_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CannotListen) as refused:
        ReplicaServer(str(tmp_path / "replicas"), KEY, host="192.0.2.1")
    assert str(refused.value) == (
        "POD_IP=192.0.2.1: the replica server cannot listen there (Cannot assign requested "
        "address); allowed: this pod's own IP address (the downward API's status.podIP)"
    )


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("0.0.0.0", "not an address peers can reach"),
        ("::", "not an address peers can reach"),
        ("224.0.0.1", "not an address peers can reach"),
        ("255.255.255.255", "not an address peers can reach"),
        ("10.0.0.300", "not an IP address"),
    ],
)
def test_a_pod_ip_peers_cannot_reach_is_refused(tmp_path: Path, address: str, says: str) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    env = {"MEMORY_TIER_DIR": str(tmp_path), "REPLICA_SECRET_FILE": str(secret), "POD_IP": address}
    with pytest.raises(ConfigError) as refused:
        memory_tier(env)
    assert str(refused.value).startswith(f"POD_IP={address!r}: {says}; allowed: this pod's own")


# --- framing ---------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> ReplicaServer:
    with ReplicaServer(str(tmp_path / "replicas"), KEY) as running:
        yield running


@pytest.mark.parametrize("length", ["abc", "-1", "1e3", "+5", "9" * 20])
def test_a_content_length_that_is_not_a_number_closes_the_connection(
    server: ReplicaServer, length: str
) -> None:
    with connect(server.port) as raw:
        raw.sendall(head("PUT", "/o/x", server.port, headers={"Content-Length": length}))
        status, headers, _ = answer(raw)
        assert (status, headers.get("connection")) == (400, "close") and closed(raw)


def test_a_second_content_length_is_refused_and_the_connection_closed(
    server: ReplicaServer,
) -> None:
    request = head(
        "PUT", "/o/x", server.port, headers={"Content-Length": "3"}, extra=[("Content-Length", "9")]
    )
    with connect(server.port) as raw:
        raw.sendall(request + b"abc")
        status, _, body = answer(raw)
        assert (status, body) == (400, b"Content-Length twice") and closed(raw)
    assert not (Path(server.store.root) / "x").exists()


def test_a_chunked_body_is_refused_and_the_connection_closed(server: ReplicaServer) -> None:
    request = head("PUT", "/o/x", server.port, extra=[("Transfer-Encoding", "chunked")])
    with connect(server.port) as raw:
        raw.sendall(request + b"3\r\nabc\r\n0\r\n\r\n")
        assert answer(raw)[0] == 400 and closed(raw)


def test_a_range_that_ends_before_it_starts_is_refused(server: ReplicaServer) -> None:
    PeerStore(server.url(""), KEY).put("object", bytes(range(100)))
    with connect(server.port) as raw:
        raw.sendall(head("GET", "/o/object", server.port, headers={"Range": "bytes=10-5"}))
        status, headers, body = answer(raw)
    assert (status, headers["content-length"], body) == (416, "27", b"range ends before it starts")


def test_no_error_shows_where_the_server_keeps_its_files(server: ReplicaServer) -> None:
    root = Path(server.store.root)
    (root / "a-directory").mkdir()
    answers = []
    for method, target in [
        ("GET", "/o/missing"),
        ("GET", "/o/../outside"),
        ("GET", "/o/a-directory"),
        ("DELETE", "/o/a-directory"),
        ("GET", "/unknown/route"),
        ("POST", "/o/x"),
    ]:
        with connect(server.port) as raw:
            raw.sendall(head(method, target, server.port))
            answers.append(answer(raw))
    assert [status for status, _, _ in answers] == [404, 409, 409, 500, 400, 501]
    for _, _, body in answers:
        assert str(root).encode() not in body and b"/" not in body


def test_a_request_head_past_its_bound_is_refused_unread(server: ReplicaServer) -> None:
    with connect(server.port) as raw:
        raw.sendall(b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n")
        status, headers, _ = answer(raw)
        assert (status, headers.get("connection")) == (431, "close") and closed(raw)
