"""GKE's longer spot shutdown: a pool's ``shutdownSeconds: 120`` gives the trainer 105 s.

gke-prod asks for it on every spot pool (and GKE 1.35); each test reads what that renders
or what a one-key change to a stack does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from spotproof.plan import PlanResult, run_plan
from spotproof.plan.recording.recorder import Resource
from spotproof.policy import gke_shutdown
from tests.support import refuses_changed_stack, set_key, stack_config

POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
JOB = "kubernetes:batch/v1:Job"


def _smoke_pod(plan: PlanResult) -> dict:
    job = next(r for r in plan.recording.resources if r.type == JOB)
    return job.inputs["spec"]["template"]["spec"]


def test_spot_pools_render_the_kubelet_shutdown_and_on_demand_ones_do_not(
    gke_prod: PlanResult,
) -> None:
    kubelet = {
        r.name: (r.inputs["nodeConfig"].get("kubeletConfig"))
        for r in gke_prod.recording.of_type(POOL)
    }
    whole = {"shutdownGracePeriodSeconds": 120, "shutdownGracePeriodCriticalPodsSeconds": 15}
    assert kubelet["gke-prod-h100-spot"] == whole
    assert kubelet["gke-prod-l4x4-spot"] == whole
    assert kubelet["gke-prod-a100-ondemand"] is None
    assert kubelet["gke-prod-system"] is None


def test_the_smoke_job_declares_the_105_seconds_left_to_non_system_pods(
    gke_prod: PlanResult,
) -> None:
    pod = _smoke_pod(gke_prod)
    env = {v["name"]: v["value"] for v in pod["containers"][0]["env"]}
    assert pod["terminationGracePeriodSeconds"] == 105
    assert env["GRACE_SECONDS"] == "105"


def test_the_preemption_path_sends_sigterm_at_once_with_105_seconds_and_the_node_goes_at_120(
    gke_prod: PlanResult,
) -> None:
    (path,) = next(o for o in gke_prod.outcomes if o.workload.kind == "Job").paths
    assert (path.sigterm_at, path.grace_seconds, path.notice_seconds) == (0, 105, 120)
    assert path.problems == []


def test_the_cluster_asks_for_the_first_control_plane_that_takes_the_longer_shutdown(
    gke_prod: PlanResult,
) -> None:
    assert gke_prod.recording.one(CLUSTER, "gke-prod").inputs["minMasterVersion"] == (
        "1.35.0-gke.1171000"
    )


def test_one_spot_pool_at_the_default_shortens_every_spot_workload_to_15_seconds(
    make_project: Callable[..., Path],
) -> None:
    config = copy.deepcopy(stack_config("gke-prod"))
    del config["spotproof:gpuPools"][3]["shutdownSeconds"]  # h100-spot back to 30 s
    plan = run_plan("gke-test", make_project(config))
    assert _smoke_pod(plan)["terminationGracePeriodSeconds"] == 15
    (path,) = next(o for o in plan.outcomes if o.workload.kind == "Job").paths
    assert (path.grace_seconds, path.notice_seconds) == (15, 30)
    assert plan.violations == []


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            set_key("spotproof:gpuPools.0.shutdownSeconds", 60),
            "gpuPools[0].shutdownSeconds = 60: not a shutdown period GKE offers; allowed: "
            "30 (the default) or 120",
        ),
        (
            set_key("spotproof:gpuPools.4.shutdownSeconds", 120),
            "gpuPools[4].shutdownSeconds = 120: only spot nodes are reclaimed",
        ),
        (
            set_key("spotproof:kubernetesVersion", "1.34"),
            "gpuPools[0].shutdownSeconds = 120: needs GKE 1.35 or later (control plane "
            "1.35.0-gke.1171000); spotproof:kubernetesVersion is 1.34",
        ),
        (
            set_key("spotproof:smokeTest.gracePeriodSeconds", 106),
            "smokeTest.gracePeriodSeconds = 106: out of range; allowed: a whole number >= 1 "
            "and <= 105",
        ),
    ],
    ids=["a period GKE does not offer", "on-demand pool", "GKE 1.34", "grace above 105"],
)
def test_a_shutdown_or_grace_gke_cannot_honour_is_refused_in_one_line(
    change: Callable[[dict], None],
    said: str,
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert said in refuses_changed_stack(capsys, make_project, "gke-prod", change)


def _pool(kubelet: dict, *, spot: bool = True) -> dict:
    return {"nodeConfig": {"spot": spot, "kubeletConfig": kubelet}}


@pytest.mark.parametrize(
    ("pool", "said"),
    [
        (_pool({"shutdownGracePeriodSeconds": 0}), "turns graceful shutdown off"),
        (_pool({"shutdownGracePeriodSeconds": 90}), "not a period GKE takes"),
        (_pool({"shutdownGracePeriodSeconds": 120}, spot=False), "Spot VMs only"),
        (
            _pool({"shutdownGracePeriodSeconds": 30, "shutdownGracePeriodCriticalPodsSeconds": 45}),
            "not within the whole period of 30 s",
        ),
        (_pool({"shutdownGracePeriodCriticalPodsSeconds": 15}), "without shutdownGracePeriod"),
    ],
    ids=["off", "90 s", "on-demand", "critical above the whole", "critical alone"],
)
def test_a_hand_written_pool_gke_would_refuse_or_that_skips_sigterm_is_flagged(
    pool: dict, said: str
) -> None:
    (message,) = gke_shutdown.spot_shutdown(pool)
    assert said in message


def test_a_default_or_longer_spot_shutdown_passes_as_written() -> None:
    assert list(gke_shutdown.spot_shutdown(_pool({"shutdownGracePeriodSeconds": 30}))) == []
    whole = {"shutdownGracePeriodSeconds": 120, "shutdownGracePeriodCriticalPodsSeconds": 15}
    assert list(gke_shutdown.spot_shutdown(_pool(whole))) == []


@pytest.mark.parametrize(
    ("version", "flagged"),
    [("1.35", True), ("1.34", True), ("1.35.0-gke.1171000", False), ("1.36", False)],
)
def test_a_longer_shutdown_needs_a_control_plane_that_takes_it(version: str, flagged: bool) -> None:
    resources = [
        Resource(POOL, "spot", "urn:pool", None, True, _pool({"shutdownGracePeriodSeconds": 120})),
        Resource(CLUSTER, "cluster", "urn:cluster", None, True, {"minMasterVersion": version}),
    ]
    found = list(gke_shutdown.long_shutdown_version(resources))
    assert bool(found) is flagged
    if flagged:
        assert "1.35.0-gke.1171000" in found[0][1] and "spot" in found[0][1]
