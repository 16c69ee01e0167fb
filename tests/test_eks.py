"""What the EKS components render, read from the recorded registrations of the real stacks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from spotproof.eks import iam_documents, karpenter_documents
from spotproof.kube.smoke import run_prefix
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.recording.offline import OFFLINE_ACCOUNT
from spotproof.policy.aws_iam import Request, decide
from tests.support import stack_config

ROLE = "aws:iam/role:Role"
POLICY = "aws:iam/policy:Policy"
JOB = "kubernetes:batch/v1:Job"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"


def _one(plan: PlanResult, type_: str, suffix: str) -> dict:
    return plan.recording.one(type_, f"{plan.spec.stack}-{suffix}").inputs


def _document(inputs: dict, key: str) -> dict:
    return json.loads(inputs[key])


def _statement(document: dict, sid: str) -> dict:
    [statement] = [s for s in document["Statement"] if s.get("Sid") == sid]
    return statement


def test_cluster_uses_api_authentication_in_the_created_private_subnets(
    eks_dev: PlanResult,
) -> None:
    cluster = eks_dev.recording.one("aws:eks/cluster:Cluster", "eks-dev").inputs
    assert cluster["accessConfig"]["authenticationMode"] == "API"
    assert cluster["version"] == "1.33"
    assert cluster["region"] == "us-west-2"
    assert cluster["vpcConfig"]["subnetIds"] == [
        f"eks-dev-network-private-us-west-2{zone}-id" for zone in "abc"
    ]


def test_created_private_subnets_span_three_zones_tagged_for_karpenter(eks_dev: PlanResult) -> None:
    subnets = [
        r.inputs for r in eks_dev.recording.of_type("aws:ec2/subnet:Subnet") if "private" in r.name
    ]
    assert sorted(s["availabilityZone"] for s in subnets) == [
        "us-west-2a",
        "us-west-2b",
        "us-west-2c",
    ]
    assert all(s["tags"]["karpenter.sh/discovery"] == "eks-dev" for s in subnets)
    assert sorted(s["cidrBlock"] for s in subnets) == [
        "10.40.0.0/19",
        "10.40.32.0/19",
        "10.40.64.0/19",
    ]


def test_named_subnets_are_used_as_given_and_tagged_for_discovery(eks_prod: PlanResult) -> None:
    cluster = eks_prod.recording.one("aws:eks/cluster:Cluster", "eks-prod").inputs
    assert cluster["vpcConfig"]["subnetIds"] == [f"subnet-0a1b2c3d4e5f6000{i}" for i in (1, 2, 3)]
    tags = {
        r.inputs["resourceId"]: (r.inputs["key"], r.inputs["value"])
        for r in eks_prod.recording.of_type("aws:ec2/tag:Tag")
    }
    assert tags["subnet-0a1b2c3d4e5f60001"] == ("karpenter.sh/discovery", "eks-prod")
    assert tags["sg-0offline"] == ("karpenter.sh/discovery", "eks-prod")
    assert not eks_prod.recording.of_type("aws:ec2/vpc:Vpc")


def test_system_node_group_is_on_demand_and_tainted_in_aws_spelling(eks_dev: PlanResult) -> None:
    group = _one(eks_dev, "aws:eks/nodeGroup:NodeGroup", "system")
    assert group["capacityType"] == "ON_DEMAND"
    assert group["taints"] == [
        {"key": "CriticalAddonsOnly", "value": "true", "effect": "NO_SCHEDULE"}
    ]
    assert group["labels"] == {"spotproof.dev/pool-class": "system"}
    assert group["scalingConfig"] == {"minSize": 2, "maxSize": 3, "desiredSize": 2}


def test_system_nodes_keep_instance_metadata_from_pods_with_a_template_of_their_own(
    eks_dev: PlanResult,
) -> None:
    group = _one(eks_dev, "aws:eks/nodeGroup:NodeGroup", "system")
    template = _one(eks_dev, "aws:ec2/launchTemplate:LaunchTemplate", "system")
    assert group["launchTemplate"] == {"id": "eks-dev-system-id", "version": "1"}
    assert "diskSize" not in group  # EKS refuses it beside a launch template
    assert template["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpTokens": "required",
        "httpPutResponseHopLimit": 1,
    }
    [root] = template["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/xvda"
    assert root["ebs"] == {
        "volumeSize": 100,
        "volumeType": "gp3",
        "encrypted": "true",
        "deleteOnTermination": "true",
    }


def test_karpenter_controller_role_trusts_only_its_service_account_through_pod_identity(
    eks_dev: PlanResult,
) -> None:
    trust = _document(_one(eks_dev, ROLE, "karpenter-controller"), "assumeRolePolicy")
    [statement] = trust["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert statement["Condition"]["StringEquals"] == {
        "aws:RequestTag/eks-cluster-name": "eks-dev",
        "aws:RequestTag/kubernetes-namespace": "kube-system",
        "aws:RequestTag/kubernetes-service-account": "karpenter",
    }
    association = _one(
        eks_dev,
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "karpenter-controller-identity",
    )
    assert (association["namespace"], association["serviceAccount"]) == ("kube-system", "karpenter")


def test_controller_may_only_launch_and_terminate_instances_tagged_for_this_cluster(
    eks_dev: PlanResult,
) -> None:
    document = _document(_one(eks_dev, POLICY, "karpenter-controller-node-lifecycle"), "policy")
    create = _statement(document, "CreateOwnedResources")
    assert create["Condition"]["StringEquals"] == {
        "aws:RequestTag/kubernetes.io/cluster/eks-dev": "owned",
        "aws:RequestTag/eks:eks-cluster-name": "eks-dev",
    }
    assert create["Condition"]["StringLike"] == {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    delete = _statement(document, "DeleteOwnedResources")
    assert delete["Action"] == ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"]
    assert delete["Condition"]["StringEquals"] == {
        "aws:ResourceTag/kubernetes.io/cluster/eks-dev": "owned"
    }
    # Only resources shared by every launch (images, subnets, ...) are unconditional.
    unconditional = [s for s in document["Statement"] if "Condition" not in s]
    assert [s["Sid"] for s in unconditional] == ["LaunchFromSharedResources"]


def test_controller_passes_only_the_karpenter_node_role_and_reads_only_its_queue(
    eks_dev: PlanResult,
) -> None:
    iam = _document(_one(eks_dev, POLICY, "karpenter-controller-iam-integration"), "policy")
    passing = _statement(iam, "PassNodeRole")
    assert passing["Resource"] == f"arn:aws:iam::{OFFLINE_ACCOUNT}:role/eks-dev-karpenter-node"
    assert passing["Condition"] == {
        "StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}
    }
    queue = _document(_one(eks_dev, POLICY, "karpenter-controller-interruption"), "policy")
    assert _statement(queue, "ReadInterruptionQueue")["Resource"] == (
        f"arn:aws:sqs:us-west-2:{OFFLINE_ACCOUNT}:eks-dev"
    )
    eks = _document(_one(eks_dev, POLICY, "karpenter-controller-eks-integration"), "policy")
    assert _statement(eks, "DescribeCluster")["Resource"] == (
        f"arn:aws:eks:us-west-2:{OFFLINE_ACCOUNT}:cluster/eks-dev"
    )


def test_karpenter_nodes_have_their_own_role_and_an_ec2_linux_access_entry(
    eks_dev: PlanResult,
) -> None:
    trust = _document(_one(eks_dev, ROLE, "karpenter-node"), "assumeRolePolicy")
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    entry = _one(eks_dev, "aws:eks/accessEntry:AccessEntry", "karpenter-node-access")
    assert entry["type"] == "EC2_LINUX"
    assert entry["principalArn"] == f"arn:aws:iam::{OFFLINE_ACCOUNT}:role/eks-dev-karpenter-node"
    attached = {
        r.inputs["policyArn"].rsplit("/", 1)[1]
        for r in eks_dev.recording.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.name.startswith("eks-dev-karpenter-node-")
    }
    assert attached == {
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryPullOnly",
    }


def test_karpenter_nodes_get_session_manager_access_only_when_the_stack_asks(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("eks-dev")
    config["spotproof:karpenter"]["nodeSsmAccess"] = True
    result = run_plan("eks-test", make_project(config, stack="eks-test"))
    attached = {
        r.inputs["policyArn"].rsplit("/", 1)[1]
        for r in result.recording.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.name.startswith("eks-test-karpenter-node-")
    }
    assert "AmazonSSMManagedInstanceCore" in attached


def test_eventbridge_rules_send_every_interruption_event_to_the_queue(eks_dev: PlanResult) -> None:
    rules = {
        r.name: json.loads(r.inputs["eventPattern"])
        for r in eks_dev.recording.of_type("aws:cloudwatch/eventRule:EventRule")
    }
    assert sorted((p["source"][0], p["detail-type"][0]) for p in rules.values()) == [
        ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
        ("aws.ec2", "EC2 Instance State-change Notification"),
        ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
        ("aws.health", "AWS Health Event"),
    ]
    targets = eks_dev.recording.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert len(targets) == 4
    assert {t.inputs["arn"] for t in targets} == {
        f"arn:aws:sqs:us-west-2:{OFFLINE_ACCOUNT}:eks-dev"
    }
    assert {t.inputs["rule"] for t in targets} == {
        _one(eks_dev, "aws:cloudwatch/eventRule:EventRule", f"karpenter-interruption-{k}")["name"]
        for k in ("spot-interruption", "rebalance", "instance-state-change", "scheduled-change")
    }


def test_interruption_queue_is_encrypted_short_lived_and_tls_only(eks_dev: PlanResult) -> None:
    queue = _one(eks_dev, "aws:sqs/queue:Queue", "karpenter-interruption-queue")
    assert queue["sqsManagedSseEnabled"] is True
    assert queue["messageRetentionSeconds"] == 300
    policy = _one(eks_dev, "aws:sqs/queuePolicy:QueuePolicy", "karpenter-interruption-policy")
    assert policy["queueUrl"].endswith(f"/{OFFLINE_ACCOUNT}/eks-dev")
    document = _document(policy, "policy")
    deliver = _statement(document, "EventBridgeDelivers")
    assert deliver["Principal"] == {"Service": "events.amazonaws.com"}
    assert deliver["Action"] == "sqs:SendMessage"
    rules = eks_dev.recording.of_type("aws:cloudwatch/eventRule:EventRule")
    assert deliver["Condition"] == {
        "ArnEquals": {
            "aws:SourceArn": sorted(
                f"arn:aws:events:us-west-2:{OFFLINE_ACCOUNT}:rule/{r.inputs['name']}" for r in rules
            )
        }
    }
    assert len(rules) == 4
    deny = _statement(document, "DenyWithoutTls")
    assert (deny["Effect"], deny["Condition"]) == (
        "Deny",
        {"Bool": {"aws:SecureTransport": "false"}},
    )


def test_helm_release_is_pinned_configured_and_kept_on_the_system_group(
    eks_dev: PlanResult,
) -> None:
    chart = _one(eks_dev, "kubernetes:helm.sh/v4:Chart", "karpenter-controller")
    assert (chart["chart"], chart["version"]) == (
        "oci://public.ecr.aws/karpenter/karpenter",
        "1.6.3",
    )
    assert chart["skipCrds"] is True
    values = chart["values"]
    assert values["settings"] == {"clusterName": "eks-dev", "interruptionQueue": "eks-dev"}
    assert values["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert values["nodeSelector"] == {"spotproof.dev/pool-class": "system"}
    crds = eks_dev.recording.one("kubernetes:helm.sh/v4:Chart", "eks-dev-karpenter-crd")
    node_pool = eks_dev.recording.one(NODE_POOL, "eks-dev-karpenter-gpu-spot-nodepool")
    assert node_pool.inputs  # registered after the CRD chart it depends on
    assert eks_dev.recording.resources.index(crds) < eks_dev.recording.resources.index(node_pool)


def test_karpenter_is_given_its_region_since_its_nodes_keep_metadata_from_pods(
    eks_dev: PlanResult,
) -> None:
    values = _one(eks_dev, "kubernetes:helm.sh/v4:Chart", "karpenter-controller")["values"]
    assert {"name": "AWS_REGION", "value": "us-west-2"} in values["controller"]["env"]


def test_spot_node_pool_is_diversified_tainted_capped_and_never_consolidates_busy_nodes(
    eks_dev: PlanResult,
) -> None:
    spec = _one(eks_dev, NODE_POOL, "karpenter-gpu-spot-nodepool")["spec"]
    requirements = {r["key"]: r for r in spec["template"]["spec"]["requirements"]}
    assert requirements["karpenter.sh/capacity-type"]["values"] == ["spot"]
    assert requirements["karpenter.k8s.aws/instance-family"]["values"] == ["g6", "g5", "g6e"]
    assert requirements["node.kubernetes.io/instance-type"] == {
        "key": "node.kubernetes.io/instance-type",
        "operator": "Exists",
        "minValues": 5,
    }
    assert spec["template"]["spec"]["taints"] == [
        {"key": "spotproof.dev/capacity", "value": "spot", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    ]
    assert spec["limits"] == {"nvidia.com/gpu": "8"}
    assert spec["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert spec["weight"] == 100


def test_on_demand_fallback_pool_weighs_less_and_has_its_own_small_limit(
    eks_dev: PlanResult,
) -> None:
    spec = _one(eks_dev, NODE_POOL, "karpenter-gpu-on-demand-nodepool")["spec"]
    requirements = {r["key"]: r for r in spec["template"]["spec"]["requirements"]}
    assert requirements["karpenter.sh/capacity-type"]["values"] == ["on-demand"]
    assert spec["weight"] == 10
    assert spec["limits"] == {"nvidia.com/gpu": "2"}
    assert spec["template"]["metadata"]["labels"] == {"spotproof.dev/pool-class": "on-demand-gpu"}


def test_node_class_uses_bottlerocket_discovery_tags_the_node_role_and_imdsv2(
    eks_dev: PlanResult,
) -> None:
    spec = _one(eks_dev, NODE_CLASS, "karpenter-gpu-spot-nodeclass")["spec"]
    assert spec["amiSelectorTerms"] == [{"alias": "bottlerocket@latest"}]
    assert spec["role"] == "eks-dev-karpenter-node"
    discovery = [{"tags": {"karpenter.sh/discovery": "eks-dev"}}]
    assert spec["subnetSelectorTerms"] == discovery
    assert spec["securityGroupSelectorTerms"] == discovery
    volumes = {m["deviceName"]: m["ebs"]["volumeSize"] for m in spec["blockDeviceMappings"]}
    assert volumes == {"/dev/xvda": "4Gi", "/dev/xvdb": "200Gi"}
    assert spec["metadataOptions"]["httpTokens"] == "required"
    assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1


def test_bucket_is_regional_versioned_private_encrypted_and_protected_in_prod(
    eks_prod: PlanResult,
) -> None:
    bucket = eks_prod.recording.one("aws:s3/bucket:Bucket", "eks-prod-checkpoints-bucket")
    assert bucket.protect is True
    assert (bucket.inputs["bucket"], bucket.inputs["region"]) == (
        "spotproof-eks-prod-checkpoints-use1",
        "us-east-1",
    )
    name = bucket.inputs["bucket"]

    def settings(type_: str, suffix: str) -> dict:
        inputs = _one(eks_prod, f"aws:s3/{type_}", f"checkpoints-{suffix}")
        assert inputs["bucket"] == name
        return inputs

    versioning = settings("bucketVersioning:BucketVersioning", "versioning")
    assert versioning["versioningConfiguration"] == {"status": "Enabled"}
    block = settings("bucketPublicAccessBlock:BucketPublicAccessBlock", "public-access")
    assert all(
        block[flag]
        for flag in (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
        )
    )
    ownership = settings("bucketOwnershipControls:BucketOwnershipControls", "ownership")
    assert ownership["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    encryption = settings(
        "bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "encryption",
    )
    [rule] = encryption["rules"]
    assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert rule["bucketKeyEnabled"] is True
    lifecycle = settings("bucketLifecycleConfiguration:BucketLifecycleConfiguration", "lifecycle")
    [rule] = lifecycle["rules"]
    assert rule["noncurrentVersionExpiration"] == {"noncurrentDays": 30}
    assert rule["expiration"] == {"expiredObjectDeleteMarker": True}


def test_bucket_policy_denies_every_request_without_tls(eks_dev: PlanResult) -> None:
    policy = _one(eks_dev, "aws:s3/bucketPolicy:BucketPolicy", "checkpoints-tls-only")
    [statement] = _document(policy, "policy")["Statement"]
    bucket = "arn:aws:s3:::spotproof-eks-dev-checkpoints-usw2"
    assert statement["Effect"] == "Deny" and statement["Principal"] == "*"
    assert statement["Action"] == "s3:*"
    assert statement["Resource"] == [bucket, f"{bucket}/*"]
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_smoke_job_service_account_may_read_and_write_only_the_checkpoint_prefix(
    eks_dev: PlanResult,
) -> None:
    association = _one(
        eks_dev,
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "checkpoints-trainer-identity",
    )
    assert (association["namespace"], association["serviceAccount"]) == (
        "spotproof",
        "spotproof-trainer",
    )
    assert association["roleArn"] == f"arn:aws:iam::{OFFLINE_ACCOUNT}:role/eks-dev-trainer"
    document = _document(
        _one(eks_dev, "aws:iam/rolePolicy:RolePolicy", "checkpoints-trainer-checkpoints"), "policy"
    )
    bucket = "arn:aws:s3:::spotproof-eks-dev-checkpoints-usw2"
    objects = _statement(document, "ReadWriteCheckpoints")
    assert objects["Resource"] == f"{bucket}/checkpoints/*"
    listing = _statement(document, "ListCheckpointPrefix")
    assert listing["Resource"] == bucket
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["checkpoints/*"]}}
    trust = _document(_one(eks_dev, ROLE, "checkpoints-trainer"), "assumeRolePolicy")
    assert (
        trust["Statement"][0]["Condition"]["StringEquals"][
            "aws:RequestTag/kubernetes-service-account"
        ]
        == "spotproof-trainer"
    )


def test_the_trainer_may_not_list_a_sibling_prefix_that_starts_with_its_name() -> None:
    bucket = "arn:aws:s3:::b"
    document = iam_documents.checkpoint_access(bucket, "checkpoints", None)

    def listing(prefix: str) -> str:
        return decide([document], Request("s3:ListBucket", bucket, {"s3:prefix": prefix}))

    assert listing("checkpoints/smoke/") == "allowed"
    assert listing("checkpoints-other/") == "implicitly denied"
    assert listing("checkpoints") == "implicitly denied"


def test_the_trainer_is_granted_no_multipart_action_the_runtime_never_calls() -> None:
    document = iam_documents.checkpoint_access("arn:aws:s3:::b", "checkpoints", None)
    actions = {a for st in document["Statement"] for a in _listed(st["Action"])}
    assert actions == {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}


def _listed(action: str | list[str]) -> list[str]:
    return [action] if isinstance(action, str) else action


def test_smoke_job_uses_the_aws_notice_less_delivery_time_and_accepts_the_fallback(
    eks_dev: PlanResult,
) -> None:
    job = eks_dev.recording.one(JOB, "eks-dev-smoke-job").inputs
    pod = job["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 90
    assert {"name": "GRACE_SECONDS", "value": "90"} in pod["containers"][0]["env"]
    assert "nodeSelector" not in pod or not pod["nodeSelector"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {
            "key": "spotproof.dev/pool-class",
            "operator": "In",
            "values": ["spot-gpu", "on-demand-gpu"],
        }
    ]
    assert pod["priorityClassName"] == "spotproof-spot-batch"
    assert (
        job["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    )
    assert job["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == (
        "s3://spotproof-eks-dev-checkpoints-usw2/checkpoints/smoke/"
        + run_prefix(eks_dev.spec.smoke_test)  # type: ignore[arg-type]
    )


def test_coredns_tolerates_the_system_taint_and_is_required_onto_the_system_group(
    eks_dev: PlanResult,
) -> None:
    addon = _one(eks_dev, "aws:eks/addon:Addon", "coredns")
    values = json.loads(addon["configurationValues"])
    assert values["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    expression = values["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expression == {"key": "spotproof.dev/pool-class", "operator": "In", "values": ["system"]}
    agent = _one(eks_dev, "aws:eks/addon:Addon", "pod-identity-agent")
    assert json.loads(agent["configurationValues"]) == {"tolerations": [{"operator": "Exists"}]}


def test_coredns_override_keeps_replicas_spread_over_nodes(eks_dev: PlanResult) -> None:
    values = json.loads(_one(eks_dev, "aws:eks/addon:Addon", "coredns")["configurationValues"])
    [spread] = values["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert spread["podAffinityTerm"]["labelSelector"]["matchExpressions"] == [
        {"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}
    ]


def test_every_controller_policy_document_is_attached(eks_dev: PlanResult) -> None:
    scope = karpenter_documents.ControllerScope(
        "aws", "us-west-2", OFFLINE_ACCOUNT, "c", "role", "queue"
    )
    assert (
        tuple(karpenter_documents.controller_policies(scope))
        == karpenter_documents.CONTROLLER_POLICIES
    )
    controller = "eks-dev-karpenter-controller-"  # not the drill's operator policy
    attached = {
        r.name.removeprefix(controller)
        for r in eks_dev.recording.of_type(POLICY)
        if r.name.startswith(controller)
    }
    assert attached == set(karpenter_documents.CONTROLLER_POLICIES)
