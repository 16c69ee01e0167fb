"""Reclaims counted by the cloud's side, where a stack's Prometheus can read them: on EKS,
Karpenter's, per spot GPU node-hour, against the rate the checkpoint advice assumes.

The trainers' own count (``rules``, ``SpotproofReclaimRateAboveAssumed``) is rough on
purpose: every stop signal and every resume from a periodic checkpoint, per pod-hour.
Karpenter counts what the cloud did to the cluster's own nodes, each once, per node:
``karpenter_nodeclaims_disrupted_total{reason="spot_interrupted"}`` goes up by one for each
NodeClaim it deletes on a spot interruption warning (aws/karpenter-provider-aws v1.6.3,
13242ea, ``pkg/controllers/interruption/controller.go`` ``deleteNodeClaim``, labels
``reason`` (the message kind, ``spot_interrupted`` in ``messages/types.go``), ``nodepool``
and ``capacity_type``; the same at v1.14.1, ``interruption/utils.go``; the counter itself
in kubernetes-sigs/karpenter v1.6.2 ``pkg/metrics/metrics.go``). Not
``karpenter_interruption_received_messages_total``: it counts every message on the queue
before Karpenter looks for the instance among its NodeClaims (``handleMessage``), another
cluster's in the same account and region among them. The series is born at 1, which
``promql.events`` counts; EKS stores series as scraped (Amazon Managed Service for
Prometheus), where GKE's drop-the-first-sample storage never applies.

Where it is not rendered: GKE runs no Karpenter; AKS's node auto-provisioning runs
Karpenter as a part of AKS it manages (``catalog.aks``), which the stack's PodMonitor does
not scrape.

The spot GPU node-hours are kube-state-metrics' ``kube_node_labels`` samples of the nodes
labelled ``spotproof.dev/pool-class: spot-gpu`` (the pool contract, ``scheduling``; the
label allowlisted by ``kube.kube_state_metrics``), times the scrape interval.
"""

from __future__ import annotations

from spotproof.fleet.monitoring import Monitoring
from spotproof.fleet.pools import PoolClass
from spotproof.observability.model import Rule, RuleGroup
from spotproof.observability.promql import EVALUATION_INTERVAL, alert, events, label_name
from spotproof.scheduling import POOL_CLASS_LABEL

WINDOW = "6h"
KARPENTER_DISRUPTED = "karpenter_nodeclaims_disrupted_total"
SPOT_INTERRUPTED = "spot_interrupted"
SPOT_INTERRUPTIONS = "cluster:spotproof_spot_interruptions:increase6h"
SPOT_NODE_HOURS = "cluster:spotproof_spot_node_hours:sum6h"
POOL_CLASS = label_name(POOL_CLASS_LABEL, prefix="label_")


def karpenter_group(monitoring: Monitoring, assumed_per_node_hour: float) -> RuleGroup:
    """Spot interruptions per spot GPU node-hour over 6 hours, and the alert when they run
    above ``reclaimRateFactor`` times the assumed rate (two at least: one is no rate)."""
    threshold = monitoring.reclaim_rate_factor * assumed_per_node_hour
    disrupted = f'{KARPENTER_DISRUPTED}{{reason="{SPOT_INTERRUPTED}"}}'
    spot_nodes = f'kube_node_labels{{{POOL_CLASS}="{PoolClass.SPOT_GPU}"}}'
    return RuleGroup(
        "spotproof-cloud-reclaims",
        EVALUATION_INTERVAL,
        (
            Rule(record=SPOT_INTERRUPTIONS, expr=f"sum by (cluster) ({events(disrupted, WINDOW)})"),
            Rule(
                record=SPOT_NODE_HOURS,
                expr=f"sum by (cluster) (count_over_time({spot_nodes}[{WINDOW}]))"
                f" * {monitoring.scrape_interval_seconds} / 3600",
            ),
            alert(
                "SpotproofSpotInterruptionRateAboveAssumed",
                f"({SPOT_INTERRUPTIONS} / {SPOT_NODE_HOURS} > {threshold:g})"
                f" and {SPOT_INTERRUPTIONS} >= 2",
                "warning",
                'Spot GPU nodes were interrupted {{ $value | printf "%.3g" }} times per '
                "node-hour over 6 hours",
                f"Counted by Karpenter, once per node the cloud reclaimed: over "
                f"{monitoring.reclaim_rate_factor:g} times the {assumed_per_node_hour:g} "
                "reclaims per node-hour the checkpoint advice assumes. Set "
                "spotproof:reclaimModel.reclaimsPerNodeHour to the observed rate and follow "
                "`spotproof plan`'s new interval, or spread the pools over more instance "
                "types and zones. See "
                "docs/monitoring.md#spotproofspotinterruptionrateaboveassumed.",
            ),
        ),
    )
