"""Each component declared alone against a cluster the user already has, the way a user's
own unit test would build it: with ``spotproof.testing.record`` and names or outputs of
their own stacks instead of a spotproof ``HybridCluster``."""

from __future__ import annotations

import asyncio
import json

import pulumi

from spotproof.eks import CheckpointBucket as S3CheckpointBucket
from spotproof.eks import CheckpointBucketArgs as S3CheckpointBucketArgs
from spotproof.eks import Karpenter, KarpenterArgs
from spotproof.fleet import BucketSpec, Capacity
from spotproof.fleet.eks import KarpenterPool, KarpenterSpec
from spotproof.fleet.gke_pools import GkeGpuPool
from spotproof.gke import CheckpointBucket as GcsCheckpointBucket
from spotproof.gke import CheckpointBucketArgs as GcsCheckpointBucketArgs
from spotproof.gke import GpuNodePools, GpuNodePoolsArgs
from spotproof.kube import ClusterBaseline, ClusterBaselineArgs
from spotproof.kube.workload import ServiceAccountRef
from spotproof.testing import OfflineCloud, Recording, record

TRAINER = ServiceAccountRef("ml", "trainer")


def _existing_cluster_name() -> pulumi.Output[str]:
    """What a user passes from another stack: an output, not a string."""
    return pulumi.Output.from_input("research-cluster")


def _kubernetes() -> pulumi.ProviderResource:
    return pulumi.ProviderResource("kubernetes", "existing", {"kubeconfig": "{}"})


def _gke_pools() -> Recording:
    def program() -> None:
        GpuNodePools(
            "gpu",
            GpuNodePoolsArgs(
                cluster_name=_existing_cluster_name(),
                project="ml-infra",
                location="us-central1",
                node_service_account="nodes@ml-infra.iam.gserviceaccount.com",
                name_prefix="research",
                pools=[
                    GkeGpuPool(
                        name="l4-spot",
                        machine_type="g2-standard-8",
                        gpu_type="nvidia-l4",
                        gpus_per_node=1,
                        max_nodes=4,
                        zones=("us-central1-a", "us-central1-b"),
                    ),
                    GkeGpuPool(
                        name="l4-ondemand",
                        machine_type="g2-standard-8",
                        gpu_type="nvidia-l4",
                        gpus_per_node=1,
                        max_nodes=1,
                        zones=("us-central1-a",),
                        capacity=Capacity.ON_DEMAND,
                    ),
                ],
            ),
        )

    return record(program, stack="research", project="ml-infra")


def test_gke_gpu_pools_join_an_existing_cluster_by_name() -> None:
    recording = _gke_pools()
    pools = recording.of_type("gcp:container/nodePool:NodePool")
    assert sorted(p.inputs["name"] for p in pools) == ["l4-ondemand", "l4-spot"]
    assert {p.inputs["cluster"] for p in pools} == {"research-cluster"}
    assert {p.inputs["project"] for p in pools} == {"ml-infra"}


def test_gke_gpu_pools_alone_carry_the_contract_taints_for_their_class() -> None:
    configs = {
        p.inputs["name"]: p.inputs["nodeConfig"]
        for p in _gke_pools().of_type("gcp:container/nodePool:NodePool")
    }
    spot, on_demand = configs["l4-spot"], configs["l4-ondemand"]
    assert spot["spot"] is True and on_demand["spot"] is False
    assert {"key": "spotproof.dev/capacity", "value": "spot", "effect": "NO_SCHEDULE"} in spot[
        "taints"
    ]
    assert spot["labels"]["spotproof.dev/pool-class"] == "spot-gpu"
    assert on_demand["labels"]["spotproof.dev/pool-class"] == "on-demand-gpu"


def test_gcs_bucket_alone_binds_the_trainer_of_the_given_project() -> None:
    def program() -> None:
        bucket = GcsCheckpointBucket(
            "ckpt",
            GcsCheckpointBucketArgs(
                bucket=BucketSpec(name="research-ckpt", location="us-central1"),
                project=pulumi.Output.from_input("ml-infra"),
                trainer=TRAINER,
                name_prefix="research",
            ),
        )
        pulumi.export("annotations", bucket.identity.service_account_annotations)

    recording = record(program, stack="research", project="ml-infra")
    binding = recording.one(
        "gcp:serviceaccount/iAMMember:IAMMember", "ckpt-trainer-workload-identity"
    )
    assert binding.inputs["member"] == "serviceAccount:ml-infra.svc.id.goog[ml/trainer]"
    assert recording.outputs["annotations"] == {
        "iam.gke.io/gcp-service-account": "research-trainer@offline-project.iam.gserviceaccount.com"
    }


def _karpenter() -> Recording:
    def program() -> None:
        Karpenter(
            "karpenter",
            KarpenterArgs(
                settings=KarpenterSpec(version="1.6.3"),
                cluster_name=_existing_cluster_name(),
                region="us-west-2",
                provider=_kubernetes(),
                name_prefix="research",
                pools=[KarpenterPool(name="gpu-spot", instance_families=("g6",), gpu_limit=8)],
                cluster_security_group_id="sg-0123456789abcdef0",
                subnet_ids=["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
            ),
        )

    return record(
        program, stack="research", project="ml-infra", cloud=OfflineCloud(region="us-west-2")
    )


def test_karpenter_alone_tags_the_given_security_group_and_subnets_for_discovery() -> None:
    tags = _karpenter().of_type("aws:ec2/tag:Tag")
    assert {(t.inputs["resourceId"], t.inputs["value"]) for t in tags} == {
        ("sg-0123456789abcdef0", "research-cluster"),
        ("subnet-0aaaaaaaaaaaaaaaa", "research-cluster"),
        ("subnet-0bbbbbbbbbbbbbbbb", "research-cluster"),
    }
    assert {t.inputs["key"] for t in tags} == {"karpenter.sh/discovery"}


def test_karpenter_alone_scopes_its_controller_and_queue_to_the_existing_cluster() -> None:
    recording = _karpenter()
    [queue] = recording.of_type("aws:sqs/queue:Queue")
    assert queue.inputs["name"] == "research-cluster"
    trust = json.loads(
        recording.one("aws:iam/role:Role", "karpenter-controller").inputs["assumeRolePolicy"]
    )
    conditions = trust["Statement"][0]["Condition"]["StringEquals"]
    assert conditions["aws:RequestTag/eks-cluster-name"] == "research-cluster"
    [chart] = [
        r
        for r in recording.of_type("kubernetes:helm.sh/v4:Chart")
        if r.name == "karpenter-controller"
    ]
    assert chart.inputs["values"]["settings"]["clusterName"] == "research-cluster"


def test_a_cluster_name_from_another_stack_reads_as_its_placeholder_and_flows_on() -> None:
    """``pulumi preview`` reads a ``StackReference``'s outputs from the other stack (the
    engine's builtin provider reads ``pulumi:pulumi:StackReference`` in previews too,
    ``pkg/resource/deploy/builtins.go``), so what derives from them is known. Offline
    each output reads as its own name, dashed, and flows into what is computed from it."""

    def program() -> None:
        infra = pulumi.StackReference("acme/platform/prod")
        karpenter = Karpenter(
            "karpenter",
            KarpenterArgs(
                settings=KarpenterSpec(version="1.6.3"),
                cluster_name=infra.get_output("cluster_name"),
                region="us-west-2",
                provider=_kubernetes(),
                name_prefix="research",
                pools=[KarpenterPool(name="gpu-spot", instance_families=("g6",), gpu_limit=8)],
            ),
        )
        pulumi.export("queue", karpenter.queue_name)

    recording = record(program, stack="research", project="ml-infra")
    [queue] = recording.of_type("aws:sqs/queue:Queue")
    assert queue.inputs["name"] == "cluster-name"
    assert recording.outputs["queue"] == "cluster-name"


def test_karpenter_alone_renders_one_node_pool_per_pool() -> None:
    node_pools = _karpenter().of_type("kubernetes:karpenter.sh/v1:NodePool")
    assert [p.inputs["metadata"]["name"] for p in node_pools] == ["gpu-spot"]


def test_s3_bucket_alone_trusts_the_trainer_of_the_existing_cluster() -> None:
    def program() -> None:
        bucket = S3CheckpointBucket(
            "ckpt",
            S3CheckpointBucketArgs(
                bucket=BucketSpec(name="research-ckpt", location="us-west-2"),
                region="us-west-2",
                cluster_name=_existing_cluster_name(),
                trainer=TRAINER,
                name_prefix="research",
            ),
        )
        pulumi.export("role", bucket.identity.cloud_identity)

    recording = record(program, stack="research", project="ml-infra")
    association = recording.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "ckpt-trainer-identity"
    )
    assert (association.inputs["clusterName"], association.inputs["namespace"]) == (
        "research-cluster",
        "ml",
    )
    trust = json.loads(
        recording.one("aws:iam/role:Role", "ckpt-trainer").inputs["assumeRolePolicy"]
    )
    tags = trust["Statement"][0]["Condition"]["StringEquals"]
    assert tags["aws:RequestTag/kubernetes-service-account"] == "trainer"
    assert recording.outputs["role"].endswith(":role/research-trainer")


def test_record_runs_after_asyncio_run_left_the_thread_without_a_loop() -> None:
    """A user's test process may have used an async client first (``asyncio.run`` unsets
    the thread's event loop when it ends)."""

    async def nothing() -> None:
        return None

    asyncio.run(nothing())
    recording = record(
        lambda: ClusterBaseline("baseline", ClusterBaselineArgs(namespace="ml")),
        stack="research",
        project="ml-infra",
    )
    assert recording.of_type("kubernetes:core/v1:Namespace")


def test_kubernetes_baseline_alone_needs_only_a_provider() -> None:
    def program() -> None:
        ClusterBaseline(
            "baseline",
            ClusterBaselineArgs(namespace="ml"),
            opts=pulumi.ResourceOptions(provider=_kubernetes()),
        )

    recording = record(program, stack="research", project="ml-infra")
    assert (
        recording.one("kubernetes:core/v1:Namespace", "baseline-namespace").inputs["metadata"][
            "name"
        ]
        == "ml"
    )
    assert len(recording.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")) == 3
