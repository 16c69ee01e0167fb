"""Rendered pool resources read back into :class:`~spotproof.scheduling.fit.NodeShape`: one reader
per pool type, used by ``spotproof plan`` (fit, scale-up, preemption) and by the policy
rules alike, so both judge the same nodes.

Readers take a resource's inputs as Pulumi presents them (camelCase, the cloud's spelling
of taint effects) and add what the platform puts on nodes by itself (GKE's labels and GPU
taint, EKS's node group labels, Karpenter's per-launch choices), because the scheduler
will see it. No Pulumi import: the policy pack's environment imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from spotproof import scheduling
from spotproof.catalog import aks as aks_catalog
from spotproof.catalog import eks as eks_catalog
from spotproof.catalog import gke as gke_catalog
from spotproof.catalog import labels as platform_labels
from spotproof.catalog.gke import CatalogError
from spotproof.fleet.aks import PLATFORM_SPOT_TAINT
from spotproof.fleet.pools import Taint
from spotproof.scheduling import fit, node_resources

GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
KARPENTER_NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
AKS_AGENT_POOL = "azure-native:containerservice:AgentPool"
AKS_CLUSTER = "azure-native:containerservice:ManagedCluster"

Inputs = Mapping[str, Any]


def taint(raw: Mapping[str, Any]) -> Taint:
    """A taint as a cloud API or a Kubernetes object spells it."""
    return Taint(
        raw["key"], str(raw.get("value") or ""), scheduling.kubernetes_effect(raw["effect"])
    )


def _labels(raw: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def gke_node_pool(inputs: Inputs) -> fit.NodeShape:
    config = inputs.get("nodeConfig") or {}
    accelerators = config.get("guestAccelerators") or []
    gpus = sum(int(a.get("count") or 0) for a in accelerators)
    accelerator = accelerators[0].get("type") if accelerators else None
    spot = bool(config.get("spot") or config.get("preemptible"))
    flex_start = bool(config.get("flexStart"))
    name = str(inputs.get("name"))

    taints = [taint(t) for t in config.get("taints") or []]
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
        allocatable=_gke_allocatable(str(config.get("machineType") or "")),
    )


def _gke_allocatable(machine_type: str) -> node_resources.Allocatable:
    try:
        cpus, memory_gb = gke_catalog.machine_resources(machine_type)
    except CatalogError:
        return node_resources.Allocatable()  # a machine type the catalog does not size
    return node_resources.gke(cpus, memory_gb)


def eks_node_group(inputs: Inputs) -> fit.NodeShape:
    """``capacityType`` defaults to ON_DEMAND
    (https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateNodegroup.html)."""
    name = str(inputs.get("nodeGroupName"))
    labels = {**_labels(inputs.get("labels")), **platform_labels.eks_injected_labels(name)}
    return fit.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(taint(t) for t in inputs.get("taints") or []),
        spot=inputs.get("capacityType") == "SPOT",
    )


def _aks_taint(raw: str) -> Taint:
    """AKS spells a taint ``key=value:Effect``."""
    key_value, _, effect = raw.rpartition(":")
    key, _, value = key_value.partition("=")
    return Taint(key, value, scheduling.kubernetes_effect(effect))


def aks_agent_pool(inputs: Inputs) -> fit.NodeShape:
    """An AgentPool, or a pool profile inside a ManagedCluster (see :func:`cluster_pools`).
    AKS taints spot pools ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule`` whether
    declared or not (``articles/aks/spot-node-pool.md``)."""
    name = str(inputs.get("agentPoolName") or inputs.get("name"))
    spot = inputs.get("scaleSetPriority") == "Spot"
    size = aks_catalog.GPU_VM_SIZES.get(str(inputs.get("vmSize")))
    taints = [_aks_taint(t) for t in inputs.get("nodeTaints") or []]
    if spot and PLATFORM_SPOT_TAINT not in taints:
        taints.append(PLATFORM_SPOT_TAINT)
    labels = {
        **_labels(inputs.get("nodeLabels")),
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
        allocatable=node_resources.aks(str(inputs.get("vmSize") or "")),
    )


def cluster_pools(cluster: Inputs) -> list[Inputs]:
    """The pools a ManagedCluster declares inline (its System pool), as AgentPool inputs."""
    return [
        {**profile, "agentPoolName": profile.get("name")}
        for profile in cluster.get("agentPoolProfiles") or []
    ]


def requirement_values(node_pool: Inputs, key: str) -> list[str] | None:
    """Values a Karpenter NodePool's ``In`` requirement on ``key`` allows; None when no
    ``In`` requirement pins the key."""
    template = ((node_pool.get("spec") or {}).get("template") or {}).get("spec") or {}
    for requirement in template.get("requirements") or []:
        if requirement.get("key") == key and requirement.get("operator") == "In":
            return [str(v) for v in requirement.get("values") or []]
    return None


def capacity_types(node_pool: Inputs) -> list[str]:
    """What a NodePool may launch. Without a requirement on the key it is read as both,
    the conservative reading: a pool that might launch spot is checked as a spot pool."""
    return requirement_values(node_pool, platform_labels.KARPENTER_CAPACITY_LABEL) or [
        "spot",
        "on-demand",
    ]


def _eks_instance_labels(node_pool: Inputs) -> tuple[dict[str, list[str]], int]:
    """What EC2 launches for the pool's families and GPU counts: the instance types the
    catalog offers, their families and GPU names; and the most GPUs a node may have."""
    families = tuple(
        f
        for f in requirement_values(node_pool, eks_catalog.INSTANCE_FAMILY_LABEL) or ()
        if f in eks_catalog.FAMILIES
    )
    counts = [
        int(c)
        for c in requirement_values(node_pool, eks_catalog.INSTANCE_GPU_COUNT_LABEL) or ()
        if c.isdigit()
    ]
    return {
        eks_catalog.INSTANCE_TYPE_LABEL: [
            t for n in counts for t in eks_catalog.instance_types(families, n)
        ],
        eks_catalog.INSTANCE_FAMILY_LABEL: list(families),
        eks_catalog.INSTANCE_GPU_NAME_LABEL: [eks_catalog.FAMILIES[f].gpu for f in families],
    }, max(counts, default=0)


def _aks_instance_labels(node_pool: Inputs) -> tuple[dict[str, list[str]], int]:
    """What AKS node auto-provisioning launches for the pool's VM sizes."""
    sizes = [
        aks_catalog.GPU_VM_SIZES[s]
        for s in requirement_values(node_pool, aks_catalog.SKU_NAME_LABEL) or ()
        if s in aks_catalog.GPU_VM_SIZES
    ]
    names = [s.name for s in sizes]
    return {
        aks_catalog.SKU_NAME_LABEL: names,
        aks_catalog.INSTANCE_TYPE_LABEL: names,
        aks_catalog.SKU_GPU_COUNT_LABEL: [str(s.gpus) for s in sizes],
        aks_catalog.SKU_GPU_MANUFACTURER_LABEL: [aks_catalog.NVIDIA] if sizes else [],
    }, max((s.gpus for s in sizes), default=0)


KarpenterInstances = Callable[[Inputs], tuple[dict[str, list[str]], int]]
"""A cloud's Karpenter provider: the labels its nodes get from what the NodePool allows,
and the most GPUs one node may have."""
KARPENTER_PROVIDERS: dict[str, KarpenterInstances] = {
    "karpenter.k8s.aws": _eks_instance_labels,
    "karpenter.azure.com": _aks_instance_labels,
}
"""By ``nodeClassRef.group``."""


def karpenter_node_pool(inputs: Inputs) -> fit.NodeShape:
    spec = inputs.get("spec") or {}
    template = spec.get("template") or {}
    node_spec = template.get("spec") or {}
    name = str((inputs.get("metadata") or {}).get("name"))

    labels = {
        **_labels((template.get("metadata") or {}).get("labels")),
        platform_labels.KARPENTER_NODEPOOL_LABEL: name,
    }
    choices: dict[str, frozenset[str]] = {}

    def allow(key: str, values: list[str]) -> None:
        if len(set(values)) == 1:
            labels[key] = values[0]
        elif values:
            choices[key] = frozenset(values)

    for requirement in node_spec.get("requirements") or []:
        allow(str(requirement.get("key")), requirement_values(inputs, requirement.get("key")) or [])
    provider = KARPENTER_PROVIDERS.get(str((node_spec.get("nodeClassRef") or {}).get("group")))
    instance_labels, gpus = provider(inputs) if provider else ({}, 0)
    for key, values in instance_labels.items():
        allow(key, values)

    return fit.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(taint(t) for t in node_spec.get("taints") or []),
        gpus=gpus,
        spot="spot" in capacity_types(inputs),
        choices=choices,
    )


READERS: dict[str, Callable[[Inputs], fit.NodeShape]] = {
    GKE_NODE_POOL: gke_node_pool,
    EKS_NODE_GROUP: eks_node_group,
    KARPENTER_NODE_POOL: karpenter_node_pool,
    AKS_AGENT_POOL: aks_agent_pool,
}
"""Every pool resource type spotproof renders, by Pulumi type token."""
EMBEDDED_POOLS: dict[str, tuple[str, Callable[[Inputs], list[Inputs]]]] = {
    AKS_CLUSTER: (AKS_AGENT_POOL, cluster_pools),
}
"""Resources that declare pools inside themselves: the pool type and how to list them."""


def pools_in(type_: str, inputs: Inputs) -> list[tuple[str, Inputs]]:
    """The pools one resource declares, as (pool type, pool inputs): itself when it is a
    pool, the pools inside it when it embeds some, else none."""
    if type_ in READERS:
        return [(type_, inputs)]
    if type_ in EMBEDDED_POOLS:
        pool_type, extract = EMBEDDED_POOLS[type_]
        return [(pool_type, pool) for pool in extract(inputs)]
    return []


def pool_class(shape: fit.NodeShape) -> str | None:
    """The contract's pool class the pool declares (``system``, ``spot-gpu``, ...)."""
    return shape.labels.get(scheduling.POOL_CLASS_LABEL)
