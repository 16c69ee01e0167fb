"""``spotproof smoke --command --nodes 2 --tiers``: a user's own trainer, in a project of
their own, as a gang whose ranks are replaced one at a time (``TrainingJob``'s
``recovery=replace-rank``): each pod a torchrun elastic agent with the user's script as its
worker, its saves held in the pod's memory and replicated to the other pod. A worker's node
is lost, a worker is reclaimed, then the leader's node is lost; the gang must end with the
digest of the same script run once, never interrupted."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from spotproof.runtime import launcher
from spotproof.smoke.processes.trainer_process import TrainerProcess, descendants, runs_module
from spotproof.smoke.runs.tiered import LEADER, ONE_NODE, RECLAIMED
from tests.test_user_rehearsal import FAST_STEPS, TRAIN, Rehearsed, _project, _smoke, _state

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

STEPS = 120
"""Room for the three interruptions at an interval of 10: each is placed two to three
intervals past the gang's resumption."""


@pytest.fixture(scope="module")
def replaced(tmp_path_factory: pytest.TempPathFactory) -> Rehearsed:
    """The user's trainer (steps of a millisecond or so: only the rehearsal's hold keeps
    it where each interruption is placed) as a gang of 2 replace-rank pods, against S3."""
    project = _project(tmp_path_factory.mktemp("replaced") / "acme", TRAIN)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRAIN_STEPS", str(STEPS))
        return _smoke(project, "--nodes", "2", "--tiers", "--interval", "10")


SCENARIOS = (ONE_NODE, RECLAIMED, LEADER)
"""The interruptions of a gang of 2, in the order they are played."""


def _record(run: Rehearsed, scenario: str) -> dict:
    return run.report["interruptions"][SCENARIOS.index(scenario)]


def test_the_users_gang_ends_with_its_uninterrupted_digest(replaced: Rehearsed) -> None:
    assert (replaced.code, replaced.err, replaced.report["failures"]) == (0, "", []), replaced.out
    assert replaced.report["digest"] == replaced.report["reference_digest"] is not None
    assert replaced.report["config"]["total_steps"] == STEPS
    assert [f"{s} at step" in replaced.out for s in SCENARIOS] == [True] * len(SCENARIOS)


def test_a_lost_workers_pod_alone_is_replaced_and_resumes_from_its_peer(
    replaced: Rehearsed,
) -> None:
    lost = _record(replaced, ONE_NODE)
    assert lost["replaced"] == [1]
    assert lost["resumed_tiers"] == ["memory", "peer"]
    assert "pods [0] kept" in replaced.out


def test_a_trainer_of_fast_steps_loses_at_most_the_steps_since_its_memory_save(
    replaced: Rehearsed,
) -> None:
    lost = _record(replaced, ONE_NODE)
    # Unheld, a script of millisecond steps would be far past its target (or done) by the
    # time the harness struck; held there, it loses what memory had not saved yet.
    assert lost["steps_lost"] <= replaced.report["config"]["interval"]


def test_a_reclaimed_workers_pod_commits_its_step_and_alone_is_replaced(
    replaced: Rehearsed,
) -> None:
    reclaimed = _record(replaced, RECLAIMED)
    assert (reclaimed["exit_code"], reclaimed["replaced"], reclaimed["steps_lost"]) == (143, [1], 0)


def test_losing_the_leaders_node_restarts_the_users_gang_from_the_bucket(
    replaced: Rehearsed,
) -> None:
    leader = _record(replaced, LEADER)
    assert leader["replaced"] == [0, 1]
    assert leader["resumed_tiers"] == ["bucket", "bucket"]
    assert leader["resumed_from"] == leader["newest_committed"] is not None


AGENT = "import subprocess, sys\nsys.exit(subprocess.call([sys.executable, sys.argv[1]]))\n"
"""Stands for torchrun's agent (``python -m torch.distributed.run``): started as a module,
it starts its worker and stays, as the agent stays to answer the rendezvous."""


def test_a_pod_held_at_a_step_stops_its_worker_and_leaves_its_agent_running(
    tmp_path: Path,
) -> None:
    """As a pod starts: the launch script, the agent below it, the worker below that. The
    launch script has the agent's words among its own arguments; it is not the agent."""
    worker = tmp_path / "fast.py"
    worker.write_text(FAST_STEPS)
    (tmp_path / "stand_in_agent.py").write_text(AGENT)
    pod = TrainerProcess(
        {"PYTHONPATH": str(tmp_path)},
        time.monotonic(),
        argv=launcher.wrapped([sys.executable, "-m", "stand_in_agent", str(worker)]),
        events_file=tmp_path / "events",
        held_below=lambda pid: runs_module(pid, "stand_in_agent"),
    )
    try:
        held = pod.run_until(lambda e: e["step"] >= 300, timeout=60)
        assert held is not None and pod.held
        [agent] = [pid for pid in descendants(pod.popen.pid) if runs_module(pid, "stand_in_agent")]
        [worker_pid] = descendants(agent)
        assert _state(worker_pid) == "T"  # the worker is stopped where it was placed
        assert _state(agent) != "T"  # its agent runs on: its keep-alives go out
        assert _state(pod.popen.pid) != "T"  # and so does the launch script
    finally:
        pod.send(signal.SIGKILL)
        pod.finish()
