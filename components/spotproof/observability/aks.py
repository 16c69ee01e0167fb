"""AKS's groups beyond the shared rules (``observability.cloud``): none. Node
auto-provisioning's Karpenter is a part of AKS the stack's PodMonitor does not scrape, and
Azure Storage queues report no age (``observability.queues``).
"""

from __future__ import annotations

from spotproof.observability.cloud import CloudRules

RULES = CloudRules(reclaims=None, queue_age=None)
