"""``spotproof:eks:InterruptionQueue``: how Karpenter hears that a node is going away.

AWS announces a spot reclaim two minutes ahead, suggests rebalancing earlier still, and
schedules maintenance days ahead; all of it arrives as EventBridge events. Rules forward
them to an SQS queue that the Karpenter controller polls; on a message it cordons the
node, launches a replacement and drains the pods, which get their grace period to
checkpoint. Messages are useless after the node is gone, so the queue keeps them for
five minutes only.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from spotproof.cloud_tags import stack_tags
from spotproof.eks import karpenter_documents

RETENTION_SECONDS = 300

EVENTS: dict[str, tuple[str, str]] = {
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "instance-state-change": ("aws.ec2", "EC2 Instance State-change Notification"),
    "scheduled-change": ("aws.health", "AWS Health Event"),
}
"""Rule suffix -> (event source, detail type) of every event Karpenter acts on."""


def event_pattern(source: str, detail_type: str) -> str:
    return json.dumps({"source": [source], "detail-type": [detail_type]})


class InterruptionQueue(pulumi.ComponentResource):
    """An encrypted, short-retention SQS queue fed by the interruption EventBridge rules."""

    name: pulumi.Output[str]
    arn: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        cluster_name: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spotproof:eks:InterruptionQueue", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster = pulumi.Output.from_input(cluster_name)
        queue = aws.sqs.Queue(
            f"{name}-queue",
            name=cluster,
            message_retention_seconds=RETENTION_SECONDS,
            sqs_managed_sse_enabled=True,
            tags=stack_tags(pulumi.get_stack()),
            opts=child,
        )
        rules: list[aws.cloudwatch.EventRule] = []
        for suffix, (source, detail_type) in EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{suffix}",
                name=cluster.apply(lambda c, suffix=suffix: f"{c}-{suffix}"),
                description=cluster.apply(
                    lambda c, detail_type=detail_type: f"{detail_type} -> Karpenter ({c})"
                ),
                event_pattern=event_pattern(source, detail_type),
                tags=stack_tags(pulumi.get_stack()),
                opts=child,
            )
            aws.cloudwatch.EventTarget(
                f"{name}-{suffix}-target",
                rule=rule.name,
                arn=queue.arn,
                target_id="karpenter-interruption-queue",
                opts=child,
            )
            rules.append(rule)
        aws.sqs.QueuePolicy(
            f"{name}-policy",
            queue_url=queue.url,
            policy=pulumi.Output.all(queue.arn, *(rule.arn for rule in rules)).apply(
                lambda arns: json.dumps(
                    karpenter_documents.interruption_queue_policy(arns[0], arns[1:])
                )
            ),
            opts=child,
        )
        self.name = queue.name
        self.arn = queue.arn
        self.register_outputs({"name": self.name, "arn": self.arn})
