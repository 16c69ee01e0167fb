"""What a node leaves to pods: its CPU and memory capacity less what the kubelet keeps.

The scheduler places a pod only on a node whose *allocatable* CPU and memory cover the
sum of its containers' requests (or its largest init container's), so a request a pool's
nodes cannot hold is a Job that stays Pending however far the pool scales. How much a
node of a given size leaves is the cloud's: each cloud's ``scheduling`` module computes
it for its pools (``scheduling.gke``, ``scheduling.aks``; EKS's Karpenter chooses the
instance type per pod, so no one size is known there).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
MIB = 2**20


@dataclass(frozen=True)
class Allocatable:
    """CPU (millicores) and memory (bytes) a node offers pods; None where unknown."""

    cpu_millis: int | None = None
    memory_bytes: int | None = None
    basis: str = "allocatable"
    """What the numbers are: "allocatable" (reservations taken off) or "capacity"."""


def reserved(amount: float, tiers: tuple[tuple[float, float], ...]) -> float:
    """What a reservation of ``tiers`` ((size of the tier, share of it kept), in order)
    keeps of ``amount``."""
    kept, left = 0.0, amount
    for size, share in tiers:
        taken = min(left, size)
        kept += taken * share
        left -= taken
        if left <= 0:
            break
    return kept
