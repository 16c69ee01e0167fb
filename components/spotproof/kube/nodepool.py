"""A Karpenter ``karpenter.sh/v1`` NodePool for one GPU pool, whichever cloud's provider
launches its nodes (EKS's Karpenter, AKS node auto-provisioning). The caller adds what is
its cloud's own: the node class it names and the requirements that pick instances.

**Fallback: weighted pools, not one pool with both capacity types.** Spot and on-demand
get a NodePool each, so each has its own GPU limit, taints and disruption policy; spot
work accepts both through node affinity and the higher ``weight`` (spot) is tried first.

**Disruption fit for long training.** ``WhenEmpty`` consolidation never moves a busy GPU
node to save money; budgets let empty nodes go at once and replace drifted nodes one at a
time. ``terminationGracePeriod`` bounds a reclaim's drain so that it still reaches the
trainer (https://karpenter.sh/docs/concepts/disruption/).
"""

from __future__ import annotations

from typing import Any, Protocol

from spotproof import scheduling
from spotproof.catalog import labels as platform_labels
from spotproof.fleet import Capacity, PoolClass, Taint

API_VERSION = "karpenter.sh/v1"
CONSOLIDATE_AFTER = {Capacity.SPOT: "5m", Capacity.ON_DEMAND: "1m"}
"""How long a node must stay empty before it goes: spot waits for the next job of a
sweep; an on-demand fallback node is expensive and goes sooner."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "spotproof"}


class KarpenterGpuPool(Protocol):
    """What every cloud's Karpenter GPU pool spec gives its NodePool."""

    name: str
    capacity: Capacity
    weight: int
    gpu_limit: int
    expire_after_hours: int
    extra_taints: tuple[Taint, ...]
    extra_labels: dict[str, str]

    @property
    def pool_class(self) -> PoolClass: ...


def capacity_type(capacity: Capacity) -> str:
    """Karpenter's ``karpenter.sh/capacity-type`` value."""
    return "spot" if capacity is Capacity.SPOT else "on-demand"


def node_pool(
    pool: KarpenterGpuPool,
    *,
    node_class_ref: dict[str, str],
    requirements: list[dict[str, Any]],
    termination_grace_seconds: int,
) -> dict[str, Any]:
    """The NodePool manifest: the contract's taints and labels, the GPU limit, the weight,
    a capacity-type requirement ahead of the cloud's ``requirements``."""
    contract = scheduling.contract(pool.pool_class)
    taints = [*contract.taints, *pool.extra_taints]
    capacity = {
        "key": platform_labels.KARPENTER_CAPACITY_LABEL,
        "operator": "In",
        "values": [capacity_type(pool.capacity)],
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": pool.name, "labels": dict(MANAGED_BY)},
        "spec": {
            "weight": pool.weight,
            "limits": {scheduling.GPU_RESOURCE: str(pool.gpu_limit)},
            "template": {
                "metadata": {"labels": {**contract.labels, **pool.extra_labels}},
                "spec": {
                    "nodeClassRef": node_class_ref,
                    "requirements": [capacity, *requirements],
                    "taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect.value} for t in taints
                    ],
                    "expireAfter": f"{pool.expire_after_hours}h",
                    "terminationGracePeriod": f"{termination_grace_seconds}s",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": CONSOLIDATE_AFTER[pool.capacity],
                "budgets": [
                    {"nodes": "100%", "reasons": ["Empty"]},
                    {"nodes": "1", "reasons": ["Drifted"]},
                ],
            },
        },
    }
