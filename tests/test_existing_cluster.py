"""A program of spotproof's components on a cluster spotproof did not create: planned
without any of the fleet's settings, its pools and buckets judged, the cluster's system
pool taken from ``spotproof:existingCluster`` where the stack describes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from spotproof.plan import run_plan
from tests.support import run_cli

pytestmark = pytest.mark.processes

PROGRAM = """
import pulumi
import pulumi_gcp as gcp
from spotproof.gke import CheckpointBucket, CheckpointBucketArgs, GpuNodePools, GpuNodePoolsArgs
from spotproof.kube.workload import ServiceAccountRef
from spotproof.fleet import BucketSpec
from spotproof.fleet.gke_pools import GkeGpuPool

infra = pulumi.StackReference("acme/gke-platform/prod")
POOLS = [
    GkeGpuPool(
        name="l4-spot",
        machine_type="g2-standard-8",
        gpu_type="nvidia-l4",
        gpus_per_node=GPUS,
        max_nodes=4,
        zones=ZONES,
        shutdown_seconds=SHUTDOWN,
    )
]
GpuNodePools(
    "gpu",
    GpuNodePoolsArgs(
        cluster_name=infra.get_output("cluster_name"),
        project="acme-ml-prod",
        location=LOCATION,
        node_service_account=infra.get_output("node_service_account"),
        pools=POOLS,
    ),
)
bucket = CheckpointBucket(
    "ckpt",
    CheckpointBucketArgs(
        bucket=BucketSpec(name="acme-ml-prod-ckpt", location="us-central1", noncurrent_days=3),
        project="acme-ml-prod",
        trainer=ServiceAccountRef("ml", "trainer"),
    ),
)
EXTRA
"""
UNTAINTED_SPOT_POOL = """
gcp.container.NodePool(
    "raw-spot",
    cluster=infra.get_output("cluster_name"),
    location="us-central1",
    node_config={"machine_type": "g2-standard-8", "spot": True},
)
"""
PROVIDERS = {"gcp:project": "acme-ml-prod", "gcp:region": "us-central1"}


def _program(
    *,
    location: str = '"us-central1"',
    zones: tuple[str, ...] = ("us-central1-a", "us-central1-b"),
    gpus: int = 1,
    shutdown: int = 30,
    extra: str = "",
) -> str:
    return (
        PROGRAM.replace("LOCATION", location)
        .replace("ZONES", repr(zones))
        .replace("GPUS", str(gpus))
        .replace("SHUTDOWN", str(shutdown))
        .replace("EXTRA", extra)
    )


def _project(make_project: Callable[..., Path], program: str, **config: object) -> Path:
    return make_project({**PROVIDERS, **config}, stack="prod", program=program)


def test_components_on_an_existing_cluster_plan_without_any_fleet_setting(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(make_project, _program())
    code, out, err = run_cli(capsys, "plan", "--stack", "prod", "--project-dir", str(root))
    assert (code, err) == (0, ""), out
    assert "Pod kube-system/reference-add-on: fits existing-system-pool" in out
    assert "Protection: as each component says" in out
    result = run_plan("prod", root)
    assert result.spec is None and result.facts.cloud == "gke"
    assert [p.name for p in result.pools] == ["existing-system-pool", "l4-spot"]


def test_each_bucket_is_replayed_with_its_own_components_settings(
    make_project: Callable[..., Path],
) -> None:
    result = run_plan("prod", _project(make_project, _program()))
    [component] = result.recording.of_type("spotproof:gke:CheckpointBucket")
    assert component.inputs == {"prefix": "checkpoints", "noncurrentDays": 3}
    assert [v for v in result.violations if v.policy == "bucket-lifecycle"] == []


def test_a_spot_pool_the_clusters_add_ons_could_land_on_is_found(
    make_project: Callable[..., Path],
) -> None:
    result = run_plan("prod", _project(make_project, _program(extra=UNTAINTED_SPOT_POOL)))
    assert any(
        v.policy == "system-off-spot" and "raw-spot" in v.message for v in result.violations
    ), [v.message for v in result.violations]


def test_the_system_pool_the_stack_describes_is_the_one_add_ons_must_fit(
    make_project: Callable[..., Path],
) -> None:
    system = {
        "systemPool": {
            "taints": ["CriticalAddonsOnly=true:NoSchedule"],
            "labels": {"cloud.google.com/gke-nodepool": "default-pool"},
        },
        "kubernetesVersion": "1.32",
    }
    result = run_plan(
        "prod", _project(make_project, _program(), **{"spotproof:existingCluster": system})
    )
    [pool] = [p for p in result.pools if p.name == "existing-system-pool"]
    assert [t.key for t in pool.shape.taints] == ["CriticalAddonsOnly"]
    assert pool.shape.labels["cloud.google.com/gke-nodepool"] == "default-pool"
    assert result.facts.kubernetes_version == "1.32"
    assert result.violations == []


@pytest.mark.parametrize(
    ("program", "config", "error"),
    [
        (
            _program(zones=("europe-west4-a",)),
            {},
            "spotproof plan: GpuNodePoolsArgs.pools[0].zones[0] = 'europe-west4-a': not a zone "
            "of the cluster's region us-central1; allowed: us-central1-a, us-central1-b, ...\n",
        ),
        (
            _program(gpus=3),
            {},
            "spotproof plan: GkeGpuPool.gpus_per_node = 3: g2-standard-8 carries exactly 1 "
            "GPU(s), not 3; allowed: 1\n",
        ),
        (
            _program(),
            {"spotproof:existingCluster": {"systemPol": {}}},
            "spotproof plan: spotproof:existingCluster.systemPol = {}: unknown field (did you "
            "mean systemPool?); allowed: cloud, gpusAdvertised, kubernetesVersion, "
            "monitoring, reclaimModel, systemPool\n",
        ),
        (
            _program(),
            {"spotproof:existingCluster": {"systemPool": {"taints": ["spot"]}}},
            "spotproof plan: spotproof:existingCluster.systemPool.taints[0] = 'spot': not a "
            "taint; allowed: key[=value]:Effect (NoSchedule, PreferNoSchedule, NoExecute), e.g. "
            "CriticalAddonsOnly=true:NoSchedule\n",
        ),
    ],
    ids=["zones-outside-the-region", "gpus-the-machine-lacks", "misspelt-fact", "bad-taint"],
)
def test_a_mistake_in_the_program_or_its_facts_is_one_line_and_exit_2(
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    program: str,
    config: dict[str, object],
    error: str,
) -> None:
    root = _project(make_project, program, **config)
    code, out, err = run_cli(capsys, "plan", "--stack", "prod", "--project-dir", str(root))
    assert (code, out, err) == (2, "", error)


def test_manifests_are_checked_against_components_on_an_existing_cluster(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = _project(make_project, _program())
    job = (Path(__file__).parents[1] / "examples" / "finetune-job.yaml").read_text()
    manifest = tmp_path / "job.yaml"
    manifest.write_text(job.replace("priorityClassName: spotproof-spot-batch", ""))
    code, out, _ = run_cli(
        capsys, "check", str(manifest), "--stack", str(root / "stacks" / "Pulumi.prod.yaml")
    )
    assert "against stack prod" in out
    assert "[scheduling-fit]" not in out, out  # it fits the program's l4-spot pool
    assert code in (0, 1)


AKS_PROGRAM = """
import pulumi
from spotproof.aks import GpuAgentPools, GpuAgentPoolsArgs
from spotproof.fleet.aks import GpuAgentPool

infra = pulumi.StackReference("acme/aks-platform/prod")
GpuAgentPools("gpu", GpuAgentPoolsArgs(
    cluster_name=infra.get_output("cluster_name"),
    resource_group_name=infra.get_output("resource_group_name"),
    pools=(GpuAgentPool(name="spota100", vm_size="Standard_NC24ads_A100_v4", max_nodes=4),)))
"""


@pytest.mark.parametrize(("advertised", "found"), [(False, True), (True, False)])
def test_aks_gpu_pools_need_a_device_plugin_unless_the_cluster_says_it_has_one(
    make_project: Callable[..., Path], advertised: bool, found: bool
) -> None:
    config = {
        "azure-native:location": "westeurope",
        "spotproof:existingCluster": {"gpusAdvertised": advertised},
    }
    result = run_plan("prod", make_project(config, stack="prod", program=AKS_PROGRAM))
    assert result.facts.cloud == "aks"
    assert any(v.policy == "gpu-advertised" for v in result.violations) is found


def test_another_stacks_outputs_read_offline_as_placeholders_named_after_them(
    make_project: Callable[..., Path],
) -> None:
    result = run_plan("prod", _project(make_project, _program()))
    [pool] = result.recording.of_type("gcp:container/nodePool:NodePool")
    assert pool.inputs["cluster"] == "cluster-name"
    assert pool.inputs["nodeConfig"]["serviceAccount"] == "node-service-account"


def test_existing_cluster_facts_beside_a_fleets_settings_are_refused(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(
        make_project,
        _program(),
        **{"spotproof:existingCluster": {}, "spotproof:disposable": True},
    )
    code, out, err = run_cli(capsys, "plan", "--stack", "prod", "--project-dir", str(root))
    assert (code, out) == (2, "")
    assert err.startswith(
        "spotproof plan: spotproof:existingCluster = '{}': describes a cluster spotproof did "
        "not create, so it cannot stand beside a fleet's settings (spotproof:disposable)"
    )


# --- a TrainingJob in a team's namespace ------------------------------------------------

TRAINING_JOB = """
import pulumi_kubernetes as k8s
from spotproof.kube import ClusterBaseline, ClusterBaselineArgs, TargetPlacement, Trainer
from spotproof.kube import TrainingJob, TrainingJobArgs, WorkloadIdentity, ServiceAccountRef

on_cluster = pulumi.ResourceOptions(
    provider=k8s.Provider("existing", kubeconfig=infra.get_output("kubeconfig"))
)
ClusterBaseline("priorities", ClusterBaselineArgs(namespace=None), opts=on_cluster)
TrainingJob(
    "llm",
    TrainingJobArgs(
        trainer=Trainer(image="ghcr.io/acme/llm-train:1.4", command=("python", "train.py"), gpus=1),
        placement=PLACEMENT,
        identity=IDENTITY,
        namespace="ml",
        checkpoint_url="CHECKPOINTS",
        nodes=NODES,
    ),
    opts=on_cluster,
)
"""
EKS_PROGRAM = """
import pulumi
import pulumi_kubernetes as k8s
from spotproof.eks import CheckpointBucket, CheckpointBucketArgs, Karpenter, KarpenterArgs
from spotproof.fleet import BucketSpec
from spotproof.fleet.eks import KarpenterPool, KarpenterSpec
from spotproof.kube.workload import ServiceAccountRef

infra = pulumi.StackReference("acme/eks-platform/prod")
Karpenter("karpenter", KarpenterArgs(
    settings=KarpenterSpec(version="1.6.3"), cluster_name=infra.get_output("cluster_name"),
    region="us-west-2",
    provider=k8s.Provider("karpenter", kubeconfig=infra.get_output("kubeconfig")),
    pools=[KarpenterPool(name="gpu-spot", instance_families=("g6", "g5"), gpu_limit=16)]))
bucket = CheckpointBucket("ckpt", CheckpointBucketArgs(
    bucket=BucketSpec(name="acme-research-ckpt", location="us-west-2"), region="us-west-2",
    cluster_name=infra.get_output("cluster_name"), trainer=ServiceAccountRef("ml", "trainer")))
"""
TEAM_IDENTITY = 'WorkloadIdentity(ServiceAccountRef("ml", "trainer"), "trainer-role")'


def _training(placement: str, identity: str = TEAM_IDENTITY, nodes: int = 1) -> str:
    return (
        TRAINING_JOB.replace("PLACEMENT", placement)
        .replace("IDENTITY", identity)
        .replace("NODES", str(nodes))
    )


@pytest.mark.parametrize(
    ("config", "program", "path"),
    [
        (
            {**PROVIDERS, "spotproof:existingCluster": {"kubernetesVersion": "1.35"}},
            _program(
                shutdown=120,
                extra=_training(
                    'TargetPlacement.on_existing_cluster("gke", pools=POOLS)',
                    identity="bucket.identity",
                ).replace("CHECKPOINTS", "gs://acme-ml-prod-ckpt/checkpoints/llm"),
            ),
            "SIGTERM at 0 s with 105 s grace (declared 105 s)",
        ),
        (
            {**PROVIDERS},
            _program(
                extra=_training(
                    'TargetPlacement.on_existing_cluster("gke")', "bucket.identity", nodes=2
                ).replace("CHECKPOINTS", "gs://acme-ml-prod-ckpt/checkpoints/llm"),
            ),
            "SIGTERM at 0 s with 15 s grace (declared 15 s)",
        ),
        (
            {"aws:region": "us-west-2"},
            EKS_PROGRAM
            + _training('TargetPlacement.on_existing_cluster("eks")', "bucket.identity").replace(
                "CHECKPOINTS", "s3://acme-research-ckpt/checkpoints/llm"
            ),
            "SIGTERM at 30 s with 90 s grace (declared 90 s)",
        ),
        (
            {
                "azure-native:location": "westeurope",
                "spotproof:existingCluster": {"gpusAdvertised": True},
            },
            AKS_PROGRAM
            + _training('TargetPlacement.on_existing_cluster("aks")').replace(
                "CHECKPOINTS", "az://checkpoints/llm"
            ),
            "SIGTERM at 0 s with 30 s grace (declared 30 s)",
        ),
    ],
    ids=["gke-120s-shutdown", "gke-gang", "eks", "aks"],
)
def test_a_training_job_in_a_team_namespace_plans_with_its_clouds_defaults(
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    config: dict[str, object],
    program: str,
    path: str,
) -> None:
    root = make_project(config, stack="prod", program=program)
    code, out, _ = run_cli(capsys, "plan", "--stack", "prod", "--project-dir", str(root))
    assert code == 0, out
    assert "0 violations" in out
    assert path in out, out
    # ml is not declared: trusted to exist, and everything the job renders goes there.
    rendered = {
        (r.type.rsplit(":", 1)[-1], r.inputs["metadata"].get("namespace"))
        for r in run_plan("prod", root).recording.kubernetes_objects()
        if r.name.startswith("llm-") or r.type.endswith(":Namespace")
    }
    kinds = {kind for kind, _ in rendered}
    assert {namespace for _, namespace in rendered} == {"ml"}
    assert "NetworkPolicy" in kinds and kinds & {"Job", "JobSet"}, rendered


def test_a_team_namespace_without_the_jobs_own_policy_would_be_open(
    make_project: Callable[..., Path],
) -> None:
    # What the job's NetworkPolicy prevents: a hand-made placement on the same cluster.
    program = _program(
        extra=_training(
            "TargetPlacement(PoolClass.SPOT_GPU, max_grace_seconds=30)", "bucket.identity"
        ).replace("CHECKPOINTS", "gs://acme-ml-prod-ckpt/checkpoints/llm")
    )
    program = program.replace(
        "import pulumi_kubernetes as k8s",
        "import pulumi_kubernetes as k8s\nfrom spotproof.fleet import PoolClass",
    )
    result = run_plan("prod", _project(make_project, program))
    assert sorted({v.policy for v in result.violations}) == [
        "namespace-isolated",
        "preemption-path",
    ]
