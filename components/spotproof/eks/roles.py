"""The two shapes of EKS role here: one with AWS managed policies attached (nodes, the
cluster), and one a pod assumes through EKS Pod Identity with its own inline policy."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pulumi
import pulumi_aws as aws

from spotproof.cloud_tags import stack_tags
from spotproof.eks import iam_documents
from spotproof.kube.workload import ServiceAccountRef


def role(
    name: str,
    *,
    role_name: str,
    trust: pulumi.Input[iam_documents.Document],
    partition: pulumi.Input[str],
    managed_policies: Iterable[str] = (),
    description: str,
    opts: pulumi.ResourceOptions,
) -> tuple[aws.iam.Role, list[aws.iam.RolePolicyAttachment]]:
    """A role named ``role_name`` that ``trust`` may assume, with AWS managed policies by
    name (``AmazonEKSWorkerNodePolicy``). Returns the attachments too, so dependents can
    wait until the role can actually do its job."""
    created = aws.iam.Role(
        name,
        name=role_name,
        description=description,
        assume_role_policy=pulumi.Output.from_input(trust).apply(json.dumps),
        opts=opts,
    )
    attachments = [
        aws.iam.RolePolicyAttachment(
            f"{name}-{policy}",
            role=created.name,
            policy_arn=pulumi.Output.from_input(partition).apply(
                lambda p, policy=policy: iam_documents.MANAGED_POLICY.format(
                    partition=p, name=policy
                )
            ),
            opts=opts,
        )
        for policy in managed_policies
    ]
    return created, attachments


def pod_identity_role(
    name: str,
    *,
    role_name: str,
    cluster_name: pulumi.Input[str],
    pod: ServiceAccountRef,
    policy: pulumi.Input[iam_documents.Document],
    description: str,
    stack: str,
    opts: pulumi.ResourceOptions,
    policy_suffix: str = "policy",
) -> aws.iam.Role:
    """A role only the service account ``pod`` of one cluster assumes, through EKS Pod
    Identity (``iam_documents.pod_identity_trust``), with ``policy`` inline (the resource
    ``<name>-<policy_suffix>``) and the association that hands it to the pod."""
    tags = stack_tags(stack)
    role = aws.iam.Role(
        name,
        name=role_name,
        description=description,
        assume_role_policy=pulumi.Output.from_input(cluster_name).apply(
            lambda cluster: json.dumps(
                iam_documents.pod_identity_trust(cluster, pod.namespace, pod.name)
            )
        ),
        tags=tags,
        opts=opts,
    )
    aws.iam.RolePolicy(
        f"{name}-{policy_suffix}",
        role=role.id,
        policy=pulumi.Output.from_input(policy).apply(json.dumps),
        opts=opts,
    )
    aws.eks.PodIdentityAssociation(
        f"{name}-identity",
        cluster_name=cluster_name,
        namespace=pod.namespace,
        service_account=pod.name,
        role_arn=role.arn,
        tags=tags,
        opts=opts,
    )
    return role
