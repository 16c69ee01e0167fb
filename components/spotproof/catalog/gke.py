"""GKE machine types and the GPUs they carry.

GKE has two ways to get GPUs onto a node:

- accelerator-optimized machine types (A2, A3, A4, G2) come with a fixed number of
  GPUs of one model; the node pool must still declare them as ``guest_accelerators``;
- N1 machine types take attachable GPUs (T4, V100, P4, P100) in counts of 1, 2, 4 or 8.

One node pool holds one machine type, so a diversified spot fleet is several pools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class CatalogError(ValueError):
    """A machine type / GPU combination that GKE cannot create.

    ``culprit`` is which input is wrong (``machine_type``, ``accelerator`` or ``count``) and
    ``allowed`` names what would have been accepted, for the caller's one-line error.
    """

    def __init__(self, culprit: str, problem: str, allowed: str) -> None:
        super().__init__(problem)
        self.culprit = culprit
        self.problem = problem
        self.allowed = allowed


@dataclass(frozen=True)
class GpuShape:
    """What one node of a machine type carries."""

    machine_type: str
    accelerator: str
    """GKE accelerator name (``nvidia-l4``), also the node label ``gke-accelerator``."""
    count: int
    """GPUs per node; the node's allocatable ``nvidia.com/gpu``."""


# Accelerator-optimized families: machine type -> (accelerator, GPUs per node).
_FIXED: dict[str, tuple[str, int]] = {
    **{f"g2-standard-{cpus}": ("nvidia-l4", 1) for cpus in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("nvidia-l4", 2),
    "g2-standard-48": ("nvidia-l4", 4),
    "g2-standard-96": ("nvidia-l4", 8),
    **{f"a2-highgpu-{n}g": ("nvidia-tesla-a100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("nvidia-tesla-a100", 16),
    **{f"a2-ultragpu-{n}g": ("nvidia-a100-80gb", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("nvidia-h100-80gb", n) for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": ("nvidia-h100-mega-80gb", 8),
    "a3-ultragpu-8g": ("nvidia-h200-141gb", 8),
    "a4-highgpu-8g": ("nvidia-b200", 8),
}

# Attachable GPUs on N1 machine types: accelerator -> GPU counts a node may carry.
_ATTACHABLE: dict[str, tuple[int, ...]] = {
    "nvidia-tesla-t4": (1, 2, 4),
    "nvidia-tesla-v100": (1, 2, 4, 8),
    "nvidia-tesla-p4": (1, 2, 4),
    "nvidia-tesla-p100": (1, 2, 4),
}

_N1 = re.compile(r"^n1-(standard|highmem|highcpu)-(\d+)$")

ACCELERATORS: frozenset[str] = frozenset(
    {accelerator for accelerator, _ in _FIXED.values()} | set(_ATTACHABLE)
)
"""Every accelerator name spotproof knows on GKE (node auto-provisioning limits use these)."""

MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9]+(-[a-z0-9]+)*$")
"""The shape of a Compute Engine machine type name."""


def gpu_shape(machine_type: str, accelerator: str | None, count: int | None) -> GpuShape:
    """Resolve what a GPU node of ``machine_type`` carries, checking the combination.

    ``accelerator`` and ``count`` may be left out for accelerator-optimized types; when
    given they must agree with the type. N1 types need both.
    """
    if machine_type in _FIXED:
        fixed_accelerator, fixed_count = _FIXED[machine_type]
        if accelerator not in (None, fixed_accelerator):
            raise CatalogError(
                "accelerator",
                f"{machine_type} carries {fixed_accelerator}, not {accelerator}",
                fixed_accelerator,
            )
        if count not in (None, fixed_count):
            raise CatalogError(
                "count",
                f"{machine_type} carries exactly {fixed_count} GPU(s), not {count}",
                str(fixed_count),
            )
        return GpuShape(machine_type, fixed_accelerator, fixed_count)

    if _N1.match(machine_type):
        if accelerator not in _ATTACHABLE:
            raise CatalogError(
                "accelerator",
                f"{machine_type} needs an attachable GPU type, got {accelerator}",
                ", ".join(sorted(_ATTACHABLE)),
            )
        counts = _ATTACHABLE[accelerator]
        if count not in counts:
            raise CatalogError(
                "count",
                f"{machine_type} cannot carry {count} x {accelerator}",
                ", ".join(map(str, counts)),
            )
        return GpuShape(machine_type, accelerator, count)

    raise CatalogError(
        "machine_type",
        f"{machine_type} is not a GPU machine type",
        "g2-standard-*, a2-highgpu-*g, a2-ultragpu-*g, a3-*, a4-highgpu-8g, "
        "or n1-* with an attachable GPU",
    )
