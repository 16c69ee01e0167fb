"""The declared fleet: what a stack asks for, independent of any cloud SDK, and how it is
read from stack config.

What every cloud shares: ``types`` (the :class:`FleetSpec` and its bucket), ``pools``
(pool classes, capacity, taints, the system pool), ``workloads`` (the smoke Job, batch
workers), ``addons`` (JobSet, Kueue, KEDA), ``api_access``; plus one section per cloud
(``gke`` with ``gke_network``, ``eks``, ``aks``) and a cluster spotproof did not create
(``existing``). ``config`` reads a stack's config into a :class:`FleetSpec` with
``fields`` (a field's key, reader and default, declared once) and ``readers`` (typed
values, one line of error each); ``advice`` warns of what builds but may not hold.
"""

from spotproof.fleet.addons import JobSetSpec, KedaSpec, KueueSpec
from spotproof.fleet.api_access import ApiAccess
from spotproof.fleet.config import KUBERNETES_VERSIONS, fleet_from_config
from spotproof.fleet.errors import SpecError
from spotproof.fleet.pools import Capacity, GpuPoolSpec, PoolClass, SystemPool, Taint, TaintEffect
from spotproof.fleet.types import BucketSpec, CloudFleet, FleetSpec
from spotproof.fleet.workloads import BatchSpec, SmokeTest

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
