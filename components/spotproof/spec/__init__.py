"""The cloud-neutral fleet description: types, and their reading from stack config."""

from spotproof.spec.config import KUBERNETES_VERSIONS, fleet_from_config
from spotproof.spec.errors import SpecError
from spotproof.spec.types import (
    Autoprovisioning,
    Capacity,
    CheckpointBucket,
    FleetSpec,
    FlexStartPool,
    GpuPool,
    Karpenter,
    KarpenterPool,
    Network,
    PoolClass,
    SmokeTest,
    Subnet,
    SystemPool,
    Taint,
    TaintEffect,
)

__all__ = [
    "KUBERNETES_VERSIONS",
    "Autoprovisioning",
    "Capacity",
    "CheckpointBucket",
    "FleetSpec",
    "FlexStartPool",
    "GpuPool",
    "Karpenter",
    "KarpenterPool",
    "Network",
    "PoolClass",
    "SmokeTest",
    "SpecError",
    "Subnet",
    "SystemPool",
    "Taint",
    "TaintEffect",
    "fleet_from_config",
]
