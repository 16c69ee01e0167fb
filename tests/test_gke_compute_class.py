"""GKE ComputeClass fallback: gke-prod's spot-gpu workloads try each spot pool, then the
on-demand pool, through ``spotproof-spot-gpu``; what it renders, what the plan says of it,
and what is refused."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof import scheduling
from spotproof.fleet import PoolClass, SpecError
from spotproof.fleet.gke_compute_class import ComputeClassSpec
from spotproof.plan import PlanResult, check, run_plan
from spotproof.plan.schemas import compute_class
from tests.support import plan_refuses_config, refuses_changed_stack, set_key, stack_config

CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
POOL = "gcp:container/nodePool:NodePool"
JOB = "kubernetes:batch/v1:Job"
NAME = "spotproof-spot-gpu"
CLASS_TAINT = {"key": "cloud.google.com/compute-class", "value": NAME, "effect": "NO_SCHEDULE"}


def _class_spec(plan: PlanResult) -> dict[str, Any]:
    (resource,) = plan.recording.of_type(CLASS)
    return resource.inputs["spec"]


def _smoke(plan: PlanResult) -> Any:
    return next(r for r in plan.recording.resources if r.type == JOB)


def _ladder(plan: PlanResult) -> tuple[str, ...]:
    return next(o for o in plan.outcomes if o.workload.kind == "Job").ladder


def test_the_class_tries_each_spot_pool_in_stack_order_then_the_on_demand_pool(
    gke_prod: PlanResult,
) -> None:
    assert _class_spec(gke_prod)["priorities"] == [
        {"nodepools": ["l4x4-spot"]},
        {"nodepools": ["a100-spot"]},
        {"nodepools": ["a100x2-spot"]},
        {"nodepools": ["h100-spot"]},
        {"nodepools": ["a100-ondemand"]},
    ]


def test_the_class_creates_no_pools_of_its_own_and_moves_workloads_back_to_spot(
    gke_prod: PlanResult,
) -> None:
    spec = _class_spec(gke_prod)
    assert spec["nodePoolAutoCreation"] == {"enabled": False}
    assert spec["whenUnsatisfiable"] == "DoNotScaleUp"
    assert spec["activeMigration"] == {"optimizeRulePriority": True}


def test_the_class_pools_carry_its_label_and_taint_and_no_other_pool_does(
    gke_prod: PlanResult,
) -> None:
    marked = {
        r.name: (
            r.inputs["nodeConfig"]["labels"].get("cloud.google.com/compute-class"),
            CLASS_TAINT in r.inputs["nodeConfig"]["taints"],
        )
        for r in gke_prod.recording.of_type(POOL)
    }
    for pool in ("l4x4-spot", "a100-spot", "a100x2-spot", "h100-spot", "a100-ondemand"):
        assert marked[f"gke-prod-{pool}"] == (NAME, True)
    assert marked["gke-prod-h100-flex"] == (None, False)
    assert marked["gke-prod-system"] == (None, False)


def test_the_smoke_job_selects_the_class_alone_and_tolerates_every_rung(
    gke_prod: PlanResult,
) -> None:
    pod = _smoke(gke_prod).inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/compute-class": NAME}
    assert "affinity" not in pod
    tolerated = {(t["key"], t.get("value")) for t in pod["tolerations"]}
    rungs = [PoolClass.SPOT_GPU, PoolClass.ON_DEMAND_GPU]
    needed = {(t.key, t.value) for c in rungs for t in scheduling.contract(c).taints}
    assert {("cloud.google.com/compute-class", NAME), *needed} <= tolerated


def test_the_smoke_job_is_created_after_its_class(gke_prod: PlanResult) -> None:
    (cls,) = gke_prod.recording.of_type(CLASS)
    (smoke,) = gke_prod.recording.of_type("spotproof:kube:SmokeTestJob")
    assert cls.urn in (smoke.dependencies or ())


def test_the_plan_gives_each_rung_its_priority_scale_up_and_reclaim(
    gke_prod: PlanResult,
) -> None:
    ladder = _ladder(gke_prod)
    assert ladder[0] == (
        "priority 1: l4x4-spot (scales); a reclaim (GKE spot) sends SIGTERM at 0 s with 105 s grace"
    )
    assert ladder[4] == "priority 5: a100-ondemand (scales); on-demand: never reclaimed"
    assert ladder[5].startswith("a pending pod gets a node from priority 1, the next priority only")


def test_what_holds_a_trainer_on_a_lower_rung_is_named_and_called_an_assumption(
    gke_prod: PlanResult,
) -> None:
    said = _ladder(gke_prod)[-1]
    assert "safe-to-evict: false and PodDisruptionBudget spotproof-smoke hold back" in said
    assert "(GKE does not say: an assumption) this pod stays where it runs" in said


AIMED_AT_THE_FALLBACK = """
import pulumi
from spotproof.fleet import PoolClass, fleet_from_config
from spotproof.program import hybrid_cluster, stack_config

cluster = hybrid_cluster(fleet_from_config(pulumi.get_stack(), stack_config()))
cluster.placement(PoolClass.ON_DEMAND_GPU)  # for a TrainingJob of the user's own
"""


def test_a_training_job_aimed_at_a_fallback_class_is_refused_in_one_line(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-prod"), program=AIMED_AT_THE_FALLBACK)
    said = plan_refuses_config(capsys, root, "gke-test")
    assert "HybridCluster.placement = 'on-demand-gpu': its pools are compute class " in said
    assert "allowed: spot-gpu, which tries them after its own pools" in said


def test_when_no_spot_pool_can_scale_a_pending_pod_gets_the_on_demand_rung(
    gke_prod: PlanResult,
) -> None:
    recording = copy.deepcopy(gke_prod.recording)
    for pool in recording.of_type(POOL):
        if pool.name.endswith("-spot"):
            pool.inputs["autoscaling"]["maxNodeCount"] = 0
    replanned = check(gke_prod.spec, recording)
    (outcome,) = [o for o in replanned.outcomes if o.workload.kind == "Job"]
    assert outcome.ladder[0].startswith("priority 1: l4x4-spot (does not scale")
    assert outcome.ladder[5].startswith("a pending pod gets a node from priority 5")


def test_without_active_migration_the_pod_stays_where_it_runs(
    make_project: Callable[..., Path],
) -> None:
    config = copy.deepcopy(stack_config("gke-prod"))
    config["spotproof:computeClasses"][0]["activeMigration"] = False
    plan = run_plan("gke-test", make_project(config))
    assert _class_spec(plan)["activeMigration"] == {"optimizeRulePriority": False}
    assert _ladder(plan)[-1].endswith("(activeMigration off)")


def test_a_class_naming_a_pool_without_its_taint_is_a_violation(gke_prod: PlanResult) -> None:
    recording = copy.deepcopy(gke_prod.recording)
    pool = recording.one(POOL, "gke-prod-a100-spot")
    pool.inputs["nodeConfig"]["taints"].remove(CLASS_TAINT)
    found = [
        v for v in check(gke_prod.spec, recording).violations if v.policy == "compute-class-pools"
    ]
    assert [v.message for v in found] == [
        f"ComputeClass {NAME} names node pool a100-spot, but GKE uses a pool it did not create "
        f"only with the class's taint cloud.google.com/compute-class={NAME}:NoSchedule"
    ]


def test_a_pod_pairing_the_class_with_a_spot_selector_is_a_violation(
    gke_prod: PlanResult,
) -> None:
    recording = copy.deepcopy(gke_prod.recording)
    job = next(r for r in recording.resources if r.type == JOB)
    job.inputs["spec"]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-spot"] = "true"
    found = [
        v for v in check(gke_prod.spec, recording).violations if v.policy == "compute-class-pools"
    ]
    assert len(found) == 1 and "which GKE refuses" in found[0].message


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            set_key("spotproof:computeClasses.0.fallback", ["flex-start"]),
            "computeClasses[0].fallback = 'flex-start': h100-flex gets nodes only through queued",
        ),
        (
            set_key("spotproof:computeClasses.0.fallback", ["spot-gpu"]),
            "computeClasses[0].fallback[0] = 'spot-gpu': unknown value; allowed: on-demand-gpu, "
            "flex-start",
        ),
        (
            set_key("spotproof:smokeTest.target", "on-demand-gpu"),
            "smokeTest.target = 'on-demand-gpu': its pools are compute class spotproof-spot-gpu's "
            "fallback",
        ),
        (
            set_key(
                "spotproof:computeClasses",
                [{"target": "spot-gpu"}, {"target": "flex-start", "fallback": "on-demand-gpu"}],
            ),
            "computeClasses[1].target = 'flex-start': h100-flex gets nodes only through queued",
        ),
        (
            set_key("spotproof:computeClasses.0.priority", 1),
            "computeClasses[0].priority = 1: unknown field",
        ),
    ],
    ids=[
        "queued fallback",
        "spot as fallback",
        "workload aimed at the fallback",
        "queued target",
        "misspelt",
    ],
)
def test_a_compute_class_gke_could_not_serve_is_refused_in_one_line(
    change: Callable[[dict], None],
    said: str,
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert said in refuses_changed_stack(capsys, make_project, "gke-prod", change)


def _with(rule: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": "x"},
        "spec": {"priorities": [rule], **spec},
    }


@pytest.mark.parametrize(
    ("obj", "said"),
    [
        (_with({"nodepools": ["a"], "spot": True}), "nodepools cannot be set along with spot"),
        (_with({"machineFamily": "g2", "machineType": "g2-standard-8"}), "cannot be set together"),
        (_with({"spot": True, "flexStart": {"enabled": True}}), "flex-start cannot be combined"),
        (
            _with({"nodeSystemConfig": {"kubeletConfig": {"shutdownGracePeriodSeconds": 120}}}),
            "shutdownGracePeriodSeconds: spot rules only",
        ),
        (_with({"spot": True}, whenUnsatisfiable="Maybe"), "'Maybe' not allowed"),
        (_with({"spot": True}, surprise=1), "spec.surprise: unknown field"),
        (_with({"spot": True}, activeMigration={}), "optimizeRulePriority: required"),
        (
            _with(
                {
                    "spot": True,
                    "nodeSystemConfig": {"kubeletConfig": {"shutdownGracePeriodSeconds": 90}},
                }
            ),
            "shutdownGracePeriodSeconds: 90 not allowed (allowed: 0, 30, 120)",
        ),
        (
            _with(
                {
                    "spot": True,
                    "nodeSystemConfig": {
                        "kubeletConfig": {
                            "shutdownGracePeriodSeconds": 30,
                            "shutdownGracePeriodCriticalPodsSeconds": 45,
                        }
                    },
                }
            ),
            "CriticalPodsSeconds: needs shutdownGracePeriodSeconds and may not exceed it",
        ),
    ],
    ids=[
        "nodepools and more",
        "family and type",
        "spot flex-start",
        "shutdown on-demand",
        "whenUnsatisfiable",
        "unknown field",
        "migration without its flag",
        "shutdown not offered",
        "critical share above the whole",
    ],
)
def test_the_schema_refuses_what_the_computeclass_crd_refuses(obj: dict, said: str) -> None:
    assert any(said in error for error in compute_class.errors(obj)), compute_class.errors(obj)


def test_the_rendered_class_passes_the_schema(gke_prod: PlanResult) -> None:
    (resource,) = gke_prod.recording.of_type(CLASS)
    assert (
        compute_class.errors(
            {**resource.inputs, "apiVersion": "cloud.google.com/v1", "kind": "ComputeClass"}
        )
        == []
    )


def test_a_class_built_in_a_program_over_pools_it_cannot_use_is_refused_in_one_line() -> None:
    from spotproof.fleet.gke_pools import GkeGpuPool  # noqa: PLC0415
    from spotproof.gke import ComputeClassArgs  # noqa: PLC0415

    spot = GkeGpuPool(
        name="l4-spot",
        machine_type="g2-standard-8",
        gpu_type="nvidia-l4",
        gpus_per_node=1,
        max_nodes=2,
        zones=("us-central1-a",),
    )
    with pytest.raises(SpecError) as raised:
        ComputeClassArgs(ComputeClassSpec(), pools=[spot], provider=None)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "ComputeClassArgs.spec.fallback = 'on-demand-gpu': no pool of that class in this "
        "stack; allowed: a class with pools"
    )
