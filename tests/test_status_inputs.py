"""What ``spotproof status`` and ``spotproof drill`` read from elsewhere (a kubeconfig, an
outputs file, a cluster's answers, a Job's checkpoint URL) cannot hang them, crash them,
make them write, make them print a password or make the terminal obey a cluster: each
input is read as a regular file within a size and a depth, each request within seconds,
and whatever the cluster said is printed escaped."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from spotproof.drill.kube_api import REQUEST_SECONDS
from tests.kube_replay import VERSION, Replay, pod, set_condition
from tests.support import run_cli
from tests.test_status import _workload_job

PASSWORD = "s3cret-pa55"


@pytest.fixture
def replay() -> Iterator[Replay]:
    server = Replay()
    yield server
    server.close()


def _kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "c", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
    }  # fmt: skip
    path.write_text(json.dumps(config))
    return path


def _drill(capsys: pytest.CaptureFixture[str], kubeconfig: Path, outputs: Path) -> tuple:
    outputs_text = '{"cluster_name": "ml", "disposable": true, "drill": {"project": "p", '
    outputs_text += '"role": "projects/p/roles/r", "instancePrefix": "gke-ml-"}}'
    if not outputs.exists() and not outputs.is_symlink():
        outputs.write_text(outputs_text)
    return run_cli(
        capsys,
        "drill",
        *("--cloud", "gke", "--kubeconfig", str(kubeconfig), "--outputs", str(outputs)),
        *("--job", "smoke"),
    )


# --- item 6: read-only ------------------------------------------------------------------


def test_status_creates_no_directory_where_a_jobs_checkpoint_url_points(
    replay: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (tmp_path / "never" / "made").as_uri()
    replay.put("jobs", _workload_job("llm-train", "spot-gpu", {"CHECKPOINT_URL": url}))
    kubeconfig = replay.kubeconfig(tmp_path / "kubeconfig")
    code, out, _ = run_cli(capsys, "status", "--kubeconfig", str(kubeconfig))
    assert code == 0
    assert f"  checkpoint  none committed yet ({url})" in out
    assert not (tmp_path / "never").exists()


# --- item 7: the API server's password --------------------------------------------------


def test_status_prints_the_api_servers_url_without_its_password(
    replay: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = replay.url.replace("http://", f"http://admin:{PASSWORD}@")
    code, out, err = run_cli(
        capsys, "status", "--kubeconfig", str(_kubeconfig(tmp_path / "k", server))
    )
    assert code == 0
    assert out.startswith(f"{replay.url.replace('http://', 'http://***@')} at ")
    assert PASSWORD not in out + err


@pytest.mark.parametrize("command", ["status", "drill"])
def test_an_api_server_that_does_not_answer_is_named_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    kubeconfig = _kubeconfig(tmp_path / "k", f"http://admin:{PASSWORD}@127.0.0.1:9")
    if command == "status":
        code, out, err = run_cli(capsys, "status", "--kubeconfig", str(kubeconfig))
    else:
        code, out, err = _drill(capsys, kubeconfig, tmp_path / "outputs.json")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert "the API server at http://***@127.0.0.1:9 did not answer" in err
    assert PASSWORD not in err


# --- item 8: files read within bounds ---------------------------------------------------


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _sparse(path: Path) -> Path:
    with open(path, "wb") as file:
        file.truncate(64 * 2**20)
    return path


HOSTILE_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "a FIFO": (_fifo, "not a regular file"),
    "/dev/zero": (lambda _: Path("/dev/zero"), "not a regular file"),
    "64 MiB": (_sparse, "larger than"),
    "not UTF-8": (lambda p: (p.write_bytes(b'{"kubeconfig": "\xff"}'), p)[1], "not UTF-8"),
    "deep nesting": (lambda p: (p.write_text("[" * 100_000), p)[1], "levels of nesting"),
}


@pytest.fixture
def returns_within() -> Iterator[None]:
    """Fails the test, instead of hanging the suite, when the command blocks."""

    def hung(*_: object) -> None:
        raise TimeoutError("still blocked after 30 s")

    import signal  # noqa: PLC0415

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.usefixtures("returns_within")
@pytest.mark.parametrize("kind", list(HOSTILE_FILES))
@pytest.mark.parametrize("given", ["status --outputs", "status --kubeconfig", "drill --outputs"])
def test_a_hostile_input_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, given: str
) -> None:
    make, says = HOSTILE_FILES[kind]
    path = make(tmp_path / "input")
    if given == "drill --outputs":
        code, out, err = _drill(capsys, tmp_path / "kubeconfig-unread", path)
    else:
        code, out, err = run_cli(capsys, *given.split(), str(path))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and says in err


# --- item 8: a stalled API server, an answer too deep -----------------------------------


def test_a_stalled_api_server_is_reported_after_one_bounded_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It accepts the connection and never answers: one request, no retry, and the read
    timeout named. With urllib3's three retries of a 30 s read it took 124 s."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:  # closed
                return

    threading.Thread(target=accept, daemon=True).start()
    kubeconfig = _kubeconfig(tmp_path / "k", f"http://127.0.0.1:{server.getsockname()[1]}")
    started = time.monotonic()
    try:
        code, out, err = run_cli(capsys, "status", "--kubeconfig", str(kubeconfig))
    finally:
        server.close()
        for connection in accepted:
            connection.close()
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"read timeout={REQUEST_SECONDS[1]}" in err
    assert len(accepted) == 1  # the reason it ends in time: one request, never retried
    assert time.monotonic() - started < 4 * sum(REQUEST_SECONDS)  # a backstop, not the proof


class _DeepApiServer(BaseHTTPRequestHandler):
    """Answers ``/version``, and every list with JSON nested 100,000 levels deep."""

    def do_GET(self) -> None:
        deep = self.path.rstrip("/") != "/version"
        body = b"[" * 100_000 + b"]" * 100_000 if deep else json.dumps(VERSION).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def test_an_api_answer_nested_too_deeply_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DeepApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code, out, err = run_cli(
            capsys, "status", "--kubeconfig", str(_kubeconfig(tmp_path / "k", url))
        )
    finally:
        server.shutdown()
        server.server_close()
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "listing " in err and "more than 100 levels of nesting" in err


# --- item 8: what the cluster says, printed escaped -------------------------------------

FORGED = "\x1b[2J\x1b]0;owned\x07\nJob train/forged  target spot-gpu  Complete\r"


def test_status_shows_a_clusters_control_characters_escaped_never_obeyed(
    replay: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay.put("jobs", _workload_job("llm-train", "spot-gpu"))
    labels = {"batch.kubernetes.io/job-name": "llm-train"}
    waiting = pod(replay, "llm-train-a", None, created=-60, running=None, grace=30, labels=labels)
    set_condition(replay, waiting, "PodScheduled", "False", -60, reason="Unschedulable",
                  message=FORGED)  # fmt: skip
    replay.put("pods", waiting)
    kubeconfig = replay.kubeconfig(tmp_path / "kubeconfig")
    code, out, _ = run_cli(capsys, "status", "--kubeconfig", str(kubeconfig))
    assert code == 0
    assert not any(c in out for c in "\x1b\x07\r")
    assert "Unschedulable: \\x1b[2J\\x1b]0;owned\\x07\\x0aJob train/forged" in out
    assert not any(line.startswith("Job train/forged") for line in out.splitlines())
