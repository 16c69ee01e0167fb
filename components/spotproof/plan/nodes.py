"""The nodes a plan would create, as the scheduler would see them.

Built from the *rendered* pool resources (not from the spec), so that what is checked is
what would be deployed; what the platform adds on its own (GKE's labels, its GPU taint;
EKS's node group labels; Karpenter's per-node choices) is added here because the
scheduler will see it.

- GKE node pools and EKS managed node groups: every node is alike, so a pool is one shape.
- Karpenter NodePools: a node's instance type, family and GPU model are picked per launch
  from what the requirements allow (and the EC2 catalog offers); they become the shape's
  ``choices``, so a pod asking for any allowed value fits.
"""

from __future__ import annotations

from typing import Any

from spotproof import scheduling
from spotproof.catalog import eks as eks_catalog
from spotproof.catalog.eks import (
    INSTANCE_FAMILY_LABEL,
    INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_GPU_NAME_LABEL,
    INSTANCE_TYPE_LABEL,
)
from spotproof.plan.recorder import Recording
from spotproof.spec.types import Taint

GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
KARPENTER_NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"


def node_shapes(recording: Recording) -> list[scheduling.NodeShape]:
    """Sorted by pool name: registration order under mocks depends on timing."""
    shapes = [_gke_pool(r.inputs) for r in recording.of_type(GKE_NODE_POOL)]
    shapes += [_eks_node_group(r.inputs) for r in recording.of_type(EKS_NODE_GROUP)]
    shapes += [_karpenter_pool(r.inputs) for r in recording.of_type(KARPENTER_NODE_POOL)]
    return sorted(shapes, key=lambda shape: shape.pool)


def _taint(raw: dict[str, Any]) -> Taint:
    return Taint(
        raw["key"], str(raw.get("value") or ""), scheduling.kubernetes_effect(raw["effect"])
    )


def _labels(raw: dict[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def _gke_pool(inputs: dict) -> scheduling.NodeShape:
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
        **scheduling.gke_injected_labels(name, accelerator, spot=spot, flex_start=flex_start),
    }
    return scheduling.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(taints),
        gpus=gpus,
        spot=spot,
        flex_start=flex_start,
    )


def _eks_node_group(inputs: dict) -> scheduling.NodeShape:
    name = str(inputs.get("nodeGroupName"))
    labels = {**_labels(inputs.get("labels")), **scheduling.eks_injected_labels(name)}
    return scheduling.NodeShape(
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


def _karpenter_pool(inputs: dict) -> scheduling.NodeShape:
    spec = inputs.get("spec") or {}
    template = spec.get("template") or {}
    node_spec = template.get("spec") or {}
    requirements = {r.get("key"): r for r in node_spec.get("requirements") or []}

    labels = {
        **_labels((template.get("metadata") or {}).get("labels")),
        scheduling.KARPENTER_NODEPOOL_LABEL: str((inputs.get("metadata") or {}).get("name")),
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

    capacity = _allowed(requirements, scheduling.KARPENTER_CAPACITY_LABEL) or ["spot", "on-demand"]
    taints = tuple(_taint(t) for t in node_spec.get("taints") or [])
    return scheduling.NodeShape(
        pool=str((inputs.get("metadata") or {}).get("name")),
        labels=labels,
        taints=taints,
        gpus=max(counts, default=0),
        spot="spot" in capacity,
        choices=choices,
    )
