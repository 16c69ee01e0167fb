"""The plan's checkpoint-interval advice (``plan.simulation.intervals``), through real plans:
every training workload of the dev stacks gets its interval, goodput and cost lines in
every format; the stack's ``spotproof:reclaimModel`` moves them; a configured interval far
from the recommendation warns, naming where it is set."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from spotproof.catalog import Cloud, profile
from spotproof.fleet.existing import existing_cluster
from spotproof.fleet.reclaims import ReclaimModel
from spotproof.kube import TrainingJob, TrainingJobArgs
from spotproof.kube.training import Trainer
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.reporting import checkpointing, formats
from spotproof.plan.simulation import intervals
from spotproof.plan.simulation.intervals import IntervalAdvice
from spotproof.scheduling import run_profile
from spotproof.testing import record
from tests.support import REPO, plan_of, plan_refuses_config, stack_config

DEV_STACKS = ("gke-dev", "eks-dev", "aks-dev")
SMOKE = "Job spotproof/spotproof-smoke"
HEADING = "Checkpoint interval (goodput model):"
LARGEST_STATE_MIB = {"gke-dev": 2250, "eks-dev": 13500, "aks-dev": 4500}
"""What each dev stack's grace period commits at 150 MiB/s: 15 s, 90 s and 30 s."""


@pytest.fixture(scope="module")
def dev_plans() -> dict[str, PlanResult]:
    return {stack: plan_of(stack) for stack in DEV_STACKS}


def _training(plan: PlanResult) -> set[str]:
    """The workloads of a plan that set ``CHECKPOINT_INTERVAL``."""
    return {
        o.workload.label
        for o in plan.outcomes
        if any(
            v.get("name") == "CHECKPOINT_INTERVAL"
            for c in o.workload.pod_spec.get("containers") or []
            for v in c.get("env") or []
        )
    }


def _advice(plan: PlanResult, label: str) -> IntervalAdvice:
    [found] = [a for a in plan.intervals if a.workload == label]
    return found


def _section(plan: PlanResult) -> list[str]:
    text = formats.text(plan).splitlines()
    return text[text.index(HEADING) + 1 :]


# --- the dev stacks -------------------------------------------------------------------------


@pytest.mark.parametrize("stack", DEV_STACKS)
def test_every_training_workload_of_a_dev_stack_is_advised_and_nothing_else(
    dev_plans: dict[str, PlanResult], stack: str
) -> None:
    plan = dev_plans[stack]
    assert {a.workload for a in plan.intervals} == _training(plan) == {SMOKE}


@pytest.mark.parametrize("stack", DEV_STACKS)
def test_the_text_report_prints_interval_goodput_cost_and_assumptions_per_workload(
    dev_plans: dict[str, PlanResult], stack: str
) -> None:
    first, interval, costs, assumes = _section(dev_plans[stack])[:4]
    assert first.startswith(f"  {SMOKE}: 64 MiB per pod on {stack[:3].upper()} spot")
    assert f"a final save commits up to {LARGEST_STATE_MIB[stack]} MiB" in first
    assert interval.startswith("    save every ")
    assert ": goodput 99." in interval
    assert "configured every 50 steps, step time unknown" in interval
    assert costs == "    per useful GPU-hour: spot 0.40x vs on-demand 1.00x the on-demand price"
    assert assumes.startswith("    assumes ")
    assert "reclaims/node-hour" in assumes and "10% unannounced" in assumes


@pytest.mark.parametrize("stack", DEV_STACKS)
def test_the_json_report_carries_the_numbers(dev_plans: dict[str, PlanResult], stack: str) -> None:
    report = formats.as_json(dev_plans[stack])["intervals"][SMOKE]
    assert 0.9 < report["goodput"] < 1
    assert report["recommended_seconds"] > 60
    assert report["spot_cost"] == pytest.approx(0.4 / report["goodput"])
    assert report["on_demand_cost"] == pytest.approx(1.0, abs=0.001)
    assert report["largest_state_mib"] == LARGEST_STATE_MIB[stack]
    assert report["final_save_fits"] is True and report["graceful_share"] == 0.9
    assert report["configured_steps"] == 50 and report["configured_seconds"] is None


@pytest.mark.parametrize("stack", DEV_STACKS)
def test_the_markdown_report_has_a_row_per_training_workload(
    dev_plans: dict[str, PlanResult], stack: str
) -> None:
    markdown = formats.markdown(dev_plans[stack])
    table = markdown.split("**Checkpoint interval** (goodput model)", 1)[1]
    [row] = [line for line in table.splitlines() if line.startswith(f"| {SMOKE} |")]
    assert "spot 0.40x vs on-demand 1.00x" in row
    assert "reclaims/node-hour" in row


@pytest.mark.parametrize(("stack", "cloud"), [("gke-dev", Cloud.GKE), ("eks-dev", Cloud.EKS)])
def test_without_a_stated_rate_the_clouds_published_rate_is_assumed_and_dated(
    dev_plans: dict[str, PlanResult], stack: str, cloud: Cloud
) -> None:
    advice = _advice(dev_plans[stack], SMOKE)
    published = profile(cloud).reclaims
    assert advice.reclaims_per_node_hour == published.per_node_hour
    assert advice.rate_source == f"{cloud.value.upper()}'s published rate, read 2026-11-26"


def test_published_rates_are_the_stated_shares_as_poisson_rates() -> None:
    assert profile(Cloud.GKE).reclaims.per_node_hour == pytest.approx(-math.log(0.85) / 24)
    assert profile(Cloud.EKS).reclaims.per_node_hour == pytest.approx(-math.log(0.80) / 720)
    assert profile(Cloud.AKS).reclaims.per_node_hour == pytest.approx(-math.log(0.95))


def test_the_stacks_reclaim_rate_replaces_the_published_one_and_moves_the_interval(
    dev_plans: dict[str, PlanResult],
) -> None:
    """aks-dev states 0.105 reclaims a node-hour (``stacks/Pulumi.aks-dev.yaml``): twice
    Azure's published 5% an hour, so the interval shrinks by about √2."""
    plan = dev_plans["aks-dev"]
    stated = _advice(plan, SMOKE)
    [published] = intervals.advise(plan.outcomes, Cloud.AKS, ReclaimModel())
    assert stated.reclaims_per_node_hour == 0.105
    assert stated.rate_source == "spotproof:reclaimModel.reclaimsPerNodeHour"
    assert published.recommended_seconds is not None and stated.recommended_seconds is not None
    ratio = published.recommended_seconds / stated.recommended_seconds
    assert ratio == pytest.approx(math.sqrt(0.105 / published.reclaims_per_node_hour), rel=0.02)
    assert stated.goodput is not None and published.goodput is not None
    assert stated.goodput < published.goodput


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        (
            {"unannouncedShare": 1.5},
            "unannouncedShare = 1.5: out of range; allowed: a number >= 0 and <= 1",
        ),
        (
            {"spotPriceRatio": "cheap"},
            "spotPriceRatio = 'cheap': not a number; allowed: a number >= 0.01",
        ),
        (
            {"reclaimsPerHour": 0.1},
            "reclaimsPerHour = 0.1: unknown field (did you mean reclaimsPerNodeHour?)",
        ),
    ],
)
def test_a_bad_reclaim_model_is_one_line_naming_the_key(
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    model: dict[str, Any],
    problem: str,
) -> None:
    root = make_project({**stack_config("gke-dev"), "spotproof:reclaimModel": model})
    err = plan_refuses_config(capsys, root, "gke-test")
    assert err.startswith(f"spotproof plan: spotproof:reclaimModel.{problem}")


def test_an_existing_clusters_stack_states_its_reclaim_model_beside_the_cluster() -> None:
    cluster = existing_cluster(
        {"spotproof:existingCluster": {"reclaimModel": {"reclaimsPerNodeHour": "0.02"}}}
    )
    assert cluster.reclaim_model == ReclaimModel(reclaims_per_node_hour=0.02)


# --- a program of its own: training jobs that state their state and step time ---------------

PROGRAM = """
import pulumi
from spotproof.fleet import PoolClass, fleet_from_config
from spotproof.kube import TrainingJob, TrainingJobArgs
from spotproof.kube import SmokeTestJob, SmokeTestJobArgs
from spotproof.kube.training import Trainer
from spotproof.program import hybrid_cluster, stack_config

spec = fleet_from_config(pulumi.get_stack(), stack_config())
cluster = hybrid_cluster(spec)
SmokeTestJob(
    "smoke",
    SmokeTestJobArgs(
        smoke=spec.smoke_test,
        checkpoint_url=cluster.bucket.url.apply(lambda url: f"{url}/checkpoints/smoke"),
        placement=cluster.placement(spec.smoke_test.target),
        identity=cluster.workload_identity,
    ),
    opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster.baseline]),
)
JOBS = {
    # name: (nodes, state MiB per pod, seconds per step, CHECKPOINT_INTERVAL)
    "solo": (1, 1024, 1.5, "1000"),
    "gang": (4, 1024, 1.5, "300"),
    "huge": (1, 8192, 2.0, "100"),
    "unsized": (1, None, None, "100"),
}
for name, (nodes, state, step, interval) in JOBS.items():
    TrainingJob(
        name,
        TrainingJobArgs(
            trainer=Trainer(
                image="ghcr.io/acme/llm-train:1.4",
                command=("python", "train.py"),
                env={"CHECKPOINT_INTERVAL": interval},
                state_mib=state,
                step_seconds=step,
            ),
            placement=cluster.placement(PoolClass.SPOT_GPU),
            identity=cluster.workload_identity,
            checkpoint_url=cluster.bucket.url.apply(lambda url, n=name: f"{url}/checkpoints/{n}"),
            nodes=nodes,
            controllers=cluster.controllers,
        ),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster.baseline]),
    )
"""
SOLO, GANG = "Job spotproof/solo", "JobSet spotproof/gang/workers"
HUGE, UNSIZED = "Job spotproof/huge", "Job spotproof/unsized"


@pytest.fixture(scope="module")
def own_plan(tmp_path_factory: pytest.TempPathFactory) -> PlanResult:
    """gke-dev with the program above, and a smoke Job of 2 GiB stepping every 0.5 s whose
    50-step interval (25 s) holds training up ~4% of the time."""
    root = tmp_path_factory.mktemp("intervals") / "project"
    (root / "infra").mkdir(parents=True)
    (root / "stacks").mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    (root / "infra" / "__main__.py").write_text(PROGRAM)
    config = stack_config("gke-dev")
    config["spotproof:smokeTest"] = {
        **config["spotproof:smokeTest"],
        "modelMb": 2048,
        "stepMilliseconds": 500,
    }
    (root / "stacks" / "Pulumi.gke-dev.yaml").write_text(yaml.safe_dump({"config": config}))
    return run_plan("gke-dev", root)


def test_a_training_job_that_states_its_step_time_gets_its_interval_in_steps(
    own_plan: PlanResult,
) -> None:
    advice = _advice(own_plan, SOLO)
    assert advice.recommended_seconds is not None and advice.recommended_steps is not None
    assert advice.recommended_steps == round(advice.recommended_seconds / 1.5)
    assert advice.configured_seconds == 1000 * 1.5
    [interval] = [
        line for line in _section(own_plan) if f"~{advice.recommended_steps} steps" in line
    ]
    assert "configured every 1000 steps (~25.0 min)" in interval


def test_a_configured_interval_far_from_the_recommendation_warns_naming_the_smoke_key(
    own_plan: PlanResult,
) -> None:
    advice = _advice(own_plan, SMOKE)
    steps = advice.recommended_steps
    [warning] = [w for w in own_plan.warnings if w.key == "spotproof:smokeTest.checkpointInterval"]
    assert f"{SMOKE} saves every 50 steps (~25 s)" in warning.message
    assert f"every {steps} steps (~{checkpointing.duration(advice.recommended_seconds)})" in (
        warning.message
    )
    assert warning.message.endswith(f"set spotproof:smokeTest.checkpointInterval: {steps}")


def test_no_interval_longer_than_the_run_is_advised(own_plan: PlanResult) -> None:
    """The smoke Job trains 2000 steps of 0.5 s; the model alone would save less often."""
    advice = _advice(own_plan, SMOKE)
    assert (advice.recommended_steps, advice.whole_run) == (2000, True)
    assert advice.recommended_seconds == 2000 * 0.5
    assert any("~2000 steps (the whole run)" in line for line in _section(own_plan))


def test_a_far_interval_of_a_users_job_warns_under_its_name_with_the_env_to_set(
    own_plan: PlanResult,
) -> None:
    advice = _advice(own_plan, HUGE)
    [warning] = [w for w in own_plan.warnings if w.key == HUGE]
    assert warning.message.endswith(f"set CHECKPOINT_INTERVAL={advice.recommended_steps}")


def test_an_interval_within_twice_the_recommendation_does_not_warn(own_plan: PlanResult) -> None:
    advice = _advice(own_plan, SOLO)
    assert advice.configured_seconds is not None and advice.recommended_seconds is not None
    assert 0.5 <= advice.configured_seconds / advice.recommended_seconds <= 2
    assert not [w for w in own_plan.warnings if w.key == SOLO]


def test_a_state_too_large_for_the_grace_gets_no_graceful_reclaims_and_says_so(
    own_plan: PlanResult,
) -> None:
    huge, solo = _advice(own_plan, HUGE), _advice(own_plan, SOLO)
    assert (huge.graceful_share, huge.final_save_fits) == (0.0, False)
    assert (solo.graceful_share, solo.final_save_fits) == (0.9, True)
    [first] = [line for line in _section(own_plan) if line.startswith(f"  {HUGE}:")]
    assert "8192 MiB per pod on GKE spot; grace 15 s, in which a final save commits up to" in first
    assert "this state's does not, so every reclaim loses the work since the last save" in first


def test_a_gangs_reclaims_are_its_pods_together(own_plan: PlanResult) -> None:
    """Four nodes, any of whose reclaims restarts the gang: four times the rate, so about
    half the interval of the same state on one node."""
    solo, gang = _advice(own_plan, SOLO), _advice(own_plan, GANG)
    assert gang.pods == 4
    assert solo.recommended_seconds is not None and gang.recommended_seconds is not None
    assert gang.recommended_seconds / solo.recommended_seconds == pytest.approx(0.5, rel=0.02)


def test_a_training_job_without_a_state_size_gets_one_line_naming_the_annotation(
    own_plan: PlanResult,
) -> None:
    section = _section(own_plan)
    at = section.index(
        f"  {UNSIZED}: its state on GKE spot; grace 15 s: a final save commits up to 2250 MiB"
    )
    assert section[at + 1] == (
        f"    no state size: set the pod annotation {run_profile.STATE_MIB} (MiB of checkpointed "
        "state per pod)"
    )
    assert section[at + 2].startswith("  ") and not section[at + 2].startswith("    ")


def test_a_training_job_renders_its_state_and_step_time_as_pod_annotations() -> None:
    [job] = record(_one_job(state_mib=512.0, step_seconds=0.25), stack="s", project="p").of_type(
        "kubernetes:batch/v1:Job"
    )
    annotations = job.inputs["spec"]["template"]["metadata"]["annotations"]
    assert annotations[run_profile.STATE_MIB] == "512"
    assert annotations[run_profile.STEP_SECONDS] == "0.25"


def test_a_training_job_refuses_a_state_size_that_is_not_above_zero() -> None:
    with pytest.raises(
        ValueError, match=r"^TrainingJob solo: state_mib = 0; allowed: a number above 0"
    ):
        record(_one_job(state_mib=0), stack="s", project="p")


def _one_job(**profile_fields: Any) -> Callable[[], None]:
    from spotproof.fleet import PoolClass  # noqa: PLC0415
    from spotproof.kube.workload import (  # noqa: PLC0415
        ServiceAccountRef,
        TargetPlacement,
        WorkloadIdentity,
    )

    def program() -> None:
        TrainingJob(
            "solo",
            TrainingJobArgs(
                trainer=Trainer(image="ghcr.io/acme/t:1", command=("python",), **profile_fields),
                placement=TargetPlacement(PoolClass.SPOT_GPU, ["nvidia-l4"], max_grace_seconds=15),
                identity=WorkloadIdentity(ServiceAccountRef("ml", "trainer"), "t@x.iam", {}),
                checkpoint_url=pulumi.Output.from_input("gs://b/c"),
            ),
        )

    return program
