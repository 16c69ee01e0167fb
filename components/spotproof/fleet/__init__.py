"""The fleet description: what every cloud shares (here), plus one section per cloud
(``spotproof.fleet.gke``, ``spotproof.fleet.eks``), and its reading from stack config."""

from spotproof.fleet.config import KUBERNETES_VERSIONS, fleet_from_config
from spotproof.fleet.errors import SpecError
from spotproof.fleet.types import (
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
