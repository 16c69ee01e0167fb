"""A torchrun gang's final save gets the pod's grace, not torchrun's 30 s.

torchrun's agent answers SIGTERM by SIGKILLing its workers ``shutdown_timeout`` seconds
later (30 unless told otherwise, ``runtime.launcher``). A ``TrainingJob`` gang tells it
the pod's grace less what torchrun needs to leave; a hand-written gang that does not is a
finding of ``plan`` and ``check``, and the interval model prices the grace torchrun leaves.
The last tests run the real torchrun with its real, unscaled timeout."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from spotproof.plan import PlanResult, check
from spotproof.runtime import exit_codes
from spotproof.runtime.launcher import (
    AGENT_EXIT_SECONDS,
    DEFAULT_SHUTDOWN_TIMEOUT,
    SHUTDOWN_TIMEOUT_ENV,
    shutdown_environment,
    shutdown_timeout,
    worker_grace,
    wrapped,
)
from tests.support import plan_of
from tests.test_launcher import one_node_torchrun
from tests.test_training_job import _gang, _gang_pod

pytestmark = pytest.mark.processes

SMOKE = "Job spotproof/spotproof-smoke"


# --- what torchrun in a command is given ---------------------------------------------------


@pytest.mark.parametrize(
    ("command", "env", "seconds"),
    [
        (["torchrun", "--nproc-per-node=1", "train.py"], {}, DEFAULT_SHUTDOWN_TIMEOUT),
        (["torchrun", "--shutdown-timeout=80", "train.py"], {}, 80),
        (["torchrun", "--shutdown_timeout", "70", "train.py"], {SHUTDOWN_TIMEOUT_ENV: "9"}, 70),
        (["torchrun", "train.py"], {SHUTDOWN_TIMEOUT_ENV: "60"}, 60),
        # The flag's own variable comes before the general one.
        (["torchrun", "train.py"], {"PET_SHUTDOWN_TIMEOUT": "50", SHUTDOWN_TIMEOUT_ENV: "9"}, 50),
        ([sys.executable, "-m", "torch.distributed.run", "--shutdown-timeout=40", "t.py"], {}, 40),
        # The training script's own flag is not torchrun's.
        (["torchrun", "--no-python", "train", "--shutdown-timeout=99"], {}, 30),
        (wrapped(["torchrun", "train.py"]), {SHUTDOWN_TIMEOUT_ENV: "45"}, 45),
        (["python", "train.py"], {SHUTDOWN_TIMEOUT_ENV: "45"}, None),
    ],
)
def test_the_shutdown_timeout_is_read_as_torchrun_reads_it(
    command: list[str], env: dict[str, str], seconds: int | None
) -> None:
    assert shutdown_timeout(command, env) == seconds


def test_a_worker_under_torchrun_can_use_only_the_grace_its_agent_gives() -> None:
    under_torchrun = {"TORCHELASTIC_RUN_ID": "none"}
    assert worker_grace(105, under_torchrun) == DEFAULT_SHUTDOWN_TIMEOUT
    assert worker_grace(105, {**under_torchrun, SHUTDOWN_TIMEOUT_ENV: "102"}) == 102
    assert worker_grace(15, under_torchrun) == 15
    assert worker_grace(105, {}) == 105  # not torchrun's worker: the pod's grace


# --- what TrainingJob renders -------------------------------------------------------------


def test_a_gangs_torchrun_gets_the_pods_grace_less_what_it_needs_to_leave() -> None:
    pod = _gang_pod(_gang())
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    grace = pod["terminationGracePeriodSeconds"]
    assert env[SHUTDOWN_TIMEOUT_ENV] == str(grace - AGENT_EXIT_SECONDS)
    assert env["GRACE_SECONDS"] == str(grace)


# --- what plan and check make of a gang's torchrun ----------------------------------------


def _smoke_under_torchrun(env: dict[str, str] | None = None) -> PlanResult:
    """eks-dev, whose smoke Job has 90 s of grace, with its trainer started by torchrun
    as a hand-written manifest might, and a state of 8 GiB (a ~55 s final save)."""
    plan = plan_of("eks-dev")
    job = plan.recording.one("kubernetes:batch/v1:Job", "eks-dev-smoke-job").inputs
    template = job["spec"]["template"]
    template["metadata"]["annotations"]["spotproof.dev/state-mib"] = "8192"
    container: dict[str, Any] = template["spec"]["containers"][0]
    container["command"] = ["torchrun", "--nproc-per-node=1", "--no-python", "train"]
    container["env"] += [{"name": k, "value": v} for k, v in (env or {}).items()]
    return check(plan.spec, plan.recording)


def test_a_gang_whose_grace_outlasts_torchruns_timeout_fails_the_path() -> None:
    result = _smoke_under_torchrun()
    problems = [v.message for v in result.violations if v.policy == "preemption-path"]
    assert problems
    assert all(
        "gets 90 s of grace, but torchrun SIGKILLs its workers 30 s after SIGTERM, so a final "
        f"save has only 30 s; fix: set {SHUTDOWN_TIMEOUT_ENV}=87 in the container" in problem
        for problem in problems
    )
    assert result.exit_code == 1


def test_the_interval_model_prices_the_grace_torchrun_leaves() -> None:
    [advice] = [a for a in _smoke_under_torchrun().intervals if a.workload == SMOKE]
    assert (advice.grace_seconds, advice.grace_limit) == (30, "torchrun's shutdown timeout")
    assert not advice.final_save_fits  # 8 GiB does not commit in 30 s
    [outcome] = [o for o in _smoke_under_torchrun().outcomes if o.workload.label == SMOKE]
    killed = "torchrun SIGKILLs its workers 30 s after SIGTERM"
    assert all(killed in path.line() for path in outcome.paths)


def test_a_gang_that_gives_torchrun_the_grace_passes_and_keeps_it() -> None:
    result = _smoke_under_torchrun(shutdown_environment(90))
    assert not [v for v in result.violations if v.policy == "preemption-path"]
    [advice] = [a for a in result.intervals if a.workload == SMOKE]
    assert advice.grace_seconds == 87 and advice.final_save_fits


# --- the real torchrun, with its real timeout ---------------------------------------------

SLOW_FINAL_SAVE = textwrap.dedent(
    """
    import signal, sys, time
    def stop(signum, frame):
        print("final save started", flush=True)
        time.sleep(float(sys.argv[1]))
        print("final save committed", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    print("worker started", flush=True)
    time.sleep(600)
    """
)
SAVE_SECONDS = DEFAULT_SHUTDOWN_TIMEOUT + 5
"""A final save longer than torchrun's default wait."""


def _preempted_gang_pod(tmp_path: Path, env: dict[str, str]) -> tuple[str, int, float]:
    """One pod of a gang as TrainingJob starts it (launch script, torchrun), preempted
    while its worker trains: what it printed, its exit code, and seconds from SIGTERM."""
    script = tmp_path / "worker.py"
    script.write_text(SLOW_FINAL_SAVE)
    process = subprocess.Popen(
        wrapped(one_node_torchrun(sys.executable, str(script), str(SAVE_SECONDS))),
        env={"PATH": "/usr/bin:/bin", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "worker started" in line:
            time.sleep(2)  # torchrun holds its worker once start_processes has returned
            break
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)  # the kubelet signals PID 1 only
    rest, _ = process.communicate(timeout=SAVE_SECONDS + 60)
    return "".join(seen) + rest, process.returncode, time.monotonic() - signalled


def test_torchrun_left_at_its_default_kills_a_final_save_longer_than_30_s(
    tmp_path: Path,
) -> None:
    output, code, seconds = _preempted_gang_pod(tmp_path, {})
    assert "final save started" in output and "final save committed" not in output, output
    assert DEFAULT_SHUTDOWN_TIMEOUT <= seconds < SAVE_SECONDS, output
    assert code == exit_codes.PREEMPTED  # the launch script still reports a reclaim


def test_torchrun_given_the_pods_grace_lets_the_final_save_commit(tmp_path: Path) -> None:
    grace = SAVE_SECONDS + 10  # a pod whose grace holds the save, as TrainingJob renders it
    output, code, seconds = _preempted_gang_pod(tmp_path, shutdown_environment(grace))
    assert "final save committed" in output, output
    assert SAVE_SECONDS <= seconds < grace, output
    assert code == exit_codes.PREEMPTED
