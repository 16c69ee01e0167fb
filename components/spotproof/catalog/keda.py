"""KEDA (kedacore/keda): autoscaling a Deployment on the depth of its work queue.

Facts from KEDA's v2.20.2 tag (kedacore/keda 68a5b50), its chart (kedacore/charts v2.20.2,
``keda/values.yaml``) and docs (kedacore/keda-docs ``content/docs/2.20``), each with the
file it comes from. Nothing here imports Pulumi or a cloud SDK.
"""

from __future__ import annotations

from spotproof.catalog.versions import Introduced

CHART = "keda"
REPOSITORY = "https://kedacore.github.io/charts"
"""``helm repo add kedacore https://kedacore.github.io/charts``; chart ``kedacore/keda``
(docs ``deploy.md``)."""
NAMESPACE = "keda"
OPERATOR_SERVICE_ACCOUNT = "keda-operator"
"""``serviceAccount.operator.name`` in the chart's values: the identity every
``podIdentity`` provider acts as unless told otherwise (below)."""

VERSIONS: tuple[str, ...] = (
    "2.17.0",
    "2.17.1",
    "2.17.2",
    "2.18.0",
    "2.18.1",
    "2.18.2",
    "2.18.3",
    "2.19.0",
    "2.20.0",
    "2.20.1",
    "2.20.2",
)
"""Chart versions (chart and app versions are equal) from 2.17.0, whose ``aws`` pod
identity with ``identityOwner`` unset means KEDA's own credentials (kedacore/keda#5061),
to 2.20.2, the latest release (tag of 2026-07-31). 2.20 is tested on Kubernetes
1.33-1.35 (docs ``operate/cluster.md``)."""

INTRODUCED: tuple[Introduced, ...] = (
    Introduced("ScaledObject", "spec.fallback.behavior", "2.20.0", "scalingModifiers"),
)
"""What the CRDs accept only from some release of :data:`VERSIONS` on (``config/crd/bases/``
at each tag; the chart's copies match): every field spotproof renders, and every other the
plan checks, is there from 2.17.0 to 2.20.2 (``catalog.versions``)."""

API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT = "ScaledObject"
TRIGGER_AUTHENTICATION = "TriggerAuthentication"

DEFAULT_MIN_REPLICAS = 0
DEFAULT_MAX_REPLICAS = 100
"""``minReplicaCount`` and ``maxReplicaCount`` when unset (docs
``reference/scaledobject-spec.md``); the admission webhook refuses min above max
(``apis/keda/v1alpha1/scaledobject_webhook.go``)."""

TRIGGERS: dict[str, tuple[str, ...]] = {
    "gcp-pubsub": ("subscriptionName",),
    "aws-sqs-queue": ("queueURL", "awsRegion"),
    "azure-queue": ("queueName", "accountName"),
}
"""Trigger types for the three work queues and the metadata each needs here
(``pkg/scalers/gcp_pubsub_scaler.go``, ``aws_sqs_queue_scaler.go``,
``azure_queue_scaler.go``): ``awsRegion`` has no default; ``accountName`` is required with
the ``azure-workload`` identity. ``gcp-pubsub`` is deprecated in favour of Google's
Prometheus endpoint but kept while Cloud Monitoring's MQL is (KEDA blog of 2025-09-15);
its ``mode`` defaults to ``SubscriptionSize`` (undelivered messages), and the old
``subscriptionSize`` key is refused since 2.20."""

TRIGGER_IDENTITY: dict[str, str] = {
    "gcp-pubsub": "gcp",
    "aws-sqs-queue": "aws",
    "azure-queue": "azure-workload",
}
"""``TriggerAuthentication.spec.podIdentity.provider`` each trigger is given here (the enum
is ``azure-workload | gcp | aws | aws-eks | none``, ``triggerauthentication_types.go``;
``azure-queue`` accepts only ``azure-workload`` or none). Each acts as the KEDA operator's
own service account (``keda/keda-operator``), not the scaled workload's: GCP through
Application Default Credentials in the operator pod (GKE Workload Identity,
``gcp-workload-identity.md``), Azure through the operator's federated identity
(``azure-ad-workload-identity.md``), AWS through the SDK's default credential chain with
``identityOwner`` unset (``keda``). KEDA documents IRSA for that chain; EKS Pod Identity
reaches the same chain through the agent's container credentials, which KEDA has not
documented (kedacore/keda#6706)."""

METRIC_READERS: dict[str, str] = {
    "gcp-pubsub": "roles/monitoring.viewer",
    "aws-sqs-queue": "sqs:GetQueueAttributes",
    "azure-queue": "Storage Queue Data Reader",
}
"""What the operator's identity needs to read the depth: the Pub/Sub scaler queries Cloud
Monitoring (``gcp/gcp_stackdriver_client.go``; docs ``gcp-workload-identity.md`` grant
``roles/monitoring.viewer``); the SQS scaler calls only ``GetQueueAttributes`` (docs
``authentication-providers/aws.md``); the Azure scaler calls Get Queue Metadata and Peek
Messages, which "Storage Queue Data Reader" (``queues/read``, ``queues/messages/read``)
covers."""

HPA_OWNERSHIP_REFUSED = True
"""The webhook refuses a ScaledObject whose target is already scaled by another
ScaledObject or by an HPA of its own (``scaledobject_webhook.go``), and the webhook fails
open by default (``webhooks.failurePolicy: Ignore``): the plan checks both."""

REPLICAS_OWNED_BY_SCALER = "spec.replicas"
"""A Deployment scaled by an autoscaler must not have its count reset by whoever applies
its manifest (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/,
"Migrating Deployments and StatefulSets to horizontal autoscaling"): a manifest applied
with ``kubectl`` leaves ``spec.replicas`` out. Left out, though, the API server defaults it
to 1 (https://kubernetes.io/docs/concepts/workloads/controllers/deployment/#replicas), so
one worker, perhaps on a GPU node bought for it, runs before KEDA first scales the
Deployment. A Pulumi program therefore creates it with ``replicas: 0`` and lists this path
in ``ignore_changes``: pulumi-kubernetes (4.9.0 and later, server-side apply) then drops
the field from every later apply once the scale subresource's manager owns it, or sends
the live count back (``handleSSAIgnoreFields``, ``provider/pkg/await/await.go``), so an
update never resets what KEDA set."""
