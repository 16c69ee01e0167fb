"""The fleet description: what every cloud shares (here), plus one section per cloud
(``spotproof.spec.gke``, ``spotproof.spec.eks``), and its reading from stack config."""

from spotproof.spec.config import KUBERNETES_VERSIONS, fleet_from_config
from spotproof.spec.errors import SpecError
from spotproof.spec.types import (
    ApiAccess,
    BatchSpec,
    BucketSpec,
    Capacity,
    CloudFleet,
    FleetSpec,
    GpuPoolSpec,
    JobSetSpec,
    KedaSpec,
    KueueSpec,
    PoolClass,
    SmokeTest,
    SystemPool,
    Taint,
    TaintEffect,
)

__all__ = [
    "KUBERNETES_VERSIONS",
    "ApiAccess",
    "BatchSpec",
    "BucketSpec",
    "Capacity",
    "CloudFleet",
    "FleetSpec",
    "GpuPoolSpec",
    "JobSetSpec",
    "KedaSpec",
    "KueueSpec",
    "PoolClass",
    "SmokeTest",
    "SpecError",
    "SystemPool",
    "Taint",
    "TaintEffect",
    "fleet_from_config",
]
