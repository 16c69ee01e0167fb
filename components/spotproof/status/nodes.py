"""Where a pod runs: the node's pool, its spotproof pool class, and the capacity it is.

Capacity is read from the labels each platform writes on its nodes by itself (the drill's
``SPOT_LABELS`` and ``POOL_LABELS``, each cited there), then from spotproof's own pool-class
label, which every spotproof pool carries (``scheduling.POOL_CLASS_LABEL``). Flex-start is
GKE's ``cloud.google.com/gke-flex-start`` label (``catalog.labels``) or the flex-start
pool class; a node no label calls spot or flex-start is on-demand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import labels
from spotproof.drill.target import pool_of, spot_label
from spotproof.fleet.pools import PoolClass
from spotproof.scheduling import POOL_CLASS_LABEL

SPOT, FLEX_START, ON_DEMAND = "spot", "flex-start", "on-demand"


@dataclass(frozen=True)
class Placement:
    node: str
    pool: str
    pool_class: str
    """``spotproof.dev/pool-class`` of the node; empty on a node spotproof did not label."""
    capacity: str
    """``spot``, ``flex-start`` or ``on-demand``; ``gone`` when the node no longer exists."""


def capacity_of(node_labels: Mapping[str, str]) -> str:
    if spot_label(node_labels) is not None:
        return SPOT
    pool_class = node_labels.get(POOL_CLASS_LABEL, "")
    if node_labels.get(labels.GKE_FLEX_START_LABEL) == "true" or pool_class == PoolClass.FLEX_START:
        return FLEX_START
    return ON_DEMAND


def placement(name: str, node: Mapping[str, Any] | None) -> Placement:
    """The placement on node ``name``; ``node`` None when the API server has no such node
    (a reclaimed node is deleted with its VM)."""
    if node is None:
        return Placement(name, "", "", "gone")
    found = node["metadata"].get("labels") or {}
    return Placement(name, pool_of(found), found.get(POOL_CLASS_LABEL, ""), capacity_of(found))
