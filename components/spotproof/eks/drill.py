"""``spotproof:eks:DrillGrant``: who may interrupt this cluster's Spot instances with
``spotproof drill``.

An AWS FIS experiment template with one action, ``aws:ec2:send-spot-instance-interruptions``
(two minutes' notice), whose target is every running Spot instance tagged with the
cluster's tag and the drill's target tag; the role FIS assumes to run it, which may
interrupt only such instances; and a managed policy for whoever runs drills, attached to
the stack's principals (IAM role ARNs) if it names any. The drill tags the one instance it
reclaims and starts the template (``spotproof.drill.reclaim.eks``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from spotproof.cloud_tags import stack_tags
from spotproof.eks import drill_documents
from spotproof.policy.eks_drill import (
    FIS_ACTION,
    FIS_TARGET_KEY,
    FIS_TARGET_TYPE,
    NOTICE,
    OWNED,
    TARGET_TAG,
    TARGET_VALUE,
    cluster_tag,
)

TARGET = "drill-target"
"""The template's name for its one target, which its action refers to."""


@dataclass
class DrillGrantArgs:
    cluster_name: str
    """The EKS cluster, whose Karpenter-launched instances carry its tag."""
    region: str
    principals: Sequence[str] = ()
    """IAM role ARNs the operator policy is attached to; none attaches it to nobody."""
    name_prefix: str | None = None
    """Starts the IAM role's and policy's names; default the component's name."""


def role_name(arn: str) -> str:
    """The role name an attachment takes: the ARN's last segment, after any path."""
    return arn.rpartition("/")[2]


class DrillGrant(pulumi.ComponentResource):
    """The experiment template, its role and the operator policy; :attr:`outputs` is the
    stack output ``drill`` on EKS (``spotproof.drill.reclaim.eks.Grant``, camelCase)."""

    outputs: dict[str, pulumi.Input[str]]

    def __init__(
        self, name: str, args: DrillGrantArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:eks:DrillGrant", name, None, opts)
        prefix, cluster, region = args.name_prefix or name, args.cluster_name, args.region
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        tags = stack_tags(pulumi.get_stack(), purpose="drill")

        role = aws.iam.Role(
            f"{name}-fis",
            name=f"{prefix}-drill-fis",
            description=f"FIS interrupts {cluster}'s drill target (spotproof drill)",
            assume_role_policy=pulumi.Output.all(partition, account).apply(
                lambda parts: json.dumps(drill_documents.fis_trust(parts[0], region, parts[1]))
            ),
            tags=tags,
            opts=child,
        )
        interrupt = aws.iam.RolePolicy(
            f"{name}-fis-interrupt",
            role=role.id,
            policy=pulumi.Output.all(partition, account).apply(
                lambda parts: json.dumps(
                    drill_documents.fis_interrupt(parts[0], region, parts[1], cluster)
                )
            ),
            opts=child,
        )
        # Input names as pulumi-aws 7 ``fis.ExperimentTemplate`` takes them: an action's
        # ``target`` names the target by the key its action expects (``SpotInstances``),
        # a target selects by ``resource_tags`` and ``filters`` (``State.Name``, a path of
        # DescribeInstances' answer), and ``stop_conditions`` must name at least one
        # source: ``none`` for a drill, which a person watches and stops.
        template = aws.fis.ExperimentTemplate(
            f"{name}-experiment",
            region=region,
            description=f"spotproof drill: interrupt {cluster}'s tagged Spot instance",
            role_arn=role.arn,
            actions=[
                {
                    "name": "interrupt",
                    "action_id": FIS_ACTION,
                    "description": "Spot interruption notice, then the interruption",
                    "parameters": [{"key": "durationBeforeInterruption", "value": NOTICE}],
                    "target": {"key": FIS_TARGET_KEY, "value": TARGET},
                }
            ],
            targets=[
                {
                    "name": TARGET,
                    "resource_type": FIS_TARGET_TYPE,
                    "selection_mode": "ALL",
                    "resource_tags": [
                        {"key": cluster_tag(cluster), "value": OWNED},
                        {"key": TARGET_TAG, "value": TARGET_VALUE},
                    ],
                    "filters": [{"path": "State.Name", "values": ["running"]}],
                }
            ],
            stop_conditions=[{"source": "none"}],
            tags=tags,
            # FIS checks the role when an experiment starts; it can do its job only once
            # its policy exists.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[interrupt]),
        )
        operator = aws.iam.Policy(
            f"{name}-operator",
            name=f"{prefix}-drill-operator",
            description=f"Run spotproof drill on {cluster}: tag its target, start the template",
            policy=pulumi.Output.all(partition, account, template.id).apply(
                lambda parts: json.dumps(
                    drill_documents.drill_operator(parts[0], region, parts[1], cluster, parts[2])
                )
            ),
            tags=tags,
            opts=child,
        )
        for arn in args.principals:
            aws.iam.RolePolicyAttachment(
                f"{name}-operator-{role_name(arn)}",
                role=role_name(arn),
                policy_arn=operator.arn,
                opts=child,
            )
        self.outputs = {
            "region": region,
            "experimentTemplateId": template.id,
            "targetTagKey": TARGET_TAG,
            "operatorPolicyArn": operator.arn,
        }
        self.register_outputs(dict(self.outputs))
