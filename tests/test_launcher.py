"""How a gang's pod leaves after SIGTERM, with the real torchrun: torchrun alone exits 1
whatever its workers did, so a reclaim looks like a crash; started through spotproof's
launch script the pod exits 143 after a SIGTERM and keeps every other exit code."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.launcher import (
    TEARDOWN_WAIT_ENV,
    exit_after_sigterm,
    racing_rendezvous_host,
    torchrun,
    wrapped,
)

pytestmark = pytest.mark.processes

WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    mode = os.environ["MODE"]
    def stop(signum, frame):
        print("worker got SIGTERM", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    print("worker started", flush=True)
    if mode == "crash":
        sys.exit(5)
    if mode == "finish":
        sys.exit(0)
    time.sleep(120)
    """
)


def one_node_torchrun(*worker: str) -> list[str]:
    """torchrun as a gang's pod runs it, for a gang of one on this machine, running
    ``worker``."""
    return [
        *torchrun(
            nodes=1,
            processes_per_node=1,
            node_rank="0",
            master_addr="127.0.0.1",
            master_port=0,
            executable=(sys.executable, "-m", "torch.distributed.run"),
        ),
        *worker,
    ]


def _launch(tmp_path: Path, mode: str, *, through_script: bool) -> subprocess.Popen[str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    command = one_node_torchrun(sys.executable, str(script))
    return subprocess.Popen(
        wrapped(command) if through_script else command,
        env={"MODE": mode, "PATH": "/usr/bin:/bin", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "10"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop_when_started(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + 60
    for line in process.stdout:
        seen.append(line)
        if "worker started" in line:
            # torchrun keeps its workers only once start_processes has returned
            # (local_elastic_agent.py: self._pcontext = start_processes(...)); a SIGTERM in
            # between leaves the worker running on its own. Give it that moment.
            time.sleep(2)
            process.send_signal(signal.SIGTERM)  # the kubelet signals PID 1 only
            break
        assert time.monotonic() < deadline, "".join(seen)
    rest, _ = process.communicate(timeout=60)
    return "".join(seen) + rest


@pytest.mark.parametrize("through_script", [False, True])
def test_a_sigterm_reaches_the_worker_and_leaves_1_from_torchrun_143_through_the_script(
    tmp_path: Path, through_script: bool
) -> None:
    process = _launch(tmp_path, "wait", through_script=through_script)
    output = _stop_when_started(process)
    assert "worker got SIGTERM" in output, output
    expected = exit_codes.PREEMPTED if through_script else 1
    assert process.returncode == expected, output


@pytest.mark.parametrize(("mode", "code"), [("crash", 1), ("finish", 0)])
def test_without_a_sigterm_the_script_passes_torchruns_code_through(
    tmp_path: Path, mode: str, code: int
) -> None:
    process = _launch(tmp_path, mode, through_script=True)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == code, output


def test_the_plan_reads_each_launchers_exit_after_sigterm() -> None:
    command = ["torchrun", "--nnodes=2", "train.py"]
    assert exit_after_sigterm(command) == 1
    assert exit_after_sigterm(["python3", "-m", "torch.distributed.run", "x.py"]) == 1
    assert exit_after_sigterm(wrapped(command)) == exit_codes.PREEMPTED
    assert exit_after_sigterm(["python", "-m", "spotproof.smoke.train"]) == exit_codes.PREEMPTED


@pytest.mark.parametrize(
    ("command", "host"),
    [
        (
            ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=job-w-0-0.job:29400", "t.py"],
            "job-w-0-0.job",
        ),
        (
            ["torchrun", "--rdzv_backend", "c10d", "--rdzv_endpoint", "job-w-0-0.job", "t.py"],
            "job-w-0-0.job",
        ),
        # What the pod's /etc/hosts or an address settles without DNS, or is_host given:
        (
            ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=j-0.j.ml.svc.cluster.local:29400"],
            None,
        ),
        (["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.5:29400"], None),
        (
            ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=j-0.j:1", "--rdzv-conf=is_host=1"],
            None,
        ),
        # The static rendezvous, as TrainingJob renders it, even through the script:
        (
            wrapped(torchrun(nodes=2, processes_per_node=1, node_rank="0", master_addr="j-0.j")),
            None,
        ),
        (wrapped(["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=j-0.j:1"]), "j-0.j"),
    ],
)
def test_a_c10d_rendezvous_only_dns_can_settle_is_found(
    command: list[str], host: str | None
) -> None:
    assert racing_rendezvous_host(command) == host


def _failing_through_script(wait_seconds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        wrapped([sys.executable, "-c", "import sys; sys.exit(5)"]),
        env={"PATH": "/usr/bin:/bin", TEARDOWN_WAIT_ENV: str(wait_seconds)},
        text=True,
    )


def test_a_held_back_failure_becomes_143_when_the_teardown_comes_within_the_wait() -> None:
    script = _failing_through_script(60)
    time.sleep(1.0)  # the command has failed; the script now waits
    assert script.poll() is None
    started = time.monotonic()
    script.send_signal(signal.SIGTERM)
    assert script.wait(timeout=10) == exit_codes.PREEMPTED
    assert time.monotonic() - started < 5


def test_a_held_back_failure_is_reported_as_itself_once_the_wait_passes() -> None:
    started = time.monotonic()
    script = _failing_through_script(2)
    assert script.wait(timeout=20) == 5
    assert time.monotonic() - started >= 2
