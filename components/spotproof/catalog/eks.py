"""EC2 GPU instance families and the instance types Karpenter can choose from in them.

A Karpenter NodePool names *families* (``g5``, ``g6``) and a GPU count, not instance types;
Karpenter then picks among every type that matches. To check a pool offline ("does it
leave Karpenter at least ``minValues`` types to choose from?") spotproof needs the same
list, kept here. Only x86_64 NVIDIA families are listed: the smoke image and most
training images are amd64, and mixing architectures in one pool needs multi-arch images.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuFamily:
    """One EC2 instance family with NVIDIA GPUs."""

    name: str
    gpu: str
    """GPU model as Karpenter labels it (``karpenter.k8s.aws/instance-gpu-name``)."""
    gpus_by_size: dict[str, int]
    """Instance size (``xlarge``, ``12xlarge``) -> GPUs per instance."""

    def instance_types(self, gpus: int) -> list[str]:
        return [f"{self.name}.{size}" for size, n in self.gpus_by_size.items() if n == gpus]


_ONE_GPU_SIZES = {size: 1 for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")}

FAMILIES: dict[str, GpuFamily] = {
    family.name: family
    for family in (
        GpuFamily("g4dn", "t4", {**_ONE_GPU_SIZES, "12xlarge": 4, "metal": 8}),
        GpuFamily("g5", "a10g", {**_ONE_GPU_SIZES, "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
        GpuFamily("g6", "l4", {**_ONE_GPU_SIZES, "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
        GpuFamily("g6e", "l40s", {**_ONE_GPU_SIZES, "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
        GpuFamily("gr6", "l4", {"4xlarge": 1, "8xlarge": 1}),
        GpuFamily("p3", "v100", {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8}),
        GpuFamily("p4d", "a100", {"24xlarge": 8}),
        GpuFamily("p4de", "a100", {"24xlarge": 8}),
        GpuFamily("p5", "h100", {"4xlarge": 1, "48xlarge": 8}),
        GpuFamily("p5e", "h200", {"48xlarge": 8}),
        GpuFamily("p5en", "h200", {"48xlarge": 8}),
    )
}

# Labels Karpenter puts on every node it launches, from the instance it chose.
INSTANCE_FAMILY_LABEL = "karpenter.k8s.aws/instance-family"
INSTANCE_GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
INSTANCE_GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

SYSTEM_INSTANCE_TYPE = "m6i.xlarge"
"""Default for the system node group: 4 vCPU / 16 GiB holds CoreDNS, Karpenter and agents."""

INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
"""The shape of an EC2 instance type name (``m6i.xlarge``)."""


def instance_types(families: tuple[str, ...], gpus: int) -> list[str]:
    """Every instance type of ``families`` with exactly ``gpus`` GPUs, sorted."""
    return sorted(t for name in families for t in FAMILIES[name].instance_types(gpus))


def gpu_counts(families: tuple[str, ...]) -> list[int]:
    """GPU counts some instance type of ``families`` offers."""
    return sorted({n for name in families for n in FAMILIES[name].gpus_by_size.values()})
