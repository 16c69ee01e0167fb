"""How AKS's pools look to the scheduler: an agent pool (or the system pool a managed
cluster declares inside itself) with the labels and spot taint AKS adds, and what node
auto-provisioning's Karpenter launches for a NodePool."""

from __future__ import annotations

import re

from spotproof import scheduling
from spotproof.catalog import aks as aks_catalog
from spotproof.fleet.aks import PLATFORM_SPOT_TAINT
from spotproof.fleet.pools import Taint
from spotproof.scheduling import fit, node_shapes
from spotproof.scheduling.node_resources import Allocatable

AGENT_POOL = "azure-native:containerservice:AgentPool"
CLUSTER = "azure-native:containerservice:ManagedCluster"
KARPENTER_GROUP = "karpenter.azure.com"
_VCPUS = re.compile(r"^Standard_[A-Z]+(\d+)")


def allocatable(vm_size: str) -> Allocatable:
    """An AKS node of ``vm_size``: the vCPU count is part of the size's name
    (``Standard_NC24ads_A100_v4``: 24). AKS's reservations are not modelled, so the check
    holds requests to the node's capacity, which no reservation can raise."""
    match = _VCPUS.match(vm_size)
    if not match:
        return Allocatable()
    return Allocatable(cpu_millis=int(match[1]) * 1000, basis="capacity")


def _taint(raw: str) -> Taint:
    """AKS spells a taint ``key=value:Effect``."""
    key_value, _, effect = raw.rpartition(":")
    key, _, value = key_value.partition("=")
    return Taint(key, value, scheduling.kubernetes_effect(effect))


def agent_pool(inputs: node_shapes.Inputs) -> fit.NodeShape:
    """An AgentPool, or a pool profile inside a ManagedCluster (see :func:`cluster_pools`).
    AKS taints spot pools ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule`` whether
    declared or not (``articles/aks/spot-node-pool.md``)."""
    name = str(inputs.get("agentPoolName") or inputs.get("name"))
    spot = inputs.get("scaleSetPriority") == "Spot"
    size = aks_catalog.GPU_VM_SIZES.get(str(inputs.get("vmSize")))
    taints = [_taint(t) for t in inputs.get("nodeTaints") or []]
    if spot and PLATFORM_SPOT_TAINT not in taints:
        taints.append(PLATFORM_SPOT_TAINT)
    labels = {
        **node_shapes.labels(inputs.get("nodeLabels")),
        **aks_catalog.injected_labels(
            name, str(inputs.get("mode") or "User"), spot=spot, gpu=size is not None
        ),
    }
    if inputs.get("vmSize"):
        labels[aks_catalog.INSTANCE_TYPE_LABEL] = str(inputs["vmSize"])
    return fit.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(taints),
        gpus=size.gpus if size else 0,
        spot=spot,
        allocatable=allocatable(str(inputs.get("vmSize") or "")),
    )


def cluster_pools(cluster: node_shapes.Inputs) -> list[node_shapes.Inputs]:
    """The pools a ManagedCluster declares inline (its System pool), as AgentPool inputs."""
    return [
        {**profile, "agentPoolName": profile.get("name")}
        for profile in cluster.get("agentPoolProfiles") or []
    ]


def karpenter_instances(node_pool: node_shapes.Inputs) -> tuple[dict[str, list[str]], int]:
    """What AKS node auto-provisioning launches for the pool's VM sizes."""
    sizes = [
        aks_catalog.GPU_VM_SIZES[s]
        for s in node_shapes.requirement_values(node_pool, aks_catalog.SKU_NAME_LABEL) or ()
        if s in aks_catalog.GPU_VM_SIZES
    ]
    names = [s.name for s in sizes]
    return {
        aks_catalog.SKU_NAME_LABEL: names,
        aks_catalog.INSTANCE_TYPE_LABEL: names,
        aks_catalog.SKU_GPU_COUNT_LABEL: [str(s.gpus) for s in sizes],
        aks_catalog.SKU_GPU_MANUFACTURER_LABEL: [aks_catalog.NVIDIA] if sizes else [],
    }, max((s.gpus for s in sizes), default=0)


SHAPES = node_shapes.CloudShapes(
    readers={AGENT_POOL: agent_pool},
    embedded={CLUSTER: (AGENT_POOL, cluster_pools)},
    karpenter={KARPENTER_GROUP: karpenter_instances},
)
