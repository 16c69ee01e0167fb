"""A fleet's pools as every cloud declares them: pool classes, capacity, taints, the
system pool and what a GPU pool tells the cloud-neutral code. Each cloud's section adds
its own pool types (``fleet.gke``, ``fleet.eks``, ``fleet.aks``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import Checked, ConfigObject, read_settings, setting
from spotproof.fleet.readers import check_label, enumeration, integer, items, labels


class PoolClass(StrEnum):
    """What a pool is for; the scheduling contract gives each class its taints and labels."""

    SYSTEM = "system"
    """On-demand nodes for cluster add-ons; tainted ``CriticalAddonsOnly`` so nothing else lands."""
    SPOT_GPU = "spot-gpu"
    """Spot/preemptible GPU nodes: cheap, reclaimed with seconds of notice."""
    FLEX_START = "flex-start"
    """GKE DWS flex-start GPU nodes: obtained when capacity frees up, kept for a bounded run."""
    ON_DEMAND_GPU = "on-demand-gpu"
    """Regular GPU nodes: the fallback when spot capacity is gone."""


class Capacity(StrEnum):
    """How a GPU pool's nodes are bought."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


class TaintEffect(StrEnum):
    """Kubernetes taint effects, spelled as Kubernetes spells them."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


def capacity_class(capacity: Capacity) -> PoolClass:
    """The pool class of GPU capacity bought this way."""
    return PoolClass.SPOT_GPU if capacity is Capacity.SPOT else PoolClass.ON_DEMAND_GPU


@dataclass(frozen=True)
class Taint:
    """A node taint. Not judged on its own (the scheduling contract's taints use reserved
    prefixes); a pool judges its ``extra_taints`` as the stack's ``extraTaints``."""

    key: str
    value: str
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    def config_text(self) -> str:
        """As stack config writes a taint: ``key=value:Effect``."""
        effect = self.effect.value if isinstance(self.effect, TaintEffect) else self.effect
        return f"{self.key}={self.value}:{effect}"


def taint(key: str, raw: Any) -> Taint:
    match = re.fullmatch(r"([^=:]+)=([^=:]*):([A-Za-z_]+)", raw) if isinstance(raw, str) else None
    if not match:
        raise SpecError(key, raw, "not a taint", "key=value:Effect, e.g. team=research:NoSchedule")
    taint_key, value, effect = match.groups()
    if effect not in TaintEffect._value2member_map_:
        raise SpecError(key, raw, f"unknown taint effect {effect}", ", ".join(TaintEffect))
    check_label(key, taint_key, value)
    return Taint(taint_key, value, TaintEffect(effect))


def taints(key: str, raw: Any) -> tuple[Taint, ...]:
    return tuple(taint(item_key, item) for item_key, item in items(key, raw))


def _on_demand(key: str, raw: Any) -> Capacity:
    if raw != Capacity.ON_DEMAND.value:
        raise SpecError(
            key, raw, "the system pool runs cluster add-ons and cannot be spot", "on-demand"
        )
    return Capacity.ON_DEMAND


@dataclass(frozen=True)
class SystemPool(Checked):
    """The on-demand pool that runs cluster add-ons and nothing else.

    Each cloud states its machine type key and default in a subclass
    (``GkeSystemPool``, ``EksSystemPool``, ``AksSystemPool``).
    """

    machine_type: str
    min_nodes: int = setting("minNodes", integer(1, 1000), 1)
    """Nodes kept; at least 1 so add-ons always have a home."""
    max_nodes: int = setting(
        "maxNodes", integer(1, 1000), None, derived_default=lambda read: max(3, read["min_nodes"])
    )
    """Upper bound; defaults to 3, or ``minNodes`` when that is larger."""
    disk_gb: int = setting("diskGb", integer(20, 65536), 100)
    capacity: Capacity = setting("capacity", _on_demand, Capacity.ON_DEMAND)
    """Always on-demand: add-ons (CoreDNS, the autoscaler, Karpenter) would go down with
    every reclaim, and AKS refuses a spot pool as the default pool
    (``articles/aks/spot-node-pool.md``). Accepted only to refuse ``spot`` by name."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> SystemPool:
        return system_pool(cls)(key, raw)


def system_pool(cls: type[SystemPool]) -> Callable[[str, Any], SystemPool]:
    """The config reader of a cloud's system pool type."""

    def parse(key: str, raw: Any) -> SystemPool:
        obj = ConfigObject(key, raw, fields_of=cls)
        values = read_settings(cls, obj)
        check_node_range(obj, values["min_nodes"], values["max_nodes"])
        obj.finish()
        return cls(**values)

    return parse


@dataclass(frozen=True, kw_only=True)
class CapacityPool(Checked):
    """What every cloud's GPU pool of spot or on-demand capacity shares (its cloud's type
    adds the machine shape and sizes)."""

    capacity: Capacity = setting("capacity", enumeration(Capacity), Capacity.SPOT)
    extra_taints: tuple[Taint, ...] = setting("extraTaints", taints, ())
    """Taints on top of the contract's, e.g. to dedicate a pool to one team."""
    extra_labels: dict[str, str] = setting("extraLabels", labels, factory=dict)

    @property
    def pool_class(self) -> PoolClass:
        return capacity_class(self.capacity)

    @property
    def queued(self) -> bool:
        """Spot and on-demand nodes come to any pending pod that fits."""
        return False

    @property
    def reclaim_grace_seconds(self) -> int | None:
        """Seconds a reclaim of this pool's nodes leaves non-system pods, where the pool
        sets it (a GKE spot pool's shutdown period); None: the cloud's own
        (``catalog.GRACE_PERIOD_SECONDS``), or no reclaim."""
        return None


class GpuPoolSpec(Protocol):
    """What every cloud's GPU pool tells the cloud-neutral code."""

    @property
    def name(self) -> str: ...

    @property
    def gpus_per_node(self) -> int: ...

    @property
    def pool_class(self) -> PoolClass: ...

    @property
    def queued(self) -> bool:
        """Nodes come only through a ProvisioningRequest (GKE queued provisioning)."""
        ...

    @property
    def reclaim_grace_seconds(self) -> int | None:
        """What a reclaim leaves non-system pods, where the pool sets it."""
        ...


def shortest_reclaim_grace(pools: Iterable[GpuPoolSpec], cloud_grace: int) -> int:
    """What a reclaim leaves a pod that may land on any of ``pools``: the shortest of
    their graces, each pool's own or the cloud's (``cloud_grace``)."""
    return min((pool.reclaim_grace_seconds or cloud_grace for pool in pools), default=cloud_grace)


def check_node_range(obj: ConfigObject, min_nodes: int, max_nodes: int) -> None:
    if max_nodes < min_nodes:
        raise SpecError(
            obj.key_of("maxNodes"),
            max_nodes,
            f"below minNodes ({min_nodes})",
            f"a number >= {min_nodes}",
        )
