"""What a stack's monitoring is made of, whatever its cloud: the rules at the stack's
thresholds and reclaim rate, the namespaces whose pods are scraped, the dashboard's title.

Each cloud's ``HybridCluster`` asks :func:`stack_monitoring` once and hands the result to
its own ``Monitoring`` component; a program on a cluster spotproof did not create builds
that component from the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotproof.catalog import profile
from spotproof.fleet import FleetSpec
from spotproof.fleet.monitoring import Monitoring
from spotproof.kube.cluster import trainer_account
from spotproof.observability.model import RuleGroup
from spotproof.observability.rules import rule_groups


@dataclass(frozen=True)
class StackMonitoring:
    settings: Monitoring
    rule_groups: tuple[RuleGroup, ...]
    namespaces: tuple[str, ...]
    """Where the stack's workloads run (the trainer's namespace, the batch workers'): what
    the collector scrapes and where its traffic must be let in."""
    dashboard_title: str


def assumed_reclaims_per_node_hour(spec: FleetSpec) -> float:
    """The reclaim rate the stack's checkpoint advice assumes: its own
    (``spotproof:reclaimModel``), else the one its cloud publishes."""
    stated = spec.reclaim_model.reclaims_per_node_hour
    return stated if stated is not None else profile(spec.cloud).reclaims.per_node_hour


def stack_monitoring(spec: FleetSpec, *, batch_queue: str | None = None) -> StackMonitoring | None:
    """The stack's monitoring, or None when ``spotproof:monitoring.enabled`` is off.

    ``batch_queue``: with batch work, the queue whose age the rules watch where the cloud
    reports one (GKE: the subscription's path, ``projects/P/subscriptions/S``)."""
    settings = spec.monitoring
    if not settings.enabled:
        return None
    namespaces = {trainer_account(spec.smoke_test).namespace}
    if spec.batch is not None:
        namespaces.add(spec.batch.namespace)
    return StackMonitoring(
        settings=settings,
        rule_groups=rule_groups(
            settings,
            cloud=spec.cloud,
            assumed_reclaims_per_node_hour=assumed_reclaims_per_node_hour(spec),
            batch_queue=batch_queue if spec.batch is not None else None,
            namespaces=tuple(sorted(namespaces)),
        ),
        namespaces=tuple(sorted(namespaces)),
        dashboard_title=f"spotproof {spec.stack}",
    )
