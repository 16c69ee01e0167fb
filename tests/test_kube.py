"""The cloud-neutral Kubernetes layer: the smoke-test Job, PriorityClasses, the PDB, the
service account, as rendered for a real stack. (Settings that each stand alone for one
behaviour are rows of test_rendered_settings.)"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pulumi
import pytest

from spotproof import scheduling
from spotproof.fleet import PoolClass, SmokeTest
from spotproof.kube import ClusterBaseline, ClusterBaselineArgs, SmokeTestJob, SmokeTestJobArgs
from spotproof.kube.smoke import run_prefix
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, WorkloadIdentity
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.recording.recorder import record
from spotproof.runtime import exit_codes
from tests.support import stack_config

JOB = "kubernetes:batch/v1:Job"


def _job(plan: PlanResult) -> dict:
    return plan.recording.one(JOB, f"{plan.spec.stack}-smoke-job").inputs


def _pod(plan: PlanResult) -> dict:
    return _job(plan)["spec"]["template"]["spec"]


def test_preemptions_do_not_use_up_the_backoff_limit(gke_dev: PlanResult) -> None:
    spec = _job(gke_dev)["spec"]
    assert spec["backoffLimit"] == 3
    assert spec["podFailurePolicy"]["rules"] == [
        {
            "action": "FailJob",
            "onExitCodes": {
                "containerName": "trainer",
                "operator": "In",
                "values": [exit_codes.BAD_CONFIG],
            },
        },
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "Ignore",
            "onExitCodes": {
                "containerName": "trainer",
                "operator": "In",
                "values": [exit_codes.PREEMPTED],
            },
        },
    ]


def test_trainer_gets_its_whole_configuration_from_the_environment(gke_dev: PlanResult) -> None:
    container = _pod(gke_dev)["containers"][0]
    assert container["command"] == ["python", "-m", "spotproof.smoke.train"]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "CHECKPOINT_URL": "gs://spotproof-dev-gke-dev-checkpoints/checkpoints/smoke/"
        + run_prefix(gke_dev.spec.smoke_test),  # type: ignore[arg-type]
        "CHECKPOINT_INTERVAL": "50",
        "TOTAL_STEPS": "2000",
        "SEED": "0",
        "MODEL_MB": "64",
        "GRACE_SECONDS": "15",
    }


def test_where_the_stack_is_monitored_the_trainer_serves_metrics_on_a_named_port(
    gke_prod: PlanResult,
) -> None:
    container = _pod(gke_prod)["containers"][0]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464}]
    assert {"name": "METRICS_PORT", "value": "9464"} in container["env"]


def test_where_the_stack_is_not_monitored_the_trainer_serves_no_metrics(
    gke_dev: PlanResult,
) -> None:
    container = _pod(gke_dev)["containers"][0]
    assert "ports" not in container
    assert all(item["name"] != "METRICS_PORT" for item in container["env"])


def test_the_smoke_pod_is_labelled_with_the_pool_class_it_is_aimed_at(
    gke_dev: PlanResult,
) -> None:
    labels = _job(gke_dev)["spec"]["template"]["metadata"]["labels"]
    assert labels["spotproof.dev/target-class"] == "spot-gpu"


def test_each_smoke_run_writes_under_its_own_prefix_that_a_changed_setting_renews() -> None:
    smoke = SmokeTest()
    assert run_prefix(smoke) == run_prefix(SmokeTest())
    assert re.fullmatch(r"run-[0-9a-f]{12}", run_prefix(smoke))
    changed = [
        replace(smoke, seed=1),
        replace(smoke, model_mb=65),
        replace(smoke, total_steps=2001),
        replace(smoke, image=smoke.image + "-next"),
    ]
    assert len({run_prefix(smoke), *map(run_prefix, changed)}) == 1 + len(changed)


def test_job_tolerates_exactly_the_taints_of_its_target_pools(gke_dev: PlanResult) -> None:
    pod = _pod(gke_dev)
    spot_pool_taints = {
        (t["key"], t["value"])
        for r in gke_dev.recording.of_type("gcp:container/nodePool:NodePool")
        if r.inputs["nodeConfig"].get("spot")
        for t in r.inputs["nodeConfig"]["taints"]
    }
    assert {(t["key"], t["value"]) for t in pod["tolerations"]} == spot_pool_taints
    assert all(t["effect"] == "NoSchedule" for t in pod["tolerations"])


def test_job_selects_the_spot_class_and_its_gpu_models(gke_dev: PlanResult) -> None:
    pod = _pod(gke_dev)
    assert pod["nodeSelector"] == {"spotproof.dev/pool-class": "spot-gpu"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {
            "key": "cloud.google.com/gke-accelerator",
            "operator": "In",
            "values": ["nvidia-l4", "nvidia-tesla-t4"],
        }
    ]
    assert pod["priorityClassName"] == "spotproof-spot-batch"


def test_job_passes_the_restricted_pod_security_standard(gke_dev: PlanResult) -> None:
    pod = _pod(gke_dev)
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    namespace = gke_dev.recording.one("kubernetes:core/v1:Namespace", "gke-dev-baseline-namespace")
    assert (
        namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    )


def test_job_is_replaced_rather_than_patched(gke_dev: PlanResult) -> None:
    job = gke_dev.recording.one(JOB, "gke-dev-smoke-job")
    assert job.replace_on_changes == ("spec",)


def test_spot_batch_priority_is_negative_and_preempts_only_what_is_below_it(
    gke_dev: PlanResult,
) -> None:
    found = gke_dev.recording.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    classes = {r.inputs["metadata"]["name"]: r.inputs for r in found}
    assert classes["spotproof-spot-batch"]["value"] < 0
    # Below it sit only warm spares' placeholders, which a replaced rank must evict.
    assert classes["spotproof-spot-batch"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert classes["spotproof-spot-batch"]["value"] > scheduling.WARM_SPARE_PRIORITY.value
    # value and preemptionPolicy are immutable: a change replaces the class.
    assert all(set(r.replace_on_changes) == {"value", "preemptionPolicy"} for r in found)
    assert classes["spotproof-platform"]["value"] > classes["spotproof-training"]["value"] > 0
    assert not any(c["globalDefault"] for c in classes.values())


def test_disruption_budget_guards_the_trainer_pods(gke_dev: PlanResult) -> None:
    pdb = gke_dev.recording.one(
        "kubernetes:policy/v1:PodDisruptionBudget", "gke-dev-smoke-pdb"
    ).inputs
    template_labels = _job(gke_dev)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= template_labels.items()


def test_service_account_is_bound_to_the_trainer_identity(gke_dev: PlanResult) -> None:
    account = gke_dev.recording.one("kubernetes:core/v1:ServiceAccount", "gke-dev-trainer").inputs
    assert account["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "gke-dev-trainer@spotproof-dev.iam.gserviceaccount.com"
    }
    assert _pod(gke_dev)["serviceAccountName"] == account["metadata"]["name"]


@pytest.mark.parametrize("stack", ["gke-dev", "eks-dev", "aks-dev"])
def test_the_trainer_account_exists_without_a_smoke_test(
    make_project: Callable[..., Path], stack: str
) -> None:
    config = {**stack_config(stack), "spotproof:smokeTest": {"enabled": False}}
    result = run_plan(stack, make_project(config, stack=stack))
    assert not result.recording.of_type("kubernetes:batch/v1:Job")
    account = result.recording.one("kubernetes:core/v1:ServiceAccount", f"{stack}-trainer")
    assert account.inputs["metadata"]["name"] == "spotproof-trainer"
    assert result.exit_code == 0, result.violations


def test_smoke_job_on_flex_start_selects_flex_nodes_and_runs_at_training_priority() -> None:
    def program() -> None:
        provider = pulumi.ProviderResource("kubernetes", "k8s", {"kubeconfig": "{}"})
        SmokeTestJob(
            "smoke",
            SmokeTestJobArgs(
                smoke=SmokeTest(target=PoolClass.FLEX_START),
                checkpoint_url="gs://b/ckpt",
                placement=TargetPlacement(PoolClass.FLEX_START, ["nvidia-h100-80gb"]),
                identity=WorkloadIdentity(ServiceAccountRef("ml", "trainer"), "trainer@p"),
            ),
            opts=pulumi.ResourceOptions(provider=provider),
        )

    pod = (
        record(program, stack="s", project="p")
        .one(JOB, "smoke-job")
        .inputs["spec"]["template"]["spec"]
    )
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
    }
    assert pod["priorityClassName"] == scheduling.TRAINING_PRIORITY.name
    assert {t["value"] for t in pod["tolerations"]} == {"flex-start", "present"}


def test_baseline_creates_namespace_and_every_priority_class() -> None:
    def program() -> None:
        ClusterBaseline("base", ClusterBaselineArgs(namespace="ml", pod_security="baseline"))

    recording = record(program, stack="s", project="p")
    namespace = recording.one("kubernetes:core/v1:Namespace", "base-namespace").inputs
    assert namespace["metadata"]["name"] == "ml"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    names = {
        r.inputs["metadata"]["name"]
        for r in recording.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    }
    assert names == {p.name for p in scheduling.PRIORITY_CLASSES}
