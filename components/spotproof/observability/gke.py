"""GKE's groups beyond the shared rules (``observability.cloud``): Pub/Sub's oldest
unacknowledged message, which Managed Service for Prometheus reads as a Cloud Monitoring
metric. GKE runs no Karpenter, so no cloud-side reclaim count is read.
"""

from __future__ import annotations

from spotproof.observability.cloud import CloudRules
from spotproof.observability.queues import pubsub_queue_group

RULES = CloudRules(reclaims=None, queue_age=pubsub_queue_group)
