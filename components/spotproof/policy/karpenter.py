"""Rules for Karpenter NodePools (``karpenter.sh/v1``), whichever cloud's provider runs
them: EKS's Karpenter and AKS node auto-provisioning read the same NodePool API."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof import scheduling
from spotproof.fleet.pools import PoolClass
from spotproof.policy.base import PlannedResource, ResourceRule, StackRule
from spotproof.scheduling import node_shapes

NODE_POOL = node_shapes.KARPENTER_NODE_POOL


def gpu_pool_safe(inputs: Mapping[str, Any]) -> Iterator[str]:
    spec = inputs.get("spec") or {}
    shape = node_shapes.karpenter_node_pool(inputs)
    if shape.spot:
        spot = scheduling.contract(PoolClass.SPOT_GPU).taints[0]
        if spot not in shape.taints:
            yield (
                f"a NodePool that launches spot must taint {spot.key}={spot.value}:NoSchedule; "
                "untolerating pods (system add-ons among them) could land on it"
            )
    if not (spec.get("limits") or {}).get(scheduling.GPU_RESOURCE):
        yield f"limits must cap {scheduling.GPU_RESOURCE}: without it spend has no ceiling"
    if (spec.get("disruption") or {}).get("consolidationPolicy") != "WhenEmpty":
        yield "consolidationPolicy must be WhenEmpty: consolidating busy GPU nodes kills training"


def fallback_below_spot(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """The highest-weight NodePool that fits wins; on-demand must lose to every spot pool."""
    pools = [
        (
            r.name,
            (r.inputs.get("spec") or {}).get("weight") or 0,
            "spot" in node_shapes.capacity_types(r.inputs),
        )
        for r in resources
        if r.type == NODE_POOL
    ]
    spot_weights = [weight for _, weight, spot in pools if spot]
    for name, weight, spot in pools:
        if spot_weights and not spot and weight >= min(spot_weights):
            yield (
                name,
                f"on-demand NodePool weight {weight} is not below every spot pool's "
                f"({min(spot_weights)})",
            )


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "karpenter-gpu-pool-safe",
        "GPU NodePools are tainted, capped and never consolidate busy nodes.",
        NODE_POOL,
        gpu_pool_safe,
    ),
)

STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "karpenter-fallback-below-spot",
        "On-demand NodePools are only a fallback.",
        fallback_below_spot,
    ),
)
