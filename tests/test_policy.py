"""Each policy rule passes on the real plan and fails, naming the resource, when the one
setting it guards is broken. (The installed CrossGuard pack serving these same rules to the
engine is tested in test_packaging.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from spotproof import policy
from tests.support import STACKS, plan_of

POOL = "gcp:container/nodePool:NodePool"


def _mutate(
    type_: str, name: str, change: Callable[[dict[str, Any]], None]
) -> list[policy.Violation]:
    plan = plan_of("-".join(name.split("-")[:2]))  # gke-dev-..., eks-dev-... or aks-dev...
    change(plan.recording.one(type_, name).inputs)
    return policy.evaluate(plan.recording.resources)


BROKEN: dict[str, tuple[str, str, Callable[[dict[str, Any]], None], str]] = {
    "GKE API open to every address": (
        "gcp:container/cluster:Cluster",
        "gke-dev",
        lambda i: i.pop("masterAuthorizedNetworksConfig"),
        "gke-api-restricted",
    ),
    "GKE private endpoint without authorized networks": (
        "gcp:container/cluster:Cluster",
        "gke-prod",
        lambda i: i.pop("masterAuthorizedNetworksConfig"),
        "gke-api-restricted",
    ),
    "GKE API authorized for 0.0.0.0/0": (
        "gcp:container/cluster:Cluster",
        "gke-dev",
        lambda i: i["masterAuthorizedNetworksConfig"]["cidrBlocks"].append(
            {"cidrBlock": "0.0.0.0/0"}
        ),
        "gke-api-restricted",
    ),
    "GKE nodes with external IPs": (
        "gcp:container/cluster:Cluster",
        "gke-dev",
        lambda i: i["privateClusterConfig"].update(enablePrivateNodes=False),
        "gke-private-nodes",
    ),
    "GKE pool overriding private nodes": (
        POOL,
        "gke-dev-l4-spot",
        lambda i: i.update(networkConfig={"enablePrivateNodes": False}),
        "gke-pool-private-nodes",
    ),
    "GKE cluster on the default network": (
        "gcp:container/cluster:Cluster",
        "gke-dev",
        lambda i: i.update(network="projects/spotproof-dev/global/networks/default"),
        "gke-cluster-network",
    ),
    "GKE cluster without Dataplane V2": (
        "gcp:container/cluster:Cluster",
        "gke-dev",
        lambda i: i.pop("datapathProvider"),
        "gke-cluster-network",
    ),
    "EKS API public to the internet": (
        "aws:eks/cluster:Cluster",
        "eks-dev",
        lambda i: i["vpcConfig"].pop("publicAccessCidrs"),
        "eks-api-restricted",
    ),
    "EKS nodes with public IPs": (
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
        "eks-dev-karpenter-gpu-spot-nodeclass",
        lambda i: i["spec"].update(associatePublicIPAddress=True),
        "eks-nodes-private",
    ),
    "EKS nodes whose public IPs follow their subnets": (
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
        "eks-dev-karpenter-gpu-spot-nodeclass",
        lambda i: i["spec"].pop("associatePublicIPAddress"),
        "eks-nodes-private",
    ),
    "a Job running as an account whose identity it does not wait for": (
        "kubernetes:batch/v1:Job",
        "eks-dev-smoke-job",
        lambda i: i["spec"]["template"]["spec"].update(serviceAccountName="batch-worker"),
        "workload-identity-ready",
    ),
    "EKS without network policy enforcement": (
        "aws:eks/addon:Addon",
        "eks-dev-vpc-cni",
        lambda i: i.update(configurationValues="{}"),
        "eks-network-policy",
    ),
    "AKS API open to every address": (
        "azure-native:containerservice:ManagedCluster",
        "aks-dev",
        lambda i: i.pop("apiServerAccessProfile"),
        "aks-api-restricted",
    ),
    "AKS spot nodes with public IPs": (
        "azure-native:containerservice:AgentPool",
        "aks-dev-gpu-spott4",
        lambda i: i.update(enableNodePublicIP=True),
        "aks-pool-private-nodes",
    ),
    "AKS without network policy": (
        "azure-native:containerservice:ManagedCluster",
        "aks-dev",
        lambda i: i["networkProfile"].pop("networkPolicy"),
        "aks-cluster-safe",
    ),
    "workload in a namespace without NetworkPolicies": (
        "kubernetes:batch/v1:Job",
        "gke-prod-smoke-job",
        lambda i: i["metadata"].update(namespace="elsewhere"),
        "namespace-isolated",
    ),
    "NetworkPolicies blocking the identity endpoint": (
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        "gke-prod-baseline-network-allow-workload-egress",
        lambda i: i["spec"].update(egress=i["spec"]["egress"][:-1]),
        "workload-egress",
    ),
    "NetworkPolicies blocking DNS": (
        "kubernetes:networking.k8s.io/v1:NetworkPolicy",
        "eks-prod-baseline-network-allow-workload-egress",
        lambda i: i["spec"]["egress"].pop(1),
        "workload-egress",
    ),
    "a memory tier's replica port open to the whole namespace": (
        "kubernetes:batch/v1:Job",
        "gke-prod-smoke-job",
        lambda i: i["spec"]["template"]["spec"]["containers"][0]["env"].append(
            {"name": "MEMORY_TIER_DIR", "value": "/dev/shm/tier"}
        ),
        "memory-tier-network",
    ),
    "a gang's pods out of the namespace's rule with no policy of their own": (
        "kubernetes:batch/v1:Job",
        "gke-prod-smoke-job",
        lambda i: (
            i["spec"].update(parallelism=2, completions=2),
            i["spec"]["template"]["metadata"]["labels"].update(
                {"spotproof.dev/gang-network": "isolated"}
            ),
        ),
        "gang-network",
    ),
    "smoke Job pulling latest": (
        "kubernetes:batch/v1:Job",
        "gke-prod-smoke-job",
        lambda i: i["spec"]["template"]["spec"]["containers"][0].update(
            image="ghcr.io/acme/trainer:latest"
        ),
        "image-pinned",
    ),
    "AKS spot pool without the contract's spot taint": (
        "azure-native:containerservice:AgentPool",
        "aks-dev-gpu-spott4",
        lambda i: i.update(
            nodeTaints=[
                "kubernetes.azure.com/scalesetpriority=spot:NoSchedule",
                "nvidia.com/gpu=present:NoSchedule",
            ]
        ),
        "aks-agent-pool-safe",
    ),
    "AKS system pool on spot": (
        "azure-native:containerservice:ManagedCluster",
        "aks-dev",
        lambda i: i["agentPoolProfiles"][0].update(scaleSetPriority="Spot"),
        "aks-cluster-safe",
    ),
    "AKS storage account accepting shared keys": (
        "azure-native:storage:StorageAccount",
        "aks-dev-checkpoints-account",
        lambda i: i.update(allowSharedKeyAccess=True),
        "aks-storage-hardened",
    ),
    "AKS trainer role on the whole container": (
        "azure-native:authorization:RoleAssignment",
        "aks-dev-checkpoints-trainer-writes-container",
        lambda i: i.pop("condition"),
        "aks-role-scoped-to-container",
    ),
    "AKS trainer role on the whole storage account": (
        "azure-native:authorization:RoleAssignment",
        "aks-dev-checkpoints-trainer-writes-container",
        lambda i: i.update(scope=i["scope"].split("/blobServices/")[0]),
        "aks-role-scoped-to-container",
    ),
    "system pool on spot": (
        POOL,
        "gke-dev-system",
        lambda i: i["nodeConfig"].update(spot=True),
        "gke-system-pool-on-demand",
    ),
    "system pool without its taint": (
        POOL,
        "gke-dev-system",
        lambda i: i["nodeConfig"].update(taints=[]),
        "gke-system-pool-on-demand",
    ),
    "spot pool without the spot taint": (
        POOL,
        "gke-dev-t4-spot",
        lambda i: i["nodeConfig"]["taints"].pop(0),
        "gke-spot-pool-isolated",
    ),
    "spot pool balancing zones": (
        POOL,
        "gke-dev-t4-spot",
        lambda i: i["autoscaling"].update(locationPolicy="BALANCED"),
        "gke-spot-pool-isolated",
    ),
    "GPU without a managed driver": (
        POOL,
        "gke-dev-t4-spot",
        lambda i: i["nodeConfig"]["guestAccelerators"][0].pop("gpuDriverInstallationConfig"),
        "gke-gpu-driver-managed",
    ),
    "spot pool with graceful shutdown off": (
        POOL,
        "gke-prod-h100-spot",
        lambda i: i["nodeConfig"]["kubeletConfig"].update(shutdownGracePeriodSeconds=0),
        "gke-spot-shutdown",
    ),
    "longer spot shutdown under a bare 1.35 control plane": (
        "gcp:container/cluster:Cluster",
        "gke-prod",
        lambda i: i.update(minMasterVersion="1.35"),
        "gke-spot-shutdown-version",
    ),
    "PromQL alert condition that validates its metrics": (
        "gcp:monitoring/alertPolicy:AlertPolicy",
        "gke-prod-monitoring-spotproof-checkpoint-overdue",
        lambda i: i["conditions"][0]["conditionPrometheusQueryLanguage"].pop(
            "disableMetricValidation"
        ),
        "gke-alert-metrics-unvalidated",
    ),
    "flex-start with auto-repair": (
        POOL,
        "gke-dev-a100-flex",
        lambda i: i["management"].update(autoRepair=True),
        "gke-flex-start-settings",
    ),
    "flex-start consuming reservations": (
        POOL,
        "gke-dev-a100-flex",
        lambda i: i["nodeConfig"].pop("reservationAffinity"),
        "gke-flex-start-settings",
    ),
    "pool without the GKE metadata server": (
        POOL,
        "gke-dev-l4-spot",
        lambda i: i["nodeConfig"].pop("workloadMetadataConfig"),
        "gke-node-metadata-server",
    ),
    "cluster without workload identity": (
        "gcp:container/cluster:Cluster",
        "gke-dev",
        lambda i: i.pop("workloadIdentityConfig"),
        "gke-workload-identity",
    ),
    "bucket without versioning": (
        "gcp:storage/bucket:Bucket",
        "gke-dev-checkpoints-bucket",
        lambda i: i.update(versioning={"enabled": False}),
        "gcs-bucket-hardened",
    ),
    "bucket open to the public": (
        "gcp:storage/bucket:Bucket",
        "gke-dev-checkpoints-bucket",
        lambda i: i.update(publicAccessPrevention="inherited"),
        "gcs-bucket-hardened",
    ),
    "bucket keeping noncurrent versions forever": (
        "gcp:storage/bucket:Bucket",
        "gke-dev-checkpoints-bucket",
        lambda i: i.update(lifecycleRules=[]),
        "gcs-bucket-hardened",
    ),
    "trainer allowed to delete any object in the bucket": (
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "gke-dev-checkpoints-trainer-objects",
        lambda i: i.pop("condition"),
        "gcs-deletion-scoped",
    ),
    "trainer allowed to list the whole bucket": (
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "gke-dev-checkpoints-trainer-objects",
        lambda i: i["condition"].update(
            expression=i["condition"]["expression"].split(" && ")[0] + ")"
        ),
        "gcs-listing-scoped",
    ),
    "trainer pods refused by the namespace's Pod Security level": (
        "kubernetes:batch/v1:Job",
        "gke-dev-smoke-job",
        lambda i: i["spec"]["template"]["spec"].pop("securityContext"),
        "pod-security",
    ),
    "bucket in another region": (
        "gcp:storage/bucket:Bucket",
        "gke-dev-checkpoints-bucket",
        lambda i: i.update(location="EU"),
        "bucket-in-cluster-region",
    ),
    "job restarting in place": (
        "kubernetes:batch/v1:Job",
        "gke-dev-smoke-job",
        lambda i: i["spec"]["template"]["spec"].update(restartPolicy="OnFailure"),
        "k8s-job-preemption-safe",
    ),
    "job counting preemptions as failures": (
        "kubernetes:batch/v1:Job",
        "gke-dev-smoke-job",
        lambda i: i["spec"].pop("podFailurePolicy"),
        "k8s-job-preemption-safe",
    ),
    "GPU job without a GPU limit": (
        "kubernetes:batch/v1:Job",
        "gke-dev-smoke-job",
        lambda i: i["spec"]["template"]["spec"]["containers"][0]["resources"].pop("limits"),
        "k8s-job-preemption-safe",
    ),
    "job awaited by pulumi up until it completes": (
        "kubernetes:batch/v1:Job",
        "gke-dev-smoke-job",
        lambda i: i["metadata"].pop("annotations"),
        "k8s-job-not-awaited",
    ),
    "grace period beyond GKE's notice": (
        "kubernetes:batch/v1:Job",
        "gke-dev-smoke-job",
        lambda i: i["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=30),
        "job-fits-preemption-notice",
    ),
    "spot job at a positive priority": (
        "kubernetes:batch/v1:Job",
        "gke-dev-smoke-job",
        lambda i: i["spec"]["template"]["spec"].update(priorityClassName="spotproof-training"),
        "job-fits-preemption-notice",
    ),
    "spot priority class made positive": (
        "kubernetes:scheduling.k8s.io/v1:PriorityClass",
        "gke-dev-baseline-spotproof-spot-batch",
        lambda i: i.update(value=10),
        "k8s-spot-priority-negative",
    ),
    "EKS system node group on spot": (
        "aws:eks/nodeGroup:NodeGroup",
        "eks-dev-system",
        lambda i: i.update(capacityType="SPOT"),
        "eks-system-node-group-on-demand",
    ),
    "EKS cluster on the aws-auth ConfigMap": (
        "aws:eks/cluster:Cluster",
        "eks-dev",
        lambda i: i["accessConfig"].update(authenticationMode="CONFIG_MAP"),
        "eks-api-authentication",
    ),
    "spot NodePool without the spot taint": (
        "kubernetes:karpenter.sh/v1:NodePool",
        "eks-dev-karpenter-gpu-spot-nodepool",
        lambda i: i["spec"]["template"]["spec"]["taints"].pop(0),
        "karpenter-gpu-pool-safe",
    ),
    "NodePool consolidating busy nodes": (
        "kubernetes:karpenter.sh/v1:NodePool",
        "eks-dev-karpenter-gpu-spot-nodepool",
        lambda i: i["spec"]["disruption"].update(consolidationPolicy="WhenEmptyOrUnderutilized"),
        "karpenter-gpu-pool-safe",
    ),
    "node class allowing IMDSv1": (
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
        "eks-dev-karpenter-gpu-spot-nodeclass",
        lambda i: i["spec"]["metadataOptions"].update(httpTokens="optional"),
        "karpenter-imdsv2",
    ),
    "Pod Identity role any pod may assume": (
        "aws:iam/role:Role",
        "eks-dev-karpenter-controller",
        lambda i: i.update(
            assumeRolePolicy=i["assumeRolePolicy"].replace("kubernetes-service-account", "x")
        ),
        "eks-pod-identity-scoped",
    ),
    "trainer role unable to list its checkpoint prefix": (
        "aws:iam/rolePolicy:RolePolicy",
        "eks-dev-checkpoints-trainer-checkpoints",
        lambda i: i.update(
            policy=i["policy"].replace('"s3:prefix": ["checkpoints/*"]', '"s3:prefix": "x"')
        ),
        "s3-checkpoint-access",
    ),
    "system node group on EKS's own launch template": (
        "aws:eks/nodeGroup:NodeGroup",
        "eks-dev-system",
        lambda i: i.pop("launchTemplate"),
        "eks-node-group-template",
    ),
    "system nodes letting pods reach instance metadata": (
        "aws:ec2/launchTemplate:LaunchTemplate",
        "eks-dev-system",
        lambda i: i["metadataOptions"].update(httpPutResponseHopLimit=2),
        "eks-launch-template-metadata",
    ),
    "interruption queue open to any EventBridge rule": (
        "aws:sqs/queuePolicy:QueuePolicy",
        "eks-dev-karpenter-interruption-policy",
        lambda i: i.update(policy=i["policy"].replace('"Condition": {"ArnEquals"', '"X": {"A"', 1)),
        "sqs-service-senders-pinned",
    ),
    "unencrypted interruption queue": (
        "aws:sqs/queue:Queue",
        "eks-dev-karpenter-interruption-queue",
        lambda i: i.update(sqsManagedSseEnabled=False),
        "eks-interruption-queue-encrypted",
    ),
    "S3 bucket without versioning": (
        "aws:s3/bucketVersioning:BucketVersioning",
        "eks-dev-checkpoints-versioning",
        lambda i: i["versioningConfiguration"].update(status="Suspended"),
        "s3-bucket-hardened",
    ),
    "S3 bucket accepting plain HTTP": (
        "aws:s3/bucketPolicy:BucketPolicy",
        "eks-dev-checkpoints-tls-only",
        lambda i: i.update(policy='{"Statement": []}'),
        "s3-bucket-hardened",
    ),
    "S3 bucket in another region": (
        "aws:s3/bucket:Bucket",
        "eks-dev-checkpoints-bucket",
        lambda i: i.update(region="eu-west-1"),
        "s3-bucket-in-cluster-region",
    ),
    "on-demand NodePool weighing as much as spot": (
        "kubernetes:karpenter.sh/v1:NodePool",
        "eks-dev-karpenter-gpu-on-demand-nodepool",
        lambda i: i["spec"].update(weight=100),
        "karpenter-fallback-below-spot",
    ),
    "A4 pool with a Persistent Disk boot disk": (
        POOL,
        "gke-dev-t4-spot",
        lambda i: i["nodeConfig"].update(machineType="a4-highgpu-8g", diskType="pd-balanced"),
        "gke-boot-disk-supported",
    ),
    "budget a Job's pods cannot honour": (
        "kubernetes:policy/v1:PodDisruptionBudget",
        "gke-dev-smoke-pdb",
        lambda i: i.update(spec={**i["spec"], "minAvailable": "100%"}),
        "pdb-valid-for-owner",
    ),
    "spot pool starting nodes in every zone": (
        POOL,
        "gke-dev-t4-spot",
        lambda i: i.update(initialNodeCount=1),
        "gke-spot-pool-isolated",
    ),
    "Pub/Sub work subscription that expires when idle": (
        "gcp:pubsub/subscription:Subscription",
        "gke-dev-work-subscription",
        lambda i: i.pop("expirationPolicy"),
        "pubsub-work-queue",
    ),
    "SQS dead-letter queue kept no longer than its source": (
        "aws:sqs/queue:Queue",
        "eks-dev-work-dead",
        lambda i: i.update(messageRetentionSeconds=7 * 86400),
        "sqs-work-queue",
    ),
    "storage work queue without its poison queue": (
        "azure-native:storage:Queue",
        "aks-dev-work-poison",
        lambda i: i.update(queueName="aks-dev-elsewhere-poison"),
        "storage-queue-poison",
    ),
    "queue consumer creating objects anywhere in the bucket": (
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "gke-dev-work-worker-creates-results",
        lambda i: i.pop("condition"),
        "queue-consumer-scope",
    ),
    "scaled Deployment that sets its replicas": (
        "kubernetes:apps/v1:Deployment",
        "gke-dev-batch-deployment",
        lambda i: i["spec"].update(replicas=2),
        "keda-scaling",
    ),
    "storage role granted project-wide": (
        "gcp:projects/iAMMember:IAMMember",
        "gke-dev-nodes-artifactregistry.reader",
        lambda i: i.update(role="roles/storage.objectAdmin"),
        "bucket-access-scoped",
    ),
    "GKE drill role bound without its node condition": (
        "gcp:projects/iAMMember:IAMMember",
        "gke-dev-drill-3b6c1d79",
        lambda i: i.pop("condition"),
        "gke-drill-scoped",
    ),
    "FIS drill role interrupting instances without the target tag": (
        "aws:iam/rolePolicy:RolePolicy",
        "eks-dev-drill-fis-interrupt",
        lambda i: i.update(
            policy=i["policy"].replace(', "aws:ResourceTag/spotproof.io/drill-target": "true"', "")
        ),
        "eks-drill-scoped",
    ),
    "AKS drill role assigned on the subscription": (
        "azure-native:authorization:RoleAssignment",
        "aks-dev-drill-group-4a1c9f2e-6b7d-4e3a-9c85-2f0d1e6b7a34",
        lambda i: i.update(scope=i["scope"].partition("/resourceGroups/")[0]),
        "aks-drill-scoped",
    ),
}


@pytest.mark.parametrize("stack", STACKS)
def test_real_plan_violates_no_rule(stack: str) -> None:
    assert policy.evaluate(plan_of(stack).recording.resources) == []


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_setting_is_reported_by_its_rule(case: str) -> None:
    type_, name, change, rule = BROKEN[case]
    violations = _mutate(type_, name, change)
    # One break may trip a second rule too (a spot system pool is also an untainted spot pool).
    # A rule may say two things of one resource (a replica port the gang cannot reach and
    # that outsiders can): it must name that resource and no other.
    reported = REPORTED_AS.get(case, name)
    assert {v.resource for v in violations if v.policy == rule} == {reported}, violations


# Stack rules over S3 report the bucket, whichever of its settings resources is broken.
REPORTED_AS = {
    "S3 bucket without versioning": "eks-dev-checkpoints-bucket",
    "S3 bucket accepting plain HTTP": "eks-dev-checkpoints-bucket",
    # The queue that lacks its poison queue, not the renamed one.
    "storage work queue without its poison queue": "aks-dev-work-queue",
    # The workload whose checkpoint store the role fails, not the role's policy.
    "trainer role unable to list its checkpoint prefix": "eks-dev-smoke-job",
    # The workload whose traffic the policies block, not the policy.
    "NetworkPolicies blocking the identity endpoint": "gke-prod-smoke-job",
    "NetworkPolicies blocking DNS": "eks-prod-smoke-job",
    # The cluster whose CNI ignores NetworkPolicies, not the add-on.
    "EKS without network policy enforcement": "eks-dev",
    # The experiment template whose role interrupts too much, not the role's policy.
    "FIS drill role interrupting instances without the target tag": "eks-dev-drill-experiment",
}


def test_every_rule_is_exercised_by_a_broken_case() -> None:
    rules = {r.name for r in policy.RESOURCE_RULES} | {r.name for r in policy.STACK_RULES}
    assert rules - {"gcp-no-static-keys"} == {case[3] for case in BROKEN.values()}


def test_service_account_keys_are_always_a_violation() -> None:
    [rule] = [r for r in policy.RESOURCE_RULES if r.name == "gcp-no-static-keys"]
    assert list(rule.check({"serviceAccountId": "x"}))
