"""``spotproof:eks:WorkQueue``: the SQS queue batch workers pull from, its dead-letter
queue, and the two roles that touch it (the workers', KEDA's).

Facts this relies on (SQS developer guide and API reference; pulumi-aws ``sqs.Queue``):

- The visibility timeout (0-43200 s) is the lease a worker's heartbeat extends; the
  redrive policy moves an item to the dead-letter queue after ``maxReceiveCount``
  receives (1-1000), and the dead-letter queue's redrive-allow policy admits this
  source queue only.
- A standard queue's message keeps its *original* enqueue time when it is dead-lettered,
  so the dead-letter queue keeps messages for 14 days, the most SQS allows, and the work
  queue at most 13 ("Setting-up dead-letter queue retention").
- Both queues are encrypted with SQS-managed keys and deny every request without TLS
  (``aws:SecureTransport``, SQS security best practices).
- Both roles are assumed through EKS Pod Identity, trust pinned to one service account of
  one cluster (``iam_documents.pod_identity_trust``). The worker's may consume this queue
  and read and create objects under the results prefix, never delete; KEDA's may read the
  queue's attributes only. KEDA's ``aws`` pod identity with ``identityOwner`` unset acts
  with the operator pod's own credentials (``catalog.keda.TRIGGER_IDENTITY``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from spotproof.catalog import keda
from spotproof.cloud_tags import stack_tags
from spotproof.eks import iam_documents
from spotproof.eks.roles import pod_identity_role
from spotproof.fleet import BatchSpec
from spotproof.kube.batch import QueueScaler, WorkQueueBinding
from spotproof.kube.workload import ServiceAccountRef, WorkloadIdentity

DEAD_LETTER_RETENTION_SECONDS = 14 * 86400
"""The longest SQS keeps a message (``MessageRetentionPeriod``: 60 s to 1,209,600 s)."""


@dataclass
class WorkQueueArgs:
    batch: BatchSpec
    region: str
    cluster_name: pulumi.Input[str]
    """The EKS cluster whose pods assume the roles (it runs the Pod Identity agent)."""
    bucket_name: pulumi.Input[str]
    """The stack's checkpoint bucket; results go under ``batch.results_prefix``."""
    bucket_arn: pulumi.Input[str]
    kms_key: str | None
    """The bucket's KMS key, if it encrypts with one: the worker needs to use it."""
    worker: ServiceAccountRef
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (queues and IAM roles); default the
    component's name. Two components in one account and region need different prefixes."""


def work_queue_name(prefix: str) -> str:
    """The work queue's name, known without the queue: the stack's rules and its queue age
    alarm are given it (``eks.monitoring.for_cluster``)."""
    return f"{prefix}-work"


class WorkQueue(pulumi.ComponentResource):
    """An encrypted, TLS-only work queue and dead-letter queue, the worker's and KEDA's
    roles, and what the workers and KEDA are told about them."""

    binding: WorkQueueBinding
    keda_identity: pulumi.Output[dict[str, Any]]
    """The KEDA chart's ``podIdentity`` values: none, Pod Identity needs no annotation."""

    def __init__(
        self, name: str, args: WorkQueueArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:eks:WorkQueue", name, None, opts)
        self._prefix = args.name_prefix or name
        batch, prefix, region = args.batch, self._prefix, args.region
        child = pulumi.ResourceOptions(parent=self)
        tags = stack_tags(pulumi.get_stack(), purpose="batch")

        dead = aws.sqs.Queue(
            f"{name}-dead",
            name=f"{prefix}-work-dead",
            region=region,
            sqs_managed_sse_enabled=True,
            message_retention_seconds=DEAD_LETTER_RETENTION_SECONDS,
            tags=tags,
            opts=child,
        )
        queue = aws.sqs.Queue(
            f"{name}-queue",
            name=work_queue_name(prefix),
            region=region,
            sqs_managed_sse_enabled=True,
            visibility_timeout_seconds=batch.lease_seconds,
            message_retention_seconds=batch.retention_days * 86400,
            redrive_policy=dead.arn.apply(
                lambda arn: json.dumps(
                    {"deadLetterTargetArn": arn, "maxReceiveCount": batch.max_deliveries}
                )
            ),
            tags=tags,
            opts=child,
        )
        aws.sqs.RedriveAllowPolicy(
            f"{name}-dead-admits-work",
            queue_url=dead.url,
            region=region,
            redrive_allow_policy=queue.arn.apply(
                lambda arn: json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [arn]})
            ),
            opts=child,
        )
        for suffix, each in (("queue", queue), ("dead", dead)):
            aws.sqs.QueuePolicy(
                f"{name}-{suffix}-tls-only",
                queue_url=each.url,
                region=region,
                policy=each.arn.apply(lambda arn: json.dumps(iam_documents.queue_tls_only(arn))),
                opts=child,
            )

        worker = pod_identity_role(
            f"{name}-worker",
            cluster_name=args.cluster_name,
            stack=pulumi.get_stack(),
            opts=child,
            role_name=f"{prefix}-batch",
            pod=args.worker,
            policy=pulumi.Output.all(queue.arn, args.bucket_arn).apply(
                lambda arns: iam_documents.batch_worker_access(
                    arns[0], arns[1], batch.results_prefix, args.kms_key
                )
            ),
            description="Consumes the work queue; reads and creates results under one prefix.",
        )
        pod_identity_role(
            f"{name}-keda",
            cluster_name=args.cluster_name,
            stack=pulumi.get_stack(),
            opts=child,
            role_name=f"{prefix}-keda",
            pod=ServiceAccountRef(keda.NAMESPACE, keda.OPERATOR_SERVICE_ACCOUNT),
            policy=queue.arn.apply(iam_documents.queue_depth_reader),
            description="Reads the work queue's depth for KEDA.",
        )
        self.keda_identity = pulumi.Output.from_input({})
        self.binding = WorkQueueBinding(
            queue_url=queue.name.apply(lambda queue_name: f"sqs://{queue_name}"),
            results_url=pulumi.Output.from_input(args.bucket_name).apply(
                lambda bucket: f"s3://{bucket}/{batch.results_prefix}"
            ),
            identity=WorkloadIdentity(
                service_account=args.worker, cloud_identity=worker.arn, granted_by=(self,)
            ),
            scaler=QueueScaler(
                "aws-sqs-queue",
                queue.url.apply(
                    lambda url: {
                        "queueURL": url,
                        "awsRegion": region,
                        "queueLength": str(batch.items_per_worker),
                    }
                ),
            ),
            environment={"AWS_REGION": region, "AWS_DEFAULT_REGION": region},
            ready=[self],
        )
        self.register_outputs({"queue_url": queue.url, "dead_letter_queue_url": dead.url})
