"""EKS's groups beyond the shared rules (``observability.cloud``): Karpenter runs in the
cluster and is scraped, so its count of spot interruptions is read. SQS's queue age is a
CloudWatch metric its Prometheus never sees (the EKS component raises a CloudWatch alarm
instead: ``eks.monitoring_documents.queue_age_alarm``).
"""

from __future__ import annotations

from spotproof.observability.cloud import CloudRules
from spotproof.observability.cloud_reclaims import karpenter_group

RULES = CloudRules(reclaims=karpenter_group, queue_age=None)
