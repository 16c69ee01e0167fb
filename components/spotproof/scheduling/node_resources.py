"""What a node leaves to pods: its CPU and memory capacity less what the kubelet keeps.

The scheduler places a pod only on a node whose *allocatable* CPU and memory cover the
sum of its containers' requests (or its largest init container's), so a request a pool's
nodes cannot hold is a Job that stays Pending however far the pool scales.

- GKE (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes, "Memory
  and CPU reservations"): CPU: 6% of the first core, 1% of the next core (up to 2), 0.5%
  of the next 2 cores (up to 4) and 0.25% of every core above 4; memory: 25% of the first
  4 GiB, 20% of the next 4 GiB (up to 8), 10% of the next 8 GiB (up to 16), 6% of the
  next 112 GiB (up to 128) and 2% of any above 128 GiB (255 MiB on machines with less
  than 1 GiB), plus a 100 MiB eviction threshold. Compute Engine's "GB" of memory are
  GiB (2^30 bytes).
- AKS: the vCPU count is part of a VM size's name (``Standard_NC24ads_A100_v4``: 24);
  its reservations are not modelled, so the check holds requests to the node's capacity,
  which no reservation can raise.
- EKS: Karpenter chooses the instance type per pod, so no one size is known; not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 2**30
MIB = 2**20
_CPU_TIERS = ((1, 0.06), (1, 0.01), (2, 0.005), (float("inf"), 0.0025))
"""(cores in the tier, share of them GKE reserves), in order."""
_MEMORY_TIERS = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))
"""(GiB in the tier, share of them GKE reserves), in order."""
EVICTION_BYTES = 100 * MIB
_AZURE_VCPUS = re.compile(r"^Standard_[A-Z]+(\d+)")


@dataclass(frozen=True)
class Allocatable:
    """CPU (millicores) and memory (bytes) a node offers pods; None where unknown."""

    cpu_millis: int | None = None
    memory_bytes: int | None = None
    basis: str = "allocatable"
    """What the numbers are: "allocatable" (reservations taken off) or "capacity"."""


def _reserved(amount: float, tiers: tuple[tuple[float, float], ...]) -> float:
    reserved, left = 0.0, amount
    for size, share in tiers:
        taken = min(left, size)
        reserved += taken * share
        left -= taken
        if left <= 0:
            break
    return reserved


def gke(cpus: int, memory_gib: float) -> Allocatable:
    """A GKE Standard node of ``cpus`` vCPUs and ``memory_gib`` GiB."""
    cpu = cpus * 1000 - _reserved(cpus, _CPU_TIERS) * 1000
    reserved = 255 * MIB if memory_gib < 1 else _reserved(memory_gib, _MEMORY_TIERS) * GIB
    memory = memory_gib * GIB - reserved - EVICTION_BYTES
    return Allocatable(int(cpu), int(memory))


def aks(vm_size: str) -> Allocatable:
    """An AKS node of ``vm_size``: its vCPUs as the bound (see the module docstring)."""
    match = _AZURE_VCPUS.match(vm_size)
    if not match:
        return Allocatable()
    return Allocatable(cpu_millis=int(match[1]) * 1000, basis="capacity")
