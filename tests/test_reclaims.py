"""A reclaim is counted as a reclaim on every path: how each path ends the pod (with or
without DisruptionTarget, with which exit code) through the Job's and the JobSet's failure
policies, as their controllers apply them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spotproof.plan import PlanResult, check
from spotproof.plan.model import Ending
from spotproof.plan.simulation.reclaims import Failure, jobset_action, matching_rule
from spotproof.runtime.launcher import is_wrapped
from tests.support import REPO, plan_of, run_cli

pytestmark = pytest.mark.processes

GANG = REPO / "examples" / "pretrain-jobset.yaml"
JOB = "kubernetes:batch/v1:Job"


def _endings(plan: PlanResult, label: str) -> dict[str, Ending]:
    [outcome] = [o for o in plan.outcomes if o.workload.label == label]
    return {path.capacity: path.ending for path in outcome.paths}


@pytest.mark.parametrize(
    ("stack", "capacity", "ending"),
    [
        ("gke-dev", "GKE spot", Ending.KUBELET_SHUTDOWN),
        # The smoke Job's budget and do-not-disrupt hold the eviction: Karpenter deletes it.
        ("eks-dev", "EKS spot (Karpenter)", Ending.DELETE),
        # Nothing drains a node auto-provisioning spot VM: the node is gone with the pod.
        ("aks-prod", "AKS spot (Karpenter)", Ending.NODE_GONE),
        ("aks-dev", "AKS spot", Ending.EVICTION),
    ],
)
def test_each_clouds_reclaim_ends_the_smoke_pod_its_own_way(
    stack: str, capacity: str, ending: Ending
) -> None:
    assert _endings(plan_of(stack), "Job spotproof/spotproof-smoke")[capacity] is ending


def _unwrapped_example(tmp_path: Path) -> Path:
    documents = list(yaml.safe_load_all(GANG.read_text()))
    container = documents[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert is_wrapped(container["command"])
    container["command"] = container["command"][4:]  # torchrun as the container's process
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return path


def test_torchrun_reclaimed_by_karpenters_delete_spends_the_gangs_restarts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _unwrapped_example(tmp_path)
    code, out, _ = run_cli(capsys, "check", str(path), "--stack", "eks-dev")
    assert code == 1
    assert (
        "[reclaim-counted] JobSet spotproof/llm-pretrain/workers on EKS spot (Karpenter) "
        "(gpu-spot) the reclaim deletes the pod without a DisruptionTarget condition and "
        "trainer exits 1, which fails its Job with BackoffLimitExceeded and restarts the "
        "JobSet against maxRestarts 3: after 3 reclaims the run fails; fix: start torchrun "
        "through spotproof's launch script"
    ) in out


def test_torchrun_reclaimed_by_the_kubelet_is_told_apart_by_its_condition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "check", str(_unwrapped_example(tmp_path)), "--stack", "gke-dev")
    assert (code, "reclaim-counted" in out) == (0, False), out


def test_a_one_pod_job_under_torchrun_spends_its_backoff_limit_on_each_reclaim() -> None:
    plan = plan_of("eks-dev")
    job = plan.recording.one(JOB, "eks-dev-smoke-job").inputs
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["torchrun", "--nproc-per-node=1", *container["command"]]
    [violation] = [
        v for v in check(plan.spec, plan.recording).violations if v.policy == "reclaim-counted"
    ]
    assert violation.resource == "eks-dev-smoke-job"
    assert (
        "trainer exits 1, which no podFailurePolicy rule ignores: each reclaim spends one of "
        "backoffLimit 3"
    ) in violation.message


def test_a_gang_whose_child_job_does_not_fail_on_exit_143_counts_each_reclaim() -> None:
    plan = plan_of("eks-dev")
    job = plan.recording.one(JOB, "eks-dev-smoke-job").inputs
    # The smoke Job's policy without its exit-143 rule: only DisruptionTarget is ignored.
    job["spec"]["podFailurePolicy"]["rules"].pop()
    [violation] = [
        v for v in check(plan.spec, plan.recording).violations if v.policy == "reclaim-counted"
    ]
    assert "trainer exits 143, which no podFailurePolicy rule ignores" in violation.message


# --- the controllers' matching, one rule at a time ----------------------------------------

POLICY = {
    "rules": [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2]},
        },
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]},
        },
    ]
}


@pytest.mark.parametrize(
    ("pod", "index"),
    [
        (Failure(condition=True, exits={"trainer": 1}), 1),
        (Failure(condition=False, exits={"trainer": 143}), 2),
        (Failure(condition=False, exits={"trainer": 2}), 0),
        (Failure(condition=True, exits={}), 1),  # the node vanished: only the condition
        (Failure(condition=False, exits={"trainer": 1}), None),  # a crash
        (Failure(condition=False, exits={"sidecar": 143}), None),  # not the named container
    ],
)
def test_the_first_matching_rule_decides_as_the_job_controller_does(
    pod: Failure, index: int | None
) -> None:
    found = matching_rule(POLICY, pod)
    assert (found[0] if found else None) == index


def test_a_not_in_rule_never_matches_exit_0() -> None:
    rule = {"rules": [{"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [5]}}]}
    assert matching_rule(rule, Failure(condition=False, exits={"c": 0})) is None
    assert matching_rule(rule, Failure(condition=False, exits={"c": 1})) is not None


def test_the_jobset_restarts_free_only_on_the_reclaim_rule() -> None:
    failure_policy = {
        "maxRestarts": 3,
        "rules": [
            {
                "name": "BadConfigFailsAtOnce",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [
                    r"^Container trainer for pod \S+ failed with exit code 2 matching FailJob rule "
                    r"at index 0$"
                ],
            },
            {
                "name": "Free",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
            },
        ],
    }
    bad = "Container trainer for pod ns/p failed with exit code 2 matching FailJob rule at index 0"
    reclaim = (
        "Container trainer for pod ns/p failed with exit code 143 matching FailJob rule at index 2"
    )
    assert jobset_action(failure_policy, "PodFailurePolicy", bad) == "FailJobSet"
    assert (
        jobset_action(failure_policy, "PodFailurePolicy", reclaim)
        == "RestartJobSetAndIgnoreMaxRestarts"
    )
    assert jobset_action(failure_policy, "BackoffLimitExceeded", "") == "RestartJobSet"


def test_an_aks_node_auto_provisioning_reclaim_is_unannounced_and_no_problem_of_the_stack() -> None:
    plan = plan_of("aks-prod")
    [outcome] = [o for o in plan.outcomes if o.workload.label == "Job spotproof/spotproof-smoke"]
    [path] = [p for p in outcome.paths if p.capacity == "AKS spot (Karpenter)"]
    assert (path.sigterm_at, path.usable_grace, path.ending) == (None, 0, Ending.NODE_GONE)
    assert path.unannounced and path.problems == []
    assert "nothing drains the node" in path.line()
    assert plan.exit_code == 0  # nothing in the stack could change it


def test_the_plan_says_why_an_aks_node_auto_provisioning_reclaim_reaches_no_pod() -> None:
    plan = plan_of("aks-prod")
    [warning] = [w for w in plan.warnings if w.key == "spotproof:autoProvisionedPools"]
    assert warning.message.startswith(
        "Job spotproof/spotproof-smoke on AKS spot (Karpenter): nothing drains a node "
        "auto-provisioning spot VM on its Preempt event"
    )
    assert "karpenter-provider-azure v1.13.0" in warning.message
    assert "NodeRepair feature gate, off by default" in warning.message
    assert warning.message.endswith("losing at most CHECKPOINT_INTERVAL=100 steps")


def test_an_unannounced_capacity_gets_no_graceful_reclaims_in_the_interval_model() -> None:
    """Every reclaim loses the work since the last save: about a third of the interval a
    30 s final save would have allowed."""
    [advice] = plan_of("aks-prod").intervals
    assert (advice.grace_seconds, advice.final_save_fits, advice.graceful_share) == (
        None,
        False,
        0.0,
    )
    assert advice.recommended_seconds is not None
    assert 2.0 * 60 < advice.recommended_seconds < 2.4 * 60


def test_agent_pools_and_eks_reclaims_are_announced() -> None:
    for stack in ("aks-dev", "eks-dev"):
        assert all(not p.unannounced for o in plan_of(stack).outcomes for p in o.paths)
        assert not [w for w in plan_of(stack).warnings if "nothing drains" in w.message]
