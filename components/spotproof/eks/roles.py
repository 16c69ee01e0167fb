"""IAM roles with AWS managed policies attached: the one shape every EKS role here shares."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pulumi
import pulumi_aws as aws

from spotproof.eks import iam_documents


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
