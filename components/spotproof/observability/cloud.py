"""What a cloud's managed Prometheus evaluates beyond the rules every cloud shares: the
interface each cloud's module here (``observability.gke``, ``eks``, ``aks``) fills in, found
through ``spotproof.clouds`` by :func:`~spotproof.observability.rules.rule_groups`.

A group belongs here when it reads a metric that only some clouds' Prometheus sees: the
cloud's own reclaim count (Karpenter's, where it runs in the cluster and is scraped) or
the batch queue's age (where the queue service reports one as a metric the managed
Prometheus reads). A cloud whose Prometheus sees neither says None for both, and the
shared rules stand in (``observability.queues``: the workers' own stall alert).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spotproof.fleet.monitoring import Monitoring
from spotproof.observability.model import RuleGroup


@dataclass(frozen=True)
class CloudRules:
    """One cloud's groups beyond the shared ones; None where its Prometheus cannot see the
    metric the group reads."""

    reclaims: Callable[[Monitoring, float], RuleGroup] | None
    """The cloud's own count of spot reclaims against the reclaims per node-hour the
    stack's checkpoint advice assumes (``observability.cloud_reclaims``)."""
    queue_age: Callable[[Monitoring, str], RuleGroup] | None
    """The age of the stack's batch queue's oldest item, given the queue as the stack names
    it (``observability.queues``); asked for only with batch work."""
