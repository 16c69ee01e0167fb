"""``spotproof:gke:WorkQueue``: the Pub/Sub queue batch workers pull from, its dead-letter
topic, and the two identities that touch it (the workers', KEDA's).

Facts this relies on, each from the reference it names:

- Subscription (pulumi-gcp ``pubsub.Subscription``; Pub/Sub ``Subscription`` reference):
  the ack deadline takes 10-600 s; ``enableExactlyOnceDelivery`` means an acknowledged
  message is not redelivered and only its latest ack ID is valid
  (https://cloud.google.com/pubsub/docs/exactly-once-delivery); messages are kept
  600 s to 31 days; without an ``expirationPolicy`` a subscription is *deleted after 31
  days without activity*, so an idle work queue would vanish with its backlog: the TTL is
  ``""``, never.
- Dead-lettering (``DeadLetterPolicy``: 5-100 delivery attempts): the Pub/Sub service
  agent ``service-<project number>@gcp-sa-pubsub.iam.gserviceaccount.com`` must be
  allowed to publish to the dead-letter topic and to acknowledge on the source
  subscription (https://cloud.google.com/pubsub/docs/dead-letter-topics), and "messages
  published to a topic with no subscriptions are lost", so the dead-letter topic has its
  own subscription, kept as long as Pub/Sub allows.
- The worker's Google service account may consume the one subscription
  (``roles/pubsub.subscriber``) and touch objects under the results prefix only:
  ``roles/storage.objectCreator`` (create, never overwrite or delete) and
  ``roles/storage.objectViewer``, each under an IAM condition on the object name.
  Listing is checked against the bucket, not an object, so the viewer's condition also
  admits the bucket itself: the worker can list names, and read and write nothing outside
  its prefix.
- KEDA's ``gcp-pubsub`` scaler reads the backlog from Cloud Monitoring as the KEDA
  operator (``catalog.keda``): its own service account with ``roles/monitoring.viewer``,
  bound to ``keda/keda-operator`` through Workload Identity, named in the chart's
  ``podIdentity.gcp`` values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from spotproof.catalog import keda
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import BatchSpec
from spotproof.gke.identity import annotations, bind_workload_identity, under_prefix
from spotproof.gke.names import service_account_id, service_account_member
from spotproof.kube.batch import QueueScaler, WorkQueueBinding
from spotproof.kube.workload import ServiceAccountRef, WorkloadIdentity

DEAD_LETTER_RETENTION = "2678400s"
"""31 days, the longest Pub/Sub keeps a message."""
SUBSCRIBER = "roles/pubsub.subscriber"
PUBLISHER = "roles/pubsub.publisher"
OBJECT_CREATOR = "roles/storage.objectCreator"
OBJECT_VIEWER = "roles/storage.objectViewer"
METRICS_VIEWER = keda.METRIC_READERS["gcp-pubsub"]


@dataclass
class WorkQueueArgs:
    batch: BatchSpec
    project: pulumi.Input[str]
    bucket_name: pulumi.Input[str]
    """The stack's checkpoint bucket; results go under ``batch.results_prefix``."""
    worker: ServiceAccountRef
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (topics, subscriptions, service
    accounts); default the component's name. Two components in one project need different
    prefixes."""


class WorkQueue(pulumi.ComponentResource):
    """A topic and an exactly-once subscription with a dead-letter topic, the worker's and
    KEDA's identities, and what the workers and KEDA are told about them."""

    binding: WorkQueueBinding
    keda_identity: pulumi.Output[dict[str, Any]]
    """The KEDA chart's ``podIdentity`` values."""

    def __init__(
        self, name: str, args: WorkQueueArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:WorkQueue", name, None, opts)
        self._prefix = args.name_prefix or name
        batch, project, prefix = args.batch, args.project, self._prefix
        child = pulumi.ResourceOptions(parent=self)
        labels = stack_tags(pulumi.get_stack(), purpose="batch")
        retention = f"{batch.retention_days * 86400}s"

        topic = gcp.pubsub.Topic(
            f"{name}-topic",
            name=f"{prefix}-work",
            project=project,
            message_retention_duration=retention,
            labels=labels,
            opts=child,
        )
        dead_topic = gcp.pubsub.Topic(
            f"{name}-dead-topic",
            name=f"{prefix}-work-dead",
            project=project,
            labels=labels,
            opts=child,
        )
        subscription = gcp.pubsub.Subscription(
            f"{name}-subscription",
            name=f"{prefix}-work",
            project=project,
            topic=topic.id,
            ack_deadline_seconds=batch.lease_seconds,
            enable_exactly_once_delivery=True,
            message_retention_duration=retention,
            expiration_policy={"ttl": ""},
            dead_letter_policy={
                "dead_letter_topic": dead_topic.id,
                "max_delivery_attempts": batch.max_deliveries,
            },
            labels=labels,
            opts=child,
        )
        gcp.pubsub.Subscription(
            f"{name}-dead-subscription",
            name=f"{prefix}-work-dead",
            project=project,
            topic=dead_topic.id,
            message_retention_duration=DEAD_LETTER_RETENTION,
            expiration_policy={"ttl": ""},
            labels=labels,
            opts=child,
        )

        number = gcp.organizations.get_project_output(
            project_id=project, opts=pulumi.InvokeOutputOptions(parent=self)
        ).number
        agent = number.apply(
            lambda n: f"serviceAccount:service-{n}@gcp-sa-pubsub.iam.gserviceaccount.com"
        )
        gcp.pubsub.TopicIAMMember(
            f"{name}-agent-publishes-dead-letters",
            project=project,
            topic=dead_topic.name,
            role=PUBLISHER,
            member=agent,
            opts=child,
        )
        gcp.pubsub.SubscriptionIAMMember(
            f"{name}-agent-forwards",
            project=project,
            subscription=subscription.name,
            role=SUBSCRIBER,
            member=agent,
            opts=child,
        )

        worker = self._worker(name, args, subscription, child)
        operator = self._keda_operator(name, args, child)
        self.keda_identity = operator.email.apply(
            lambda email: {"gcp": {"enabled": True, "gcpIAMServiceAccount": email}}
        )
        self.binding = WorkQueueBinding(
            queue_url=pulumi.Output.all(project, subscription.name).apply(
                lambda parts: f"pubsub://{parts[0]}/{parts[1]}"
            ),
            results_url=pulumi.Output.from_input(args.bucket_name).apply(
                lambda bucket: f"gs://{bucket}/{batch.results_prefix}"
            ),
            identity=worker,
            scaler=QueueScaler(
                "gcp-pubsub",
                subscription.name.apply(
                    lambda sub: {
                        "subscriptionName": sub,
                        "mode": "SubscriptionSize",
                        "value": str(batch.items_per_worker),
                    }
                ),
            ),
            ready=[self],
        )
        self.register_outputs({"subscription": subscription.name, "topic": topic.name})

    def _worker(
        self,
        name: str,
        args: WorkQueueArgs,
        subscription: gcp.pubsub.Subscription,
        child: pulumi.ResourceOptions,
    ) -> WorkloadIdentity:
        account = gcp.serviceaccount.Account(
            f"{name}-worker",
            account_id=service_account_id(self._prefix, "batch"),
            project=args.project,
            display_name=f"spotproof batch worker ({self._prefix})",
            description="Consumes the work queue; writes results under one prefix.",
            opts=child,
        )
        member = service_account_member(account.email)
        gcp.pubsub.SubscriptionIAMMember(
            f"{name}-worker-consumes",
            project=args.project,
            subscription=subscription.name,
            role=SUBSCRIBER,
            member=member,
            opts=child,
        )
        prefix = args.batch.results_prefix
        bucket = pulumi.Output.from_input(args.bucket_name)
        gcp.storage.BucketIAMMember(
            f"{name}-worker-creates-results",
            bucket=bucket,
            role=OBJECT_CREATOR,
            member=member,
            condition=under_prefix(bucket, prefix, listing=False),
            opts=child,
        )
        gcp.storage.BucketIAMMember(
            f"{name}-worker-reads-results",
            bucket=bucket,
            role=OBJECT_VIEWER,
            member=member,
            condition=under_prefix(bucket, prefix, listing=True),
            opts=child,
        )
        pod = args.worker
        bind_workload_identity(
            f"{name}-worker-workload-identity", account, args.project, pod, child
        )
        return WorkloadIdentity(
            service_account=pod,
            cloud_identity=account.email,
            service_account_annotations=annotations(account),
            granted_by=(self,),
        )

    def _keda_operator(
        self, name: str, args: WorkQueueArgs, child: pulumi.ResourceOptions
    ) -> gcp.serviceaccount.Account:
        account = gcp.serviceaccount.Account(
            f"{name}-keda",
            account_id=service_account_id(self._prefix, "keda"),
            project=args.project,
            display_name=f"spotproof KEDA operator ({self._prefix})",
            description="Reads the work queue's backlog from Cloud Monitoring.",
            opts=child,
        )
        gcp.projects.IAMMember(
            f"{name}-keda-reads-metrics",
            project=args.project,
            role=METRICS_VIEWER,
            member=service_account_member(account.email),
            opts=child,
        )
        operator = ServiceAccountRef(keda.NAMESPACE, keda.OPERATOR_SERVICE_ACCOUNT)
        bind_workload_identity(
            f"{name}-keda-workload-identity", account, args.project, operator, child
        )
        return account
