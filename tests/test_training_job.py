"""``spotproof.kube.TrainingJob``: a user's own trainer as a Job that survives reclaims, built
alone under mocks and planned in a user's program on GKE and EKS."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest

from spotproof.catalog import Cloud
from spotproof.catalog.node_endpoints import IDENTITY_ENDPOINTS
from spotproof.fleet import Capacity, PoolClass, Taint
from spotproof.fleet.gke_pools import GkeGpuPool
from spotproof.kube import TrainingJob, TrainingJobArgs
from spotproof.kube.training import Launcher, Trainer
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, WorkloadIdentity
from spotproof.plan import run_plan
from spotproof.runtime.launcher import LAUNCH_SCRIPT
from spotproof.scheduling import placement
from spotproof.scheduling.work_matrix import Work, choose
from spotproof.testing import Recording, record
from tests.support import run_cli, section, stack_config

pytestmark = pytest.mark.processes

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
from spotproof.fleet import PoolClass, fleet_from_config

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

    _assert_planned(capsys, stack, root, "Job spotproof/llm-finetune", path)


def _assert_planned(
    capsys: pytest.CaptureFixture[str], stack: str, root: Path, label: str, path: str
) -> None:
    """The plan passes and reports where ``label`` fits, what scales up for it, and its
    preemption ``path``."""
    code, out, _ = run_cli(capsys, "plan", "--stack", stack, "--project-dir", str(root))
    assert code == 0, out
    lines = [line for line in out.splitlines() if label in line]
    assert any(": fits " in line for line in lines), out
    assert any(": gets nodes from " in line for line in lines), out
    assert any(path in line for line in lines), out


# --- several nodes: one JobSet gang ------------------------------------------------------

JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def _gang(**options: Any) -> dict[str, Any]:
    [jobset] = _job(nodes=4, **options).of_type(JOBSET)
    return jobset.inputs["spec"]


def _gang_pod(spec: dict[str, Any]) -> dict[str, Any]:
    [workers] = spec["replicatedJobs"]
    return workers["template"]["spec"]["template"]["spec"]


def test_a_gang_is_one_jobset_of_indexed_pods_that_fail_their_job_on_a_reclaim() -> None:
    [workers] = _gang()["replicatedJobs"]
    job = workers["template"]["spec"]
    assert (workers["replicas"], job["completionMode"]) == (1, "Indexed")
    assert job["completions"] == job["parallelism"] == 4
    assert job["backoffLimit"] == 0
    assert {
        "action": "FailJob",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    } in job["podFailurePolicy"]["rules"]
    assert all(rule["action"] == "FailJob" for rule in job["podFailurePolicy"]["rules"])


def test_a_reclaim_restarts_the_gang_without_spending_its_restarts_but_crashes_do() -> None:
    policy = _gang(backoff_limit=5)["failurePolicy"]
    assert policy["maxRestarts"] == 5
    assert policy["rules"][1] == {
        "name": "ReclaimRestartsFree",
        "action": "RestartJobSetAndIgnoreMaxRestarts",
        "onJobFailureReasons": ["PodFailurePolicy"],
    }


# The Job controller's failure message, in the format of
# https://kubernetes.io/docs/tasks/job/pod-failure-policy/ ("Container main for pod
# default/job-pod-failure-policy-failjob-8ckj8 failed with exit code 42 matching FailJob
# rule at index 0").
BAD_CONFIG_FAILURE = (
    "Container trainer for pod spotproof/llm-finetune-workers-0-2-x7k2p failed with exit "
    "code 2 matching FailJob rule at index 0"
)


def test_a_configuration_error_fails_the_whole_gang_at_once() -> None:
    spec = _gang()
    [first, *_] = spec["failurePolicy"]["rules"]
    assert (first["action"], first["onJobFailureReasons"]) == ("FailJobSet", ["PodFailurePolicy"])
    [pattern] = first["onJobFailureMessagePatterns"]
    assert re.fullmatch(pattern, BAD_CONFIG_FAILURE)
    child = spec["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"][0]
    assert child["onExitCodes"]["values"] == [2] and child["action"] == "FailJob"


@pytest.mark.parametrize(
    "message",
    [
        BAD_CONFIG_FAILURE.replace("exit code 2", "exit code 143").replace("index 0", "index 2"),
        "Pod spotproof/llm-finetune-workers-0-2-x7k2p has condition DisruptionTarget matching "
        "FailJob rule at index 1",
        BAD_CONFIG_FAILURE.replace("exit code 2 ", "exit code 21 "),
    ],
)
def test_reclaims_never_match_the_configuration_error_rule(message: str) -> None:
    [pattern] = _gang()["failurePolicy"]["rules"][0]["onJobFailureMessagePatterns"]
    assert not re.search(pattern, message)


def test_torchrun_meets_on_rank_zeros_pod_with_a_fixed_gang_and_no_restarts_of_its_own() -> None:
    spec = _gang()
    assert spec["network"] == {"enableDNSHostnames": True}
    container = _gang_pod(spec)["containers"][0]
    command = container["command"]
    # Through the launch script, so a rank stopped by SIGTERM exits 143, not torchrun's 1.
    assert command[:4] == ["/bin/sh", "-c", LAUNCH_SCRIPT, "spotproof-launch"]
    # The static rendezvous: rank 0's pod hosts it; no guess from its names against DNS.
    # spotproof's torchrun: torchrun's agent, whose worker is forked warm (one torch import).
    assert command[4:12] == [
        "spotproof-torchrun",
        "--nnodes=4",
        "--nproc-per-node=1",
        "--node-rank=$(NODE_RANK)",
        "--master-addr=llm-finetune-workers-0-0.llm-finetune",
        "--master-port=29500",
        "--max-restarts=0",
        "--no-python",
    ]
    assert command[12:] == list(TRAINER.command)
    assert {
        "name": "NODE_RANK",
        "valueFrom": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
    } in container["env"]


def test_without_a_launcher_each_pod_gets_its_rank_and_rank_zeros_address() -> None:
    plain = dataclasses.replace(TRAINER, launcher=Launcher.NONE)
    [jobset] = (
        record(
            lambda: TrainingJob(
                "sweep",
                TrainingJobArgs(
                    trainer=plain,
                    placement=SPOT_ON_GKE,
                    identity=IDENTITY,
                    checkpoint_url="gs://acme-ckpt/checkpoints/sweep",
                    nodes=2,
                ),
            ),
            stack="research",
            project="ml",
        )
    ).of_type(JOBSET)
    container = _gang_pod(jobset.inputs["spec"])["containers"][0]
    assert container["command"] == list(TRAINER.command)
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["WORLD_SIZE"] == "2"
    assert env["MASTER_ADDR"] == "sweep-workers-0-0.sweep"
    assert env["RANK"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }


def test_the_gangs_budget_covers_every_pod_by_the_label_jobset_puts_on_them() -> None:
    [budget] = _job(nodes=4).of_type(PDB)
    assert budget.inputs["spec"] == {
        "minAvailable": 4,
        "selector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm-finetune"}},
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodes": 0}, "nodes = 0; allowed: 1 or more"),
        (
            {"nodes": 16, "job_name": "a-very-long-training-run-name-for-the-research-team"},
            "too long a name for a gang of 16",
        ),
    ],
)
def test_bad_gangs_are_refused_in_one_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        _job(**options)
    assert "\n" not in str(raised.value)


GANG_PROGRAM = USER_PROGRAM.replace(
    'checkpoint_url=cluster.bucket.url.apply(lambda url: url + "/checkpoints/llm"),',
    'checkpoint_url=cluster.bucket.url.apply(lambda url: url + "/checkpoints/llm"),\n'
    "        nodes=NODES,\n        controllers=cluster.controllers,",
)


@pytest.mark.parametrize(
    ("stack", "path"),
    [("gke-dev", "SIGTERM at 0 s with 15 s grace"), ("eks-dev", "SIGTERM at 30 s with 90 s grace")],
)
def test_a_four_node_gang_plans_with_scale_up_and_preemption_lines(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str], stack: str, path: str
) -> None:
    program = GANG_PROGRAM.replace("NODES", "4")
    root = make_project(stack_config(stack), stack=stack, program=program)
    _assert_planned(capsys, stack, root, "JobSet spotproof/llm-finetune/workers", path)


def test_a_gang_larger_than_its_pools_can_hold_at_once_fails_the_plan(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    program = GANG_PROGRAM.replace("NODES", "12")
    root = make_project(stack_config("eks-dev"), stack="eks-dev", program=program)
    code, out, _ = run_cli(capsys, "plan", "--stack", "eks-dev", "--project-dir", str(root))
    assert code == 1
    assert (
        "[gang-capacity] llm-finetune-jobset: JobSet spotproof/llm-finetune/workers needs 12 "
        "pods of 1 GPU(s) at once, but the pools it gets nodes from hold at most 10 "
        "(gpu-on-demand: 2, gpu-spot: 8)"
    ) in out


def test_the_documented_training_examples_plan_as_written(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/training-job.md's TrainingJob of one node and its gang of four, on a cluster
    spotproof built, as one program."""
    blocks = [
        block
        for heading in ("On a cluster spotproof built", "On several nodes: a JobSet gang")
        for block in re.findall(
            r"^```python\n(.*?)^```$", section("docs/training-job.md", heading), re.M | re.S
        )
    ]
    assert len(blocks) == 2
    program = "import pulumi\n" + "\n".join(blocks)
    root = make_project(stack_config("gke-dev"), stack="gke-dev", program=program)
    code, out, _ = run_cli(capsys, "plan", "--stack", "gke-dev", "--project-dir", str(root))
    assert code == 0, out
    assert "Job spotproof/llm-finetune: gets nodes from " in out
    assert "JobSet spotproof/llm-pretrain/workers: gets nodes from " in out


# --- the decision matrix -----------------------------------------------------------------


def test_the_matrix_sends_interruptible_work_to_spot_and_long_work_to_flex_start() -> None:
    offered = [PoolClass.SPOT_GPU, PoolClass.FLEX_START, PoolClass.ON_DEMAND_GPU]
    assert choose(Work.SWEEP, offered) is PoolClass.SPOT_GPU
    assert choose(Work.MULTI_DAY_TRAINING, offered) is PoolClass.FLEX_START
    assert choose(Work.SERVING, offered) is PoolClass.ON_DEMAND_GPU


def test_long_work_falls_back_to_on_demand_where_the_cloud_has_no_flex_start() -> None:
    offered = [PoolClass.SPOT_GPU, PoolClass.ON_DEMAND_GPU]
    assert choose(Work.RL_FINE_TUNING, offered) is PoolClass.ON_DEMAND_GPU
    with pytest.raises(ValueError, match="serving belongs on on-demand-gpu capacity; the"):
        choose(Work.SERVING, [PoolClass.SPOT_GPU])


def test_the_plan_shows_what_the_matrix_advises_next_to_the_target(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    program = GANG_PROGRAM.replace("NODES", "2").replace(
        "        nodes=2,", "        nodes=2,\n        work=Work.MULTI_DAY_TRAINING,"
    )
    program = "from spotproof.scheduling.work_matrix import Work\n" + program
    root = make_project(stack_config("gke-dev"), stack="gke-dev", program=program)
    code, out, _ = run_cli(capsys, "plan", "--stack", "gke-dev", "--project-dir", str(root))
    assert code == 0, out
    assert (
        "  JobSet spotproof/llm-finetune/workers: multi-day-training belongs on flex-start or "
        "on-demand-gpu, but it targets spot-gpu"
    ) in out


# --- on a cluster you already have -------------------------------------------------------

NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


@pytest.mark.parametrize(
    ("cloud", "grace", "tolerated", "budget"),
    [
        ("gke", 15, None, True),
        ("eks", 90, None, True),
        ("aks", 30, "kubernetes.azure.com/scalesetpriority", False),
    ],
)
def test_a_placement_on_an_existing_cluster_takes_the_clouds_spot_facts(
    cloud: str, grace: int, tolerated: str | None, budget: bool
) -> None:
    placement = TargetPlacement.on_existing_cluster(cloud)
    assert (placement.target, placement.max_grace_seconds) == (PoolClass.SPOT_GPU, grace)
    recording = _job(placement)
    pod = _pod(recording)
    assert pod["terminationGracePeriodSeconds"] == grace
    if tolerated:
        assert tolerated in {t["key"] for t in pod["tolerations"]}
    assert bool(recording.of_type(PDB)) is budget


def _l4(name: str, **options: Any) -> GkeGpuPool:
    return GkeGpuPool(
        name=name,
        machine_type="g2-standard-8",
        gpu_type="nvidia-l4",
        gpus_per_node=1,
        max_nodes=2,
        zones=("us-central1-a",),
        **options,
    )


def test_the_pools_a_program_adds_set_the_grace_where_they_leave_more() -> None:
    long = _l4("l4-long", shutdown_seconds=120)
    default = _l4("l4-spot")
    on_demand = _l4("l4-od", capacity=Capacity.ON_DEMAND)
    placement = TargetPlacement.on_existing_cluster(Cloud.GKE, pools=[long, on_demand])
    assert placement.max_grace_seconds == 105
    # Work may land on any pool of its class: the shortest grace of them.
    assert TargetPlacement.on_existing_cluster("gke", pools=[long, default]).max_grace_seconds == 15
    ondemand = TargetPlacement.on_existing_cluster(
        "gke", PoolClass.ON_DEMAND_GPU, pools=[on_demand]
    )
    assert ondemand.max_grace_seconds is None


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: TargetPlacement(PoolClass.SPOT_GPU),
            ValueError,
            "TargetPlacement(PoolClass.SPOT_GPU): max_grace_seconds = None, but spot nodes are "
            "reclaimed",
        ),
        (
            lambda: TargetPlacement("spot"),
            TypeError,
            "TargetPlacement.target = 'spot': not a pool class; allowed: system, spot-gpu",
        ),
        (
            lambda: TargetPlacement.on_existing_cluster("gcp"),
            ValueError,
            "TargetPlacement.on_existing_cluster: cloud = 'gcp'; allowed: gke, eks, aks",
        ),
        (
            lambda: TargetPlacement.on_existing_cluster("gke", PoolClass.SYSTEM),
            ValueError,
            "target = 'system'; allowed: spot-gpu, flex-start, on-demand-gpu",
        ),
        (
            lambda: TargetPlacement.on_existing_cluster("gke", accelerators="nvidia-l4"),
            TypeError,
            "accelerators = 'nvidia-l4'; allowed: a list, e.g. ['nvidia-l4']",
        ),
        (
            lambda: TargetPlacement.on_existing_cluster(
                "gke",
                pools=[_l4("od", capacity=Capacity.ON_DEMAND)],
            ),
            ValueError,
            "none of the pools is of class spot-gpu: od (on-demand-gpu); allowed: the pools "
            "that serve spot-gpu",
        ),
        (
            lambda: TargetPlacement.on_existing_cluster("gke", pools=["l4-spot"]),
            TypeError,
            "pools holds 'l4-spot'; allowed: the pool specs the program adds",
        ),
    ],
    ids=[
        "spot-without-grace",
        "not-a-class",
        "not-a-cloud",
        "system",
        "one-string",
        "no-pool-of-class",
        "a-name",
    ],
)
def test_a_wrong_placement_is_refused_in_one_line_naming_what_is_allowed(
    make: Callable[[], Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        make()
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "placement",
            placement(PoolClass.SPOT_GPU),
            "TrainingJobArgs.placement: a spotproof.scheduling.Placement (the pod fields a "
            "placement renders to, without the grace a reclaim leaves the pod), not a "
            "TargetPlacement; allowed: cluster.placement(PoolClass.SPOT_GPU) on a "
            "HybridCluster, TargetPlacement.on_existing_cluster(cloud) on a cluster you "
            "already have",
        ),
        (
            "identity",
            ServiceAccountRef("ml", "trainer"),
            "TrainingJobArgs.identity: a spotproof.kube.workload.ServiceAccountRef, not a "
            "WorkloadIdentity; allowed: ",
        ),
        ("trainer", "ghcr.io/acme/llm-train:1.4", "TrainingJobArgs.trainer: a builtins.str"),
        ("namespace", "ML_team", "TrainingJobArgs.namespace = 'ML_team'; allowed: a DNS label"),
    ],
)
def test_arguments_of_the_wrong_kind_are_refused_in_one_line(
    field: str, value: Any, message: str
) -> None:
    args = {
        "trainer": TRAINER,
        "placement": SPOT_ON_GKE,
        "identity": IDENTITY,
        "checkpoint_url": "gs://acme-ckpt/checkpoints/llm",
    }
    with pytest.raises((TypeError, ValueError)) as raised:
        TrainingJobArgs(**{**args, field: value})
    assert message in str(raised.value) and "\n" not in str(raised.value)


def _job_in(placement: TargetPlacement, **options: Any) -> Recording:
    def program() -> None:
        TrainingJob(
            "llm-finetune",
            TrainingJobArgs(
                trainer=TRAINER,
                identity=IDENTITY,
                placement=placement,
                checkpoint_url="gs://acme-ckpt/checkpoints/llm",
                **options,
            ),
        )

    return record(program, stack="research", project="ml")


def test_the_job_its_budget_and_its_policy_follow_the_identitys_namespace() -> None:
    recording = _job_in(TargetPlacement.on_existing_cluster("gke"), namespace="ml")
    placed = {
        kind: r.inputs["metadata"]["namespace"]
        for kind in (JOB, PDB, NETWORK_POLICY)
        for r in recording.of_type(kind)
    }
    assert placed == {JOB: "ml", PDB: "ml", NETWORK_POLICY: "ml"}


def test_a_namespace_other_than_the_identitys_is_refused_naming_both() -> None:
    with pytest.raises(ValueError) as raised:
        _job_in(SPOT_ON_GKE, namespace="vision")
    assert str(raised.value) == (
        "TrainingJob llm-finetune: namespace = 'vision', but its pods run as service account "
        "ml/trainer, and a pod runs only as a service account of its own namespace; allowed: "
        "'ml', or an identity in vision (on a cluster you already have: "
        "CheckpointBucketArgs(trainer=ServiceAccountRef('vision', ...)).identity)"
    )


def test_on_an_existing_cluster_the_job_isolates_its_own_pods_alone() -> None:
    [policy] = _job_in(TargetPlacement.on_existing_cluster("eks")).of_type(NETWORK_POLICY)
    own = {"app.kubernetes.io/name": "llm-finetune", "app.kubernetes.io/component": "trainer"}
    spec = policy.inputs["spec"]
    assert spec["podSelector"] == {"matchLabels": own}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    # Every port, and no port ranges: Cilium accepts endPort and ignores it.
    assert spec["ingress"] == [{"from": [{"podSelector": {"matchLabels": own}}]}]
    # The EKS Pod Identity agent, on the node's host network.
    [(cidr, port)] = IDENTITY_ENDPOINTS[Cloud.EKS]
    agent = {"to": [{"ipBlock": {"cidr": cidr}}], "ports": [{"protocol": "TCP", "port": port}]}
    assert agent in spec["egress"]


def test_a_hybrid_clusters_job_renders_no_policy_of_its_own() -> None:
    # Its namespace is the cluster's baseline's, isolated there.
    assert _job_in(SPOT_ON_GKE).of_type(NETWORK_POLICY) == []
