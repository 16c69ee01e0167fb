"""``spotproof.kube.TrainingJob``: a user's own trainer as a Job that survives reclaims, built
alone under mocks and planned in a user's program on GKE and EKS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest

from spotproof.kube import TrainingJob, TrainingJobArgs
from spotproof.kube.training import Trainer
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, WorkloadIdentity
from spotproof.plan import run_plan
from spotproof.spec import PoolClass, Taint
from spotproof.testing import Recording, record
from tests.support import run_cli, stack_config

JOB = "kubernetes:batch/v1:Job"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
TRAINER = Trainer(
    image="ghcr.io/acme/llm-train:1.4",
    command=("torchrun", "--nproc-per-node=1", "train.py"),
    env={"EPOCHS": "3"},
    cpu="8",
    memory="32Gi",
    gpus=1,
)
IDENTITY = WorkloadIdentity(
    ServiceAccountRef("ml", "trainer"),
    "trainer@acme.iam.gserviceaccount.com",
    {"iam.gke.io/gcp-service-account": "trainer@acme.iam.gserviceaccount.com"},
)
SPOT_ON_GKE = TargetPlacement(PoolClass.SPOT_GPU, ["nvidia-l4"], max_grace_seconds=15)


def _job(placement: TargetPlacement = SPOT_ON_GKE, **options: Any) -> Recording:
    def program() -> None:
        TrainingJob(
            "llm-finetune",
            TrainingJobArgs(
                trainer=TRAINER,
                placement=placement,
                identity=IDENTITY,
                checkpoint_url=pulumi.Output.from_input("gs://acme-ckpt/checkpoints/llm"),
                **options,
            ),
        )

    return record(program, stack="research", project="ml")


def _pod(recording: Recording) -> dict[str, Any]:
    [job] = recording.of_type(JOB)
    return job.inputs["spec"]["template"]["spec"]


def test_the_grace_period_defaults_to_what_the_preemption_path_honours() -> None:
    pod = _pod(_job())
    assert pod["terminationGracePeriodSeconds"] == 15
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env == {
        "EPOCHS": "3",
        "CHECKPOINT_URL": "gs://acme-ckpt/checkpoints/llm",
        "GRACE_SECONDS": "15",
    }


def test_preemptions_never_spend_the_backoff_limit() -> None:
    [job] = _job().of_type(JOB)
    rules = job.inputs["spec"]["podFailurePolicy"]["rules"]
    assert {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    } in rules
    assert any(
        r["action"] == "Ignore" and r.get("onExitCodes", {}).get("values") == [143] for r in rules
    )
    assert job.inputs["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_the_pod_tolerates_and_selects_its_target_and_declares_its_gpus() -> None:
    pod = _pod(_job())
    assert {
        "key": "spotproof.dev/capacity",
        "operator": "Equal",
        "value": "spot",
        "effect": "NoSchedule",
    } in pod["tolerations"]
    assert pod["nodeSelector"]["spotproof.dev/pool-class"] == "spot-gpu"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["containers"][0]["command"] == list(TRAINER.command)


def test_a_disruption_budget_guards_the_job_against_voluntary_evictions() -> None:
    [budget] = _job().of_type(PDB)
    assert budget.inputs["spec"] == {
        "minAvailable": 1,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "llm-finetune",
                "app.kubernetes.io/component": "trainer",
            }
        },
    }


def test_where_the_reclaim_drain_would_wait_on_a_budget_there_is_none() -> None:
    aks_spot = TargetPlacement(
        PoolClass.SPOT_GPU,
        reclaim_honours_budgets=True,
        platform_taints=[Taint("kubernetes.azure.com/scalesetpriority", "spot")],
        max_grace_seconds=30,
    )
    recording = _job(aks_spot)
    assert recording.of_type(PDB) == []
    tolerated = {t["key"] for t in _pod(recording)["tolerations"]}
    assert "kubernetes.azure.com/scalesetpriority" in tolerated


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"grace_period_seconds": 60}, "grace_period_seconds = 60 does not fit"),
        ({"job_name": "LLM_run"}, "allowed a DNS label"),
        ({"backoff_limit": -1}, "backoff_limit must be 0 or more"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        _job(**options)
    assert "\n" not in str(raised.value)


def test_training_never_targets_the_system_pool() -> None:
    with pytest.raises(ValueError, match="never targets the system pool"):
        _job(TargetPlacement(PoolClass.SYSTEM))


# --- planned in a user's program ---------------------------------------------------------

USER_PROGRAM = """
import pulumi
from spotproof.kube import TrainingJob, TrainingJobArgs
from spotproof.kube.training import Trainer

from spotproof.program import hybrid_cluster, stack_config
from spotproof.spec import PoolClass, fleet_from_config

spec = fleet_from_config(pulumi.get_stack(), stack_config())
cluster = hybrid_cluster(spec)
TrainingJob(
    "llm-finetune",
    TrainingJobArgs(
        trainer=Trainer(image="ghcr.io/acme/llm-train:1.4", command=("python", "train.py")),
        placement=cluster.placement(PoolClass.SPOT_GPU),
        identity=cluster.workload_identity,
        checkpoint_url=cluster.bucket.url.apply(lambda url: url + "/checkpoints/llm"),
    ),
    opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster.baseline]),
)
"""


@pytest.mark.parametrize(
    ("stack", "grace", "path"),
    [
        ("gke-dev", 15, "SIGTERM at 0 s with 15 s grace"),
        ("eks-dev", 90, "SIGTERM at 30 s with 90 s grace"),
    ],
)
def test_a_users_training_job_plans_with_scale_up_and_preemption_lines(
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    stack: str,
    grace: int,
    path: str,
) -> None:
    root = make_project(stack_config(stack), stack=stack, program=USER_PROGRAM)
    result = run_plan(stack, root)
    [job] = [r for r in result.recording.of_type(JOB) if r.name == "llm-finetune-job"]
    assert job.inputs["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace

    code, out, _ = run_cli(capsys, "plan", "--stack", stack, "--project-dir", str(root))
    assert code == 0, out
    lines = [line for line in out.splitlines() if "Job spotproof/llm-finetune" in line]
    assert any(": fits " in line for line in lines), out
    assert any(": gets nodes from " in line for line in lines), out
    assert any(path in line for line in lines), out
