"""How GKE's node pools look to the scheduler: the labels and GPU taint GKE adds to a
pool's nodes, and what a node of its machine type leaves to pods."""

from __future__ import annotations

from spotproof import scheduling
from spotproof.catalog import gke as gke_catalog
from spotproof.catalog import labels as platform_labels
from spotproof.scheduling import fit, node_shapes
from spotproof.scheduling.node_resources import GIB, MIB, Allocatable, reserved

NODE_POOL = "gcp:container/nodePool:NodePool"

# Reservations (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes,
# "Memory and CPU reservations"): CPU: 6% of the first core, 1% of the next core (up to
# 2), 0.5% of the next 2 cores (up to 4) and 0.25% of every core above 4; memory: 25% of
# the first 4 GiB, 20% of the next 4 GiB (up to 8), 10% of the next 8 GiB (up to 16), 6%
# of the next 112 GiB (up to 128) and 2% of any above 128 GiB (255 MiB on machines with
# less than 1 GiB), plus a 100 MiB eviction threshold. Compute Engine's "GB" of memory are
# GiB (2^30 bytes).
_CPU_TIERS = ((1, 0.06), (1, 0.01), (2, 0.005), (float("inf"), 0.0025))
"""(cores in the tier, share of them GKE reserves), in order."""
_MEMORY_TIERS = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))
"""(GiB in the tier, share of them GKE reserves), in order."""
EVICTION_BYTES = 100 * MIB


def allocatable(cpus: int, memory_gib: float) -> Allocatable:
    """A GKE Standard node of ``cpus`` vCPUs and ``memory_gib`` GiB."""
    cpu = cpus * 1000 - reserved(cpus, _CPU_TIERS) * 1000
    kept = 255 * MIB if memory_gib < 1 else reserved(memory_gib, _MEMORY_TIERS) * GIB
    memory = memory_gib * GIB - kept - EVICTION_BYTES
    return Allocatable(int(cpu), int(memory))


def node_pool(inputs: node_shapes.Inputs) -> fit.NodeShape:
    config = inputs.get("nodeConfig") or {}
    accelerators = config.get("guestAccelerators") or []
    gpus = sum(int(a.get("count") or 0) for a in accelerators)
    accelerator = accelerators[0].get("type") if accelerators else None
    spot = bool(config.get("spot") or config.get("preemptible"))
    flex_start = bool(config.get("flexStart"))
    name = str(inputs.get("name"))

    taints = [node_shapes.taint(t) for t in config.get("taints") or []]
    if gpus and scheduling.GPU_TAINT not in taints:
        taints.append(scheduling.GPU_TAINT)  # GKE adds it whether declared or not
    labels = {
        **node_shapes.labels(config.get("labels")),
        **platform_labels.gke_injected_labels(name, accelerator, spot=spot, flex_start=flex_start),
    }
    return fit.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(taints),
        gpus=gpus,
        spot=spot,
        flex_start=flex_start,
        allocatable=_machine_allocatable(str(config.get("machineType") or "")),
        shutdown=_shutdown(config.get("kubeletConfig") or {}),
    )


def _shutdown(kubelet: node_shapes.Inputs) -> fit.NodeShutdown | None:
    """A pool's own graceful shutdown (``catalog.gke``); the critical pods' share is 0
    where only the whole is given, as the kubelet takes it."""
    seconds = kubelet.get("shutdownGracePeriodSeconds")
    if seconds is None:
        return None
    critical = kubelet.get("shutdownGracePeriodCriticalPodsSeconds") or 0
    return fit.NodeShutdown(int(seconds), int(critical))


def _machine_allocatable(machine_type: str) -> Allocatable:
    try:
        cpus, memory_gb = gke_catalog.machine_resources(machine_type)
    except gke_catalog.CatalogError:
        return Allocatable()  # a machine type the catalog does not size
    return allocatable(cpus, memory_gb)


SHAPES = node_shapes.CloudShapes(readers={NODE_POOL: node_pool})
