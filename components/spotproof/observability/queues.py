"""The batch alerts, and each cloud's batch queue age: where a cloud's Prometheus can see
it, where it cannot, and what stands in.

GKE: Pub/Sub reports the subscription's oldest unacknowledged message, which Managed
Service for Prometheus reads as a Cloud Monitoring metric. EKS: SQS's age is a CloudWatch
metric its Prometheus never sees, so the EKS component raises a CloudWatch alarm instead
(``eks.monitoring_documents.queue_age_alarm``). AKS: Azure Storage queues report no age
at all (only hourly, account-wide counts: https://learn.microsoft.com/azure/storage/queues/
monitor-queue-storage-reference), so the workers' own stall alert is the signal there.
"""

from __future__ import annotations

import re

from spotproof.fleet.monitoring import Monitoring
from spotproof.observability.model import RuleGroup
from spotproof.observability.promql import EVALUATION_INTERVAL, NAMESPACE, alert, events
from spotproof.runtime.metrics import names

PUBSUB_OLDEST_UNACKED = "pubsub_googleapis_com:subscription_oldest_unacked_message_age"
"""Pub/Sub's ``subscription/oldest_unacked_message_age`` (seconds, a gauge sampled every 60 s:
https://cloud.google.com/monitoring/api/metrics_gcp_p_z#gcp-pubsub) as Managed Service for
Prometheus spells it: the first ``/`` becomes ``:``, every other ``.`` and ``/`` a ``_``
(https://cloud.google.com/stackdriver/docs/managed-prometheus/promql). A Cloud Monitoring
metric is seen only by a ``GlobalRules`` resource: ``Rules`` and ``ClusterRules`` add the
cluster's and namespace's labels to every selector, which Pub/Sub's series lack
(https://cloud.google.com/stackdriver/docs/managed-prometheus/rules-managed)."""
GLOBAL_GROUP = "spotproof-batch-queue"
"""The group that reads a Cloud Monitoring metric: on GKE a ``GlobalRules`` or an alert
policy sees it, a ``Rules`` or ``ClusterRules`` never does. It holds one alert and no
recording rule."""


def batch_group(monitoring: Monitoring) -> RuleGroup:
    window = f"{monitoring.queue_age_minutes}m"
    done = (names.ITEMS_DONE.name, names.ITEMS_ALREADY_DONE.name)
    # One ``unless`` per counter: joined by ``or``, a pod's second counter would be dropped
    # (the two share every label once ``increase()`` drops the name).
    progress = "".join(
        f"\nunless on ({NAMESPACE})\nsum by ({NAMESPACE}) ({events(counter, window)}) > 0"
        for counter in done
    )
    return RuleGroup(
        "spotproof-batch",
        EVALUATION_INTERVAL,
        (
            alert(
                "SpotproofBatchItemsDeadLettered",
                f"sum by ({NAMESPACE}) ({events(names.ITEMS_DEAD_LETTERED.name, '1h')}) > 0",
                "warning",
                "{{ $value }} batch items in {{ $labels.namespace }} went to the dead-letter "
                "queue in the last hour",
                "Each failed on every allowed delivery (or was malformed) and will not be "
                "retried. Read the worker's log for the item's error, fix the item or the "
                "code, then move the items back from the dead-letter queue. See "
                "docs/monitoring.md#spotproofbatchitemsdeadlettered.",
            ),
            alert(
                "SpotproofBatchWorkStalled",
                # Workers that were already there a window ago: a worker just started
                # has finished nothing yet without being stalled.
                f"sum by ({NAMESPACE})"
                f" (max_over_time({names.ITEMS_IN_FLIGHT.name}[{window}])) > 0"
                f"\nand on ({NAMESPACE})\n"
                f"count by ({NAMESPACE}) ({names.ITEMS_IN_FLIGHT.name} offset {window})" + progress,
                "warning",
                "Batch workers in {{ $labels.namespace }} held items but finished none in "
                f"{monitoring.queue_age_minutes} minutes",
                "Items are leased and handed back, failing or hanging: the queue's oldest "
                "message keeps ageing. Read the workers' logs and their "
                "spotproof_batch_items_failed_total and _handed_back_total. This alert "
                "cannot see a backlog with no worker running (the queue's own age can: see "
                "docs/monitoring.md#spotproofbatchworkstalled).",
            ),
        ),
    )


def pubsub_queue_group(monitoring: Monitoring, subscription: str) -> RuleGroup:
    match = re.fullmatch(r"projects/([^/]+)/subscriptions/([^/]+)", subscription)
    if not match:
        raise ValueError(f"not a Pub/Sub subscription path: {subscription!r}")
    project, name = match.groups()
    selector = (
        f'{PUBSUB_OLDEST_UNACKED}{{monitored_resource="pubsub_subscription",'
        f' project_id="{project}", subscription_id="{name}"}}'
    )
    return RuleGroup(
        GLOBAL_GROUP,
        EVALUATION_INTERVAL,
        (
            alert(
                "SpotproofBatchQueueMessagesTooOld",
                f"max by (project_id, subscription_id) ({selector}) > "
                f"{60 * monitoring.queue_age_minutes}",
                "warning",
                "The oldest unacknowledged item of {{ $labels.subscription_id }} is "
                "{{ $value | humanizeDuration }} old",
                f"Over this stack's {monitoring.queue_age_minutes} minutes: workers are "
                "missing (KEDA not scaling, GPU pods Pending) or cannot keep up. Check "
                "SpotproofGpuPodPendingTooLong, the KEDA ScaledObject's events and "
                "maxWorkers. See docs/monitoring.md#spotproofbatchqueuemessagestooold.",
            ),
        ),
    )
