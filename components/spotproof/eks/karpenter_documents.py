"""The Karpenter controller's IAM documents and its interruption queue's policy, as plain
data.

What scopes the controller to *one* cluster: it may only create EC2 resources while
tagging them ``kubernetes.io/cluster/<cluster>=owned``, ``eks:eks-cluster-name=<cluster>``
and ``karpenter.sh/nodepool``, and only tag, terminate or delete resources already tagged
so. Karpenter sets those tags itself (the EC2NodeClass may not), so another cluster's
nodes are out of its reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotproof.eks.iam_documents import Document, deny_without_tls, document

EC2_PRINCIPALS = ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]


@dataclass(frozen=True)
class ControllerScope:
    """Where the Karpenter controller may act."""

    partition: str
    region: str
    account: str
    cluster_name: str
    node_role_arn: str
    queue_arn: str

    def arn(self, service: str, resource: str) -> str:
        return f"arn:{self.partition}:{service}:{self.region}:{self.account}:{resource}"

    @property
    def ec2(self) -> str:
        return f"arn:{self.partition}:ec2:{self.region}"


def _owned(scope: ControllerScope, tag: str) -> Document:
    """Conditions that a request or resource (``tag`` = RequestTag/ResourceTag) is this
    cluster's and was made by Karpenter for a NodePool."""
    return {
        "StringEquals": {f"aws:{tag}/kubernetes.io/cluster/{scope.cluster_name}": "owned"},
        "StringLike": {f"aws:{tag}/karpenter.sh/nodepool": "*"},
    }


def _owned_request(scope: ControllerScope, also_equal: Document | None = None) -> Document:
    condition = _owned(scope, "RequestTag")
    condition["StringEquals"]["aws:RequestTag/eks:eks-cluster-name"] = scope.cluster_name
    condition["StringEquals"].update(also_equal or {})
    return condition


CONTROLLER_POLICIES = (
    "node-lifecycle",
    "iam-integration",
    "eks-integration",
    "interruption",
    "resource-discovery",
)
"""Names of :func:`controller_policies`' documents, one managed policy each."""


def controller_policies(scope: ControllerScope) -> dict[str, Document]:
    """Karpenter's controller permissions, split by concern (each stays under IAM's size
    limit for a managed policy)."""
    ec2 = scope.ec2
    launched = [
        f"{ec2}:*:{kind}/*"
        for kind in (
            "fleet",
            "instance",
            "volume",
            "network-interface",
            "launch-template",
            "spot-instances-request",
        )
    ]
    instance_profiles = f"arn:{scope.partition}:iam::{scope.account}:instance-profile/*"
    profile_tags = {
        f"aws:{{tag}}/kubernetes.io/cluster/{scope.cluster_name}": "owned",
        "aws:{tag}/eks:eks-cluster-name": scope.cluster_name,
        "aws:{tag}/topology.kubernetes.io/region": scope.region,
    }

    def profile_condition(*tags: str) -> Document:
        return {
            "StringEquals": {
                key.format(tag=tag): value for tag in tags for key, value in profile_tags.items()
            },
            "StringLike": {f"aws:{tag}/karpenter.k8s.aws/ec2nodeclass": "*" for tag in tags},
        }

    return {
        "node-lifecycle": document(
            {
                "Sid": "LaunchFromSharedResources",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": [
                    f"{ec2}::image/*",
                    f"{ec2}::snapshot/*",
                    f"{ec2}:*:security-group/*",
                    f"{ec2}:*:subnet/*",
                    f"{ec2}:*:capacity-reservation/*",
                ],
            },
            {
                "Sid": "LaunchFromOwnTemplates",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": f"{ec2}:*:launch-template/*",
                "Condition": _owned(scope, "ResourceTag"),
            },
            {
                "Sid": "CreateOwnedResources",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                "Resource": launched,
                "Condition": _owned_request(scope),
            },
            {
                "Sid": "TagOnCreate",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": launched,
                "Condition": _owned_request(
                    scope,
                    {"ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                ),
            },
            {
                "Sid": "TagOwnedInstances",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": f"{ec2}:*:instance/*",
                "Condition": {
                    **_owned(scope, "ResourceTag"),
                    "StringEqualsIfExists": {
                        "aws:RequestTag/eks:eks-cluster-name": scope.cluster_name
                    },
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                    },
                },
            },
            {
                "Sid": "DeleteOwnedResources",
                "Effect": "Allow",
                "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
                "Condition": _owned(scope, "ResourceTag"),
            },
        ),
        "iam-integration": document(
            {
                "Sid": "PassNodeRole",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": scope.node_role_arn,
                # EC2's principal in every partition (aws-cn spells it with .cn), as in
                # Karpenter's own CloudFormation (aws/karpenter-provider-aws,
                # website/content/en/docs/getting-started/getting-started-with-karpenter/
                # cloudformation.yaml, statement AllowPassingInstanceRole).
                "Condition": {"StringEquals": {"iam:PassedToService": EC2_PRINCIPALS}},
            },
            {
                "Sid": "CreateInstanceProfile",
                "Effect": "Allow",
                "Action": "iam:CreateInstanceProfile",
                "Resource": instance_profiles,
                "Condition": profile_condition("RequestTag"),
            },
            {
                "Sid": "TagInstanceProfile",
                "Effect": "Allow",
                "Action": "iam:TagInstanceProfile",
                "Resource": instance_profiles,
                "Condition": profile_condition("ResourceTag", "RequestTag"),
            },
            {
                "Sid": "ManageInstanceProfile",
                "Effect": "Allow",
                "Action": [
                    "iam:AddRoleToInstanceProfile",
                    "iam:RemoveRoleFromInstanceProfile",
                    "iam:DeleteInstanceProfile",
                ],
                "Resource": instance_profiles,
                "Condition": profile_condition("ResourceTag"),
            },
            {
                "Sid": "ReadInstanceProfiles",
                "Effect": "Allow",
                "Action": ["iam:GetInstanceProfile", "iam:ListInstanceProfiles"],
                "Resource": instance_profiles,
            },
        ),
        "eks-integration": document(
            {
                "Sid": "DescribeCluster",
                "Effect": "Allow",
                "Action": "eks:DescribeCluster",
                "Resource": scope.arn("eks", f"cluster/{scope.cluster_name}"),
            }
        ),
        "interruption": document(
            {
                "Sid": "ReadInterruptionQueue",
                "Effect": "Allow",
                "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
                "Resource": scope.queue_arn,
            }
        ),
        "resource-discovery": document(
            {
                "Sid": "DescribeInRegion",
                "Effect": "Allow",
                "Action": [
                    "ec2:DescribeCapacityReservations",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceTypeOfferings",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplates",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeSpotPriceHistory",
                    "ec2:DescribeSubnets",
                ],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:RequestedRegion": scope.region}},
            },
            {
                "Sid": "ResolveAmiAliases",
                "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": f"arn:{scope.partition}:ssm:{scope.region}::parameter/aws/service/*",
            },
            {
                "Sid": "ReadPrices",
                "Effect": "Allow",
                "Action": "pricing:GetProducts",
                "Resource": "*",
            },
        ),
    }


def interruption_queue_policy(queue_arn: str, rule_arns: list[str]) -> Document:
    """Only this cluster's EventBridge rules may deliver to the queue; nothing may reach it
    without TLS.

    ``aws:SourceArn`` pins the sender to the rules: without it any rule of any account
    could make EventBridge deliver here (the confused deputy), and a forged "spot
    interruption" makes Karpenter drain a healthy node. AWS's own example for an SQS
    target does the same
    (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-resource-based.html#eb-sqs-permissions).
    Karpenter's reference template also names ``sqs.amazonaws.com``, for which no sender
    exists here, so it is left out."""
    return document(
        {
            "Sid": "EventBridgeDelivers",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": sorted(rule_arns)}},
        },
        deny_without_tls("sqs:*", queue_arn),
    )
