"""GKE node auto-provisioning in a fleet: its limits, read from stack config and fitted to
the declared pools.

GKE applies auto-provisioning's resource limits to the whole cluster, declared pools
included (https://cloud.google.com/kubernetes-engine/docs/how-to/node-auto-provisioning,
"resource limits"), so a limit below what the pools use at their maximum stops those
pools short of it: unset limits are derived from the pools, set ones below that refused.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spotproof.catalog import gke as gke_catalog
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import Checked, ConfigObject, config_key, read_settings, setting
from spotproof.fleet.pools import SystemPool
from spotproof.fleet.readers import boolean, decode, integer

if TYPE_CHECKING:
    from spotproof.fleet.gke_pools import GkeMachinePool

NAMESPACE = "spotproof"


@dataclass(frozen=True)
class Autoprovisioning(Checked):
    """Node auto-provisioning: lets the cluster create pools for pods nothing else fits.

    GKE applies its limits to the *whole cluster*, the declared pools included, so each
    limit must hold every declared pool at its maximum or those pools stop scaling short
    of it. Unset limits are derived from the pools; set ones below that are refused.
    """

    enabled: bool = setting("enabled", boolean, True)
    max_cpu: int | None = setting("maxCpu", integer(1, 1_000_000), None)
    """Cluster-wide vCPU ceiling; default: the declared pools at their maximum plus
    :data:`NAP_HEADROOM_CPU` for pools auto-provisioning creates."""
    max_memory_gb: int | None = setting("maxMemoryGb", integer(1, 10_000_000), None)
    """Cluster-wide memory ceiling in GB; default: the declared pools' plus
    :data:`NAP_HEADROOM_MEMORY_GB`."""
    gpu_limits: dict[str, int] = setting("gpuLimits", None, factory=dict)
    """Cluster-wide GPU ceiling per accelerator name, e.g. ``{"nvidia-l4": 8}``; an
    accelerator the declared pools use defaults to what they need at their maximum.
    Auto-provisioning creates GPU nodes only of the accelerators listed."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> Autoprovisioning:
        return read_autoprovisioning(key, raw)


NAP_HEADROOM_CPU = 64
NAP_HEADROOM_MEMORY_GB = 256


def read_autoprovisioning(key: str, raw: Any) -> Autoprovisioning:
    obj = ConfigObject(key, raw, fields_of=Autoprovisioning)
    values = read_settings(Autoprovisioning, obj)
    limits_key = config_key(Autoprovisioning, "gpu_limits")
    limits_raw = decode(obj.field(limits_key, lambda _k, v: v, {}))
    if not isinstance(limits_raw, Mapping):
        raise SpecError(
            f"{key}.{limits_key}",
            limits_raw,
            "expected an object",
            "a mapping of GPU type to count",
        )
    gpu_limits = {}
    for gpu_type, limit in limits_raw.items():
        if gpu_type not in gke_catalog.ACCELERATORS:
            raise SpecError(
                f"{key}.{limits_key}.{gpu_type}",
                gpu_type,
                "unknown GPU type",
                ", ".join(sorted(gke_catalog.ACCELERATORS)),
            )
        gpu_limits[gpu_type] = integer(1, 100_000)(f"{key}.{limits_key}.{gpu_type}", limit)
    obj.finish()
    return Autoprovisioning(**values, gpu_limits=gpu_limits)


def _pool_need(machine_type: str, accelerator: str | None, gpus: int, nodes: int) -> Counter:
    cpus, memory_gb = gke_catalog.machine_resources(machine_type)
    need = Counter({"cpu": cpus * nodes, "memory": memory_gb * nodes})
    if accelerator:
        need[accelerator] += gpus * nodes
    return need


def cluster_need(system: SystemPool, pools: Iterable[GkeMachinePool]) -> Counter:
    """CPU, memory (GB) and GPUs per accelerator of every declared pool at its maximum
    (per-zone maxima times zones; the system pool spans GKE's default zones)."""
    need = _pool_need(
        system.machine_type, None, 0, system.max_nodes * gke_catalog.DEFAULT_POOL_ZONES
    )
    for pool in pools:
        nodes = pool.max_nodes * max(len(pool.zones), 1)
        need += _pool_need(pool.machine_type, pool.gpu_type, pool.gpus_per_node, nodes)
    return need


def fitted(
    nap: Autoprovisioning, system: SystemPool, pools: Iterable[GkeMachinePool]
) -> Autoprovisioning:
    """Derive unset auto-provisioning limits from the declared pools; refuse set ones that
    cannot hold every declared pool at its maximum (GKE applies them cluster-wide)."""
    if not nap.enabled:
        return nap
    try:
        need = cluster_need(system, pools)
    except gke_catalog.CatalogError as error:
        raise SpecError(
            f"{NAMESPACE}:systemPool.machineType",
            system.machine_type,
            error.problem,
            error.allowed,
        ) from None
    key = f"{NAMESPACE}:autoprovisioning"
    why = "below what the declared pools use at their maximum"
    for field_name, value, needed in (
        ("maxCpu", nap.max_cpu, need["cpu"]),
        ("maxMemoryGb", nap.max_memory_gb, need["memory"]),
    ):
        if value is not None and value < needed:
            raise SpecError(f"{key}.{field_name}", value, f"{why} ({needed:g})", f">= {needed:g}")
    gpu_limits = dict(nap.gpu_limits)
    for accelerator, needed in sorted(need.items()):
        if accelerator in ("cpu", "memory"):
            continue
        limit = gpu_limits.setdefault(accelerator, int(needed))
        if limit < needed:
            raise SpecError(
                f"{key}.gpuLimits.{accelerator}", limit, f"{why} ({needed:g})", f">= {needed:g}"
            )
    return replace(
        nap,
        max_cpu=nap.max_cpu or math.ceil(need["cpu"]) + NAP_HEADROOM_CPU,
        max_memory_gb=nap.max_memory_gb or math.ceil(need["memory"]) + NAP_HEADROOM_MEMORY_GB,
        gpu_limits=gpu_limits,
    )
