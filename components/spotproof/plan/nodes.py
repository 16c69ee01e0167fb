"""The pools a plan would create: their nodes as the scheduler sees them, and how they
get nodes.

Built from the *rendered* pool resources (not from the spec), so that what is checked is
what would be deployed; what the platform adds on its own (GKE's labels, its GPU taint;
EKS's node group labels; Karpenter's per-node choices) is added here because the
scheduler will see it.

- GKE node pools and EKS managed node groups: every node is alike, so a pool is one shape.
- Karpenter NodePools: a node's instance type, family and GPU model are picked per launch
  from what the requirements allow (and the EC2 catalog offers); they become the shape's
  ``choices``, so a pod asking for any allowed value fits.

Each :class:`Pool` also carries its :class:`Scaling`: who creates its nodes (the GKE
cluster autoscaler, Karpenter, or nobody for a fixed node group), within which bounds and
zones. ``plan.scaleup`` and ``plan.preemption`` read that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from spotproof import fit, scheduling
from spotproof.catalog import eks as eks_catalog
from spotproof.catalog import labels as platform_labels
from spotproof.catalog.eks import (
    INSTANCE_FAMILY_LABEL,
    INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_GPU_NAME_LABEL,
    INSTANCE_TYPE_LABEL,
)
from spotproof.plan.recorder import Recording
from spotproof.spec.types import Taint


class Provisioner(StrEnum):
    """What creates a pool's nodes when pods are pending."""

    GKE_AUTOSCALER = "GKE cluster autoscaler"
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


GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
KARPENTER_NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"


def pools(recording: Recording) -> list[Pool]:
    """Sorted by pool name: registration order under mocks depends on timing."""
    found = [
        Pool(_gke_pool(r.inputs), _gke_scaling(r.name, r.inputs))
        for r in recording.of_type(GKE_NODE_POOL)
    ]
    found += [
        Pool(_eks_node_group(r.inputs), _eks_scaling(r.name, r.inputs))
        for r in recording.of_type(EKS_NODE_GROUP)
    ]
    found += [
        Pool(_karpenter_pool(r.inputs), _karpenter_scaling(r.name, r.inputs))
        for r in recording.of_type(KARPENTER_NODE_POOL)
    ]
    return sorted(found, key=lambda pool: pool.name)


def node_shapes(recording: Recording) -> list[fit.NodeShape]:
    return [pool.shape for pool in pools(recording)]


def _taint(raw: dict[str, Any]) -> Taint:
    return Taint(
        raw["key"], str(raw.get("value") or ""), scheduling.kubernetes_effect(raw["effect"])
    )


def _labels(raw: dict[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def _gke_pool(inputs: dict) -> fit.NodeShape:
    config = inputs.get("nodeConfig") or {}
    accelerators = config.get("guestAccelerators") or []
    gpus = sum(int(a.get("count") or 0) for a in accelerators)
    accelerator = accelerators[0].get("type") if accelerators else None
    spot = bool(config.get("spot") or config.get("preemptible"))
    flex_start = bool(config.get("flexStart"))
    name = str(inputs.get("name"))

    taints = [_taint(t) for t in config.get("taints") or []]
    if gpus and scheduling.GPU_TAINT not in taints:
        taints.append(scheduling.GPU_TAINT)  # GKE adds it whether declared or not
    labels = {
        **_labels(config.get("labels")),
        **platform_labels.gke_injected_labels(name, accelerator, spot=spot, flex_start=flex_start),
    }
    return fit.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(taints),
        gpus=gpus,
        spot=spot,
        flex_start=flex_start,
    )


def _eks_node_group(inputs: dict) -> fit.NodeShape:
    name = str(inputs.get("nodeGroupName"))
    labels = {**_labels(inputs.get("labels")), **platform_labels.eks_injected_labels(name)}
    return fit.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(_taint(t) for t in inputs.get("taints") or []),
        spot=inputs.get("capacityType") == "SPOT",
    )


def _allowed(requirements: dict[str, dict[str, Any]], key: str) -> list[str] | None:
    """Values an ``In`` requirement allows; None when the key is not pinned by ``In``."""
    requirement = requirements.get(key)
    if not requirement or requirement.get("operator") != "In":
        return None
    return [str(v) for v in requirement.get("values") or []]


def _karpenter_pool(inputs: dict) -> fit.NodeShape:
    spec = inputs.get("spec") or {}
    template = spec.get("template") or {}
    node_spec = template.get("spec") or {}
    requirements = {r.get("key"): r for r in node_spec.get("requirements") or []}

    labels = {
        **_labels((template.get("metadata") or {}).get("labels")),
        platform_labels.KARPENTER_NODEPOOL_LABEL: str((inputs.get("metadata") or {}).get("name")),
    }
    choices: dict[str, frozenset[str]] = {}
    for key in requirements:
        values = _allowed(requirements, key)
        if values and len(values) == 1:
            labels[str(key)] = values[0]
        elif values:
            choices[str(key)] = frozenset(values)

    families = tuple(
        f for f in _allowed(requirements, INSTANCE_FAMILY_LABEL) or () if f in eks_catalog.FAMILIES
    )
    counts = [int(c) for c in _allowed(requirements, INSTANCE_GPU_COUNT_LABEL) or () if c.isdigit()]
    types = [t for n in counts for t in eks_catalog.instance_types(families, n)]
    gpu_names = {eks_catalog.FAMILIES[f].gpu for f in families}
    for key, values in (
        (INSTANCE_TYPE_LABEL, types),
        (INSTANCE_FAMILY_LABEL, families),
        (INSTANCE_GPU_NAME_LABEL, gpu_names),
    ):
        if len(set(values)) == 1:
            labels[key] = next(iter(values))
        elif values:
            choices[key] = frozenset(values)

    capacity = _allowed(requirements, platform_labels.KARPENTER_CAPACITY_LABEL) or [
        "spot",
        "on-demand",
    ]
    taints = tuple(_taint(t) for t in node_spec.get("taints") or [])
    return fit.NodeShape(
        pool=str((inputs.get("metadata") or {}).get("name")),
        labels=labels,
        taints=taints,
        gpus=max(counts, default=0),
        spot="spot" in capacity,
        choices=choices,
    )


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
