"""The pools a plan would create: their nodes as the scheduler sees them, and how they
get nodes.

Built from the *rendered* pool resources (not from the spec), so that what is checked is
what would be deployed. The nodes' shapes come from :mod:`spotproof.scheduling.node_shapes`, the
readers the policy rules use too.

Each :class:`Pool` also carries its :class:`Scaling`: who creates its nodes (the GKE
cluster autoscaler, Karpenter, or nobody for a fixed node group), within which bounds and
zones. ``plan.scaleup`` and ``plan.preemption`` read that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from spotproof.catalog import aks as aks_catalog
from spotproof.fleet.pools import PoolClass, Taint
from spotproof.plan.recording.recorder import Recording
from spotproof.scheduling import POOL_CLASS_LABEL, fit, node_shapes
from spotproof.scheduling import aks as aks_shapes
from spotproof.scheduling import eks as eks_shapes
from spotproof.scheduling import gke as gke_shapes


class Provisioner(StrEnum):
    """What creates a pool's nodes when pods are pending."""

    GKE_AUTOSCALER = "GKE cluster autoscaler"
    AKS_AUTOSCALER = "AKS cluster autoscaler"
    KARPENTER = "Karpenter"
    NONE = "no autoscaler"
    """An EKS managed node group: its size changes only when someone changes it."""


@dataclass(frozen=True)
class Scaling:
    provisioner: Provisioner
    resource: str
    """The Pulumi resource name, for reports."""
    min_nodes: int
    """Nodes that always exist (per zone when :attr:`per_zone`)."""
    max_nodes: int | None
    """Most nodes (per zone when :attr:`per_zone`); None where only ``limits`` bound it
    (Karpenter)."""
    zones: tuple[str, ...] = ()
    """Where nodes may be created; empty when the pool inherits the cluster's zones."""
    per_zone: bool = False
    """``min_nodes``/``max_nodes`` were given per zone (GKE ``minNodeCount``)."""
    machine_type: str | None = None
    accelerator: str | None = None
    queued: bool = False
    """GKE queued provisioning: nodes only through a ProvisioningRequest."""
    limits: Mapping[str, str] = field(default_factory=dict)
    """Karpenter NodePool ``limits``."""
    termination_grace_seconds: int | None = None
    """Karpenter NodePool ``terminationGracePeriod``; None when unset (no bound)."""
    max_run_seconds: int | None = None
    """GKE flex-start ``maxRunDuration``."""


@dataclass(frozen=True)
class Pool:
    shape: fit.NodeShape
    scaling: Scaling

    @property
    def name(self) -> str:
        return self.shape.pool


def pools(recording: Recording) -> list[Pool]:
    """Sorted by pool name: registration order under mocks depends on timing."""
    scalings = {
        gke_shapes.NODE_POOL: _gke_scaling,
        eks_shapes.NODE_GROUP: _eks_scaling,
        node_shapes.KARPENTER_NODE_POOL: _karpenter_scaling,
        aks_shapes.AGENT_POOL: _aks_scaling,
    }
    found = [
        Pool(
            _named(node_shapes.readers()[pool_type](inputs), r.name),
            scalings[pool_type](r.name, inputs),
        )
        for r in recording.resources
        for pool_type, inputs in node_shapes.pools_in(r.type, r.inputs)
    ]
    return sorted(found, key=lambda pool: pool.name)


def _named(shape: fit.NodeShape, resource: str) -> fit.NodeShape:
    """A pool declared without a name gets the one Pulumi derives from its resource's."""
    return shape if shape.pool not in ("", "None") else replace(shape, pool=resource)


EXISTING_SYSTEM_POOL = "existing-system-pool"


def existing_system_pool(taints: tuple[Taint, ...], labels: Mapping[str, str]) -> Pool:
    """The nodes a cluster spotproof did not create keeps for its add-ons, as its stack
    describes them (``spotproof:existingCluster.systemPool``): taken as the system pool
    class, whose nodes always exist."""
    shape = fit.NodeShape(
        pool=EXISTING_SYSTEM_POOL,
        labels={**labels, POOL_CLASS_LABEL: PoolClass.SYSTEM.value},
        taints=taints,
    )
    return Pool(shape, Scaling(Provisioner.NONE, "spotproof:existingCluster", 1, None))


def shapes_of(recording: Recording) -> list[fit.NodeShape]:
    return [pool.shape for pool in pools(recording)]


# --- how each pool gets nodes ----------------------------------------------------------


def _int(value: Any, default: int = 0) -> int:
    return int(value) if value is not None else default


def _gke_scaling(resource: str, inputs: dict) -> Scaling:
    config = inputs.get("nodeConfig") or {}
    accelerators = config.get("guestAccelerators") or []
    autoscaling = inputs.get("autoscaling") or {}
    zones = tuple(str(z) for z in inputs.get("nodeLocations") or ())
    if autoscaling:
        total = "totalMaxNodeCount" in autoscaling
        minimum = autoscaling.get("totalMinNodeCount" if total else "minNodeCount")
        maximum = autoscaling.get("totalMaxNodeCount" if total else "maxNodeCount")
        provisioner, per_zone = Provisioner.GKE_AUTOSCALER, not total
    else:
        minimum = maximum = inputs.get("nodeCount", inputs.get("initialNodeCount"))
        provisioner, per_zone = Provisioner.NONE, True
    run = str(config.get("maxRunDuration") or "")
    return Scaling(
        provisioner=provisioner,
        resource=resource,
        min_nodes=_int(minimum),
        max_nodes=_int(maximum),
        zones=zones,
        per_zone=per_zone,
        machine_type=config.get("machineType"),
        accelerator=accelerators[0].get("type") if accelerators else None,
        queued=bool((inputs.get("queuedProvisioning") or {}).get("enabled")),
        max_run_seconds=int(run[:-1]) if run.endswith("s") and run[:-1].isdigit() else None,
    )


def _eks_scaling(resource: str, inputs: dict) -> Scaling:
    sizes = inputs.get("scalingConfig") or {}
    return Scaling(
        provisioner=Provisioner.NONE,
        resource=resource,
        min_nodes=_int(sizes.get("minSize")),
        max_nodes=_int(sizes.get("maxSize")),
        machine_type=next(iter(inputs.get("instanceTypes") or []), None),
    )


def _aks_scaling(resource: str, inputs: dict) -> Scaling:
    autoscaled = bool(inputs.get("enableAutoScaling"))
    size = aks_catalog.GPU_VM_SIZES.get(str(inputs.get("vmSize")))
    count = inputs.get("count")
    return Scaling(
        provisioner=Provisioner.AKS_AUTOSCALER if autoscaled else Provisioner.NONE,
        resource=resource,
        min_nodes=_int(inputs.get("minCount") if autoscaled else count),
        max_nodes=_int(inputs.get("maxCount") if autoscaled else count),
        zones=tuple(str(z) for z in inputs.get("availabilityZones") or ()),
        machine_type=inputs.get("vmSize"),
        accelerator=size.gpu if size else None,
    )


def _karpenter_scaling(resource: str, inputs: dict) -> Scaling:
    spec = inputs.get("spec") or {}
    node_spec = (spec.get("template") or {}).get("spec") or {}
    return Scaling(
        provisioner=Provisioner.KARPENTER,
        resource=resource,
        min_nodes=0,
        max_nodes=None,
        limits={str(k): str(v) for k, v in (spec.get("limits") or {}).items()},
        termination_grace_seconds=duration_seconds(node_spec.get("terminationGracePeriod")),
    )


def duration_seconds(value: Any) -> int | None:
    """A Go duration as Karpenter writes it (``90s``, ``2m``, ``1h30m``) in seconds."""
    if not isinstance(value, str) or not value:
        return None
    units = {"h": 3600, "m": 60, "s": 1}
    total, number = 0.0, ""
    for char in value:
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total += float(number) * units[char]
            number = ""
        else:
            return None
    return None if number else int(total)
