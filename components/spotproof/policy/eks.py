"""Rules for EKS resources: the system node group, Karpenter's objects, identities, S3.

S3 settings live on separate resources (versioning, public access block, ...), each
naming its bucket, so the bucket rule is a stack rule that gathers them by bucket name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof import scheduling
from spotproof.fleet.pools import PoolClass
from spotproof.policy import eks_drill, exposure
from spotproof.policy.base import PlannedResource, ResourceRule, StackRule
from spotproof.policy.identity_readiness import IdentityBinding
from spotproof.scheduling import eks as eks_shapes
from spotproof.scheduling import node_shapes

CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = eks_shapes.NODE_GROUP
ROLE = "aws:iam/role:Role"
QUEUE = "aws:sqs/queue:Queue"
QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
ADDON = "aws:eks/addon:Addon"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
SOURCE_KEYS = ("aws:SourceArn", "aws:SourceAccount")
BUCKET = "aws:s3/bucket:Bucket"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
POD_IDENTITY_TAGS = ("kubernetes-namespace", "kubernetes-service-account")


def system_node_group(inputs: Mapping[str, Any]) -> Iterator[str]:
    shape = eks_shapes.node_group(inputs)
    if node_shapes.pool_class(shape) != PoolClass.SYSTEM:
        return
    if shape.spot:
        yield "the system node group must be ON_DEMAND: add-ons cannot survive spot reclaims"
    if scheduling.SYSTEM_TAINT not in shape.taints:
        yield "the system node group must be tainted CriticalAddonsOnly=true:NO_SCHEDULE"


def api_authentication(inputs: Mapping[str, Any]) -> Iterator[str]:
    if (inputs.get("accessConfig") or {}).get("authenticationMode") != "API":
        yield "authenticationMode must be API: access entries, not the aws-auth ConfigMap"


def _metadata_kept_from_pods(options: Mapping[str, Any]) -> Iterator[str]:
    if options.get("httpTokens") != "required":
        yield "metadataOptions.httpTokens must be required (IMDSv2 only)"
    if options.get("httpPutResponseHopLimit", 1) != 1:
        yield "metadataOptions.httpPutResponseHopLimit must be 1 so pods cannot reach IMDS"


def node_class_metadata(inputs: Mapping[str, Any]) -> Iterator[str]:
    yield from _metadata_kept_from_pods((inputs.get("spec") or {}).get("metadataOptions") or {})


def launch_template_metadata(inputs: Mapping[str, Any]) -> Iterator[str]:
    yield from _metadata_kept_from_pods(inputs.get("metadataOptions") or {})


def node_group_template(inputs: Mapping[str, Any]) -> Iterator[str]:
    if not inputs.get("launchTemplate"):
        yield (
            "a node group without a launch template gets EKS's, with an IMDS hop limit of 2 "
            "that lets pods read the node role's credentials; allowed: a launch template "
            "with httpTokens required and httpPutResponseHopLimit 1"
        )


def pod_identity_trust(inputs: Mapping[str, Any]) -> Iterator[str]:
    document = inputs.get("assumeRolePolicy")
    statements = json.loads(document).get("Statement", []) if isinstance(document, str) else []
    for statement in statements:
        services = (statement.get("Principal") or {}).get("Service")
        if "pods.eks.amazonaws.com" not in (
            [services] if isinstance(services, str) else services or []
        ):
            continue
        equals = (statement.get("Condition") or {}).get("StringEquals") or {}
        missing = [tag for tag in POD_IDENTITY_TAGS if f"aws:RequestTag/{tag}" not in equals]
        if missing:
            yield f"Pod Identity trust must pin {', '.join(missing)}: any pod could assume it"


def interruption_queue(inputs: Mapping[str, Any]) -> Iterator[str]:
    if not (inputs.get("sqsManagedSseEnabled") or inputs.get("kmsMasterKeyId")):
        yield "the interruption queue must be encrypted"


def service_senders_pinned(inputs: Mapping[str, Any]) -> Iterator[str]:
    """A queue that lets an AWS service send to it names which of that service's sources
    may: otherwise any account's rule or topic could (the confused deputy)
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html)."""
    document = inputs.get("policy")
    statements = json.loads(document).get("Statement", []) if isinstance(document, str) else []
    for statement in statements:
        principal = statement.get("Principal")
        if statement.get("Effect") != "Allow" or not isinstance(principal, dict):
            continue
        if "Service" not in principal:
            continue
        keys = {
            key for condition in (statement.get("Condition") or {}).values() for key in condition
        }
        if not keys & set(SOURCE_KEYS):
            yield (
                f"statement {statement.get('Sid', '(no Sid)')} lets {principal['Service']} send "
                f"on behalf of anyone; allowed: a condition on {' or '.join(SOURCE_KEYS)}"
            )


def _settings(resources: list[PlannedResource], type_: str, bucket: str) -> list[Mapping[str, Any]]:
    """Inputs of the ``aws:s3/<type_>`` resources that configure ``bucket``."""
    return [
        r.inputs
        for r in resources
        if r.type == f"aws:s3/{type_}" and r.inputs.get("bucket") == bucket
    ]


def s3_bucket_hardened(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    for bucket in (r for r in resources if r.type == BUCKET):
        name = bucket.inputs.get("bucket")
        versioning = _settings(resources, "bucketVersioning:BucketVersioning", name)
        if not any(
            (v.get("versioningConfiguration") or {}).get("status") == "Enabled" for v in versioning
        ):
            yield bucket.name, "versioning must be Enabled"
        blocks = _settings(resources, "bucketPublicAccessBlock:BucketPublicAccessBlock", name)
        flags = (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
        )
        if not any(all(b.get(flag) for flag in flags) for b in blocks):
            yield bucket.name, "all four public access blocks must be on"
        ownership = _settings(resources, "bucketOwnershipControls:BucketOwnershipControls", name)
        if not any(
            (o.get("rule") or {}).get("objectOwnership") == "BucketOwnerEnforced" for o in ownership
        ):
            yield bucket.name, "object ownership must be BucketOwnerEnforced (ACLs off)"
        encryption = _settings(
            resources,
            "bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            name,
        )
        if not encryption:
            yield bucket.name, "server-side encryption must be configured"
        lifecycle = _settings(
            resources, "bucketLifecycleConfiguration:BucketLifecycleConfiguration", name
        )
        if not any(
            rule.get("status") == "Enabled" and rule.get("noncurrentVersionExpiration")
            for config in lifecycle
            for rule in config.get("rules") or []
        ):
            yield bucket.name, "a lifecycle rule must expire noncurrent versions"
        policies = _settings(resources, "bucketPolicy:BucketPolicy", name)
        if not any(_denies_plain_http(p.get("policy")) for p in policies):
            yield bucket.name, "a bucket policy must deny requests without TLS"


def _denies_plain_http(document: Any) -> bool:
    statements = json.loads(document).get("Statement", []) if isinstance(document, str) else []
    return any(
        s.get("Effect") == "Deny"
        and ((s.get("Condition") or {}).get("Bool") or {}).get("aws:SecureTransport") == "false"
        for s in statements
    )


def s3_bucket_in_cluster_region(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    regions = {r.inputs.get("region") for r in resources if r.type == CLUSTER}
    for bucket in (r for r in resources if r.type == BUCKET):
        region = bucket.inputs.get("region")
        if regions and region not in regions:
            yield (
                bucket.name,
                f"bucket in {region}, cluster in {', '.join(sorted(map(str, regions)))}",
            )


# --- what the internet can reach (``policy.exposure``) --------------------
# Unless told otherwise EKS opens the API's public endpoint to every address
# (``publicAccessCidrs``' default).


def api_restricted(inputs: Mapping[str, Any]) -> Iterator[str]:
    vpc = inputs.get("vpcConfig") or {}
    if vpc.get("endpointPublicAccess") is False:
        return
    cidrs = vpc.get("publicAccessCidrs") or [exposure.EVERYWHERE]  # EKS's default when unset
    if opened := exposure.open_ranges(cidrs):
        yield f"the API's public endpoint accepts {opened[0]}; {exposure.FIX}"


def nodes_private(inputs: Mapping[str, Any]) -> Iterator[str]:
    """Unset, a node's public IP follows its subnet's ``MapPublicIpOnLaunch``, which the
    plan cannot see for subnets a stack names: only an explicit false is private."""
    value = (inputs.get("spec") or {}).get("associatePublicIPAddress")
    if value is True:
        yield "associatePublicIPAddress gives Karpenter's nodes public IPs; allowed: false"
    elif value is None:
        yield (
            "associatePublicIPAddress is unset, so a node in a public subnet gets a public IP; "
            "allowed: false"
        )


# --- the identity a pod runs as (``policy.identity_readiness``) ----------------------

POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ROLE_POLICY_ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"


def _associated_account(inputs: Mapping[str, Any]) -> tuple[str, str]:
    return str(inputs.get("namespace")), str(inputs.get("serviceAccount"))


def _role_policies(
    resources: list[PlannedResource], association: PlannedResource, _account: Mapping[str, Any]
) -> list[PlannedResource]:
    """The policies of the associated role, inline and attached."""
    role = str(association.inputs.get("roleArn", "")).rpartition("/")[2]
    return [
        r
        for r in resources
        if r.type in (ROLE_POLICY, ROLE_POLICY_ATTACHMENT) and r.inputs.get("role") == role
    ]


IDENTITY_BINDINGS = (
    IdentityBinding(POD_IDENTITY_ASSOCIATION, _associated_account, _role_policies),
)


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "eks-node-group-template",
        "Node groups launch from a template of their own.",
        NODE_GROUP,
        node_group_template,
    ),
    ResourceRule(
        "eks-launch-template-metadata",
        "Launch templates keep instance metadata from pods.",
        LAUNCH_TEMPLATE,
        launch_template_metadata,
    ),
    ResourceRule(
        "sqs-service-senders-pinned",
        "A service may send to a queue only from named sources.",
        QUEUE_POLICY,
        service_senders_pinned,
    ),
    ResourceRule(
        "eks-system-node-group-on-demand",
        "System node group is on-demand and tainted.",
        NODE_GROUP,
        system_node_group,
    ),
    ResourceRule(
        "eks-api-authentication", "Cluster uses access entries.", CLUSTER, api_authentication
    ),
    ResourceRule(
        "karpenter-imdsv2", "Nodes require IMDSv2, one hop.", NODE_CLASS, node_class_metadata
    ),
    ResourceRule(
        "eks-pod-identity-scoped",
        "Pod Identity roles name their namespace and service account.",
        ROLE,
        pod_identity_trust,
    ),
    ResourceRule(
        "eks-interruption-queue-encrypted",
        "The interruption queue is encrypted.",
        QUEUE,
        interruption_queue,
    ),
    ResourceRule(
        "eks-api-restricted",
        "The Kubernetes API is private or open to named networks only.",
        CLUSTER,
        api_restricted,
    ),
    ResourceRule(
        "eks-nodes-private",
        "Karpenter's nodes get no public IPs.",
        NODE_CLASS,
        nodes_private,
    ),
)


def network_policy_enforced(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """Each EKS cluster has the VPC CNI add-on with network policy on
    (``eks.cluster.VPC_CNI_CONFIGURATION``)."""
    enforcing = set()
    for addon in (r for r in resources if r.type == ADDON):
        if addon.inputs.get("addonName") != "vpc-cni":
            continue
        values = addon.inputs.get("configurationValues")
        settings = json.loads(values) if isinstance(values, str) else {}
        if str(settings.get("enableNetworkPolicy", "")).lower() == "true":
            enforcing.add(addon.inputs.get("clusterName"))
    for cluster in (r for r in resources if r.type == CLUSTER):
        if cluster.inputs.get("name") not in enforcing:
            yield (
                cluster.name,
                "NetworkPolicies would be accepted and ignored; allowed: the vpc-cni add-on "
                'with configurationValues {"enableNetworkPolicy": "true"}',
            )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "eks-network-policy",
        "The VPC CNI enforces NetworkPolicy.",
        network_policy_enforced,
    ),
    StackRule(
        "s3-bucket-hardened", "Checkpoint bucket is versioned and private.", s3_bucket_hardened
    ),
    StackRule(
        "s3-bucket-in-cluster-region",
        "Checkpoints stay in the cluster's region.",
        s3_bucket_in_cluster_region,
    ),
    *eks_drill.STACK_RULES,
)
