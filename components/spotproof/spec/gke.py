"""The GKE part of a stack's config: project and region, machine-type pools, flex-start,
node auto-provisioning."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from spotproof.catalog import gke as gke_catalog
from spotproof.spec.errors import SpecError
from spotproof.spec.fields import (
    ConfigObject,
    boolean,
    choice,
    decode,
    integer,
    items,
    labels,
    text,
)
from spotproof.spec.shared import dns_label, node_range, required, taints
from spotproof.spec.types import (
    NAP_HEADROOM_CPU,
    NAP_HEADROOM_MEMORY_GB,
    Autoprovisioning,
    Capacity,
    FleetSpec,
    FlexStartPool,
    GpuPool,
)

NAMESPACE = "spotproof"
_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")
BUCKET_RULE = "3-63 of [a-z0-9_-], starting and ending alphanumeric, without 'goog' or 'google'"


def project_and_region(config: Mapping[str, Any]) -> tuple[str, str]:
    project = text(_PROJECT, "a GCP project id")(
        "gcp:project", config.get("gcp:project") or required("gcp:project", "a GCP project id")
    )
    region = text(_REGION, "a GCP region like us-central1")(
        "gcp:region",
        config.get("gcp:region") or required("gcp:region", "a GCP region like us-central1"),
    )
    return project, region


def bucket_name_ok(name: str) -> bool:
    return (
        bool(BUCKET_NAME.fullmatch(name)) and not name.startswith("goog") and "google" not in name
    )


def _zones(region: str, accelerator: str | None = None) -> Callable[[str, Any], tuple[str, ...]]:
    """Zones of ``region`` (that offer ``accelerator``), from the catalog where it knows
    the region; a zone that does not exist or lacks the GPU fails ``pulumi up``."""
    known = gke_catalog.region_zones(region)
    offered = gke_catalog.accelerator_zones(accelerator, region) if accelerator else None

    def parse(key: str, raw: Any) -> tuple[str, ...]:
        zones: list[str] = []
        for zone_key, zone in items(key, raw):
            shaped = isinstance(zone, str) and re.fullmatch(rf"{re.escape(region)}-[a-z]", zone)
            if not shaped or (known is not None and zone not in known):
                allowed = ", ".join(known) if known else f"{region}-a, {region}-b, ..."
                raise SpecError(zone_key, zone, f"not a zone of {region}", allowed)
            if offered is not None and zone not in offered:
                raise SpecError(
                    zone_key,
                    zone,
                    f"{accelerator} is not offered there",
                    ", ".join(sorted(offered)) or f"none: no zone of {region} offers it",
                )
            if zone in zones:
                raise SpecError(zone_key, zone, "listed twice", "each zone once")
            zones.append(zone)
        if not zones:
            raise SpecError(key, raw, "no zones", "at least one zone")
        return tuple(zones)

    return parse


def _gpu_zones(obj: ConfigObject, region: str, accelerator: str) -> tuple[str, ...]:
    """The pool's zones: as configured, or every zone of the region offering its GPU.

    Left unset, GKE would use the cluster's default zones, some of which may lack the
    accelerator; the pool then fails to create. So the default is explicit."""
    default = gke_catalog.accelerator_zones(accelerator, region)
    if default is None and "zones" not in obj.raw:
        raise SpecError(
            f"{obj.key}.zones",
            None,
            f"required: spotproof has no table of {accelerator} zones in {region}",
            f"the zones of {region} that offer {accelerator}",
        )
    if default is not None and not default:
        raise SpecError(
            f"{obj.key}.gpuType",
            accelerator,
            f"no zone of {region} offers it",
            ", ".join(gke_catalog.accelerators_in(region)) or "another region",
        )
    return obj.field("zones", _zones(region, accelerator), tuple(sorted(default or ())))


def _gpu(obj: ConfigObject) -> gke_catalog.GpuShape:
    machine_type = obj.field("machineType", text(gke_catalog.MACHINE_TYPE, "a machine type"))
    gpu_type = obj.field("gpuType", text(), None)
    count = obj.field("gpusPerNode", integer(1, 16), None)
    if gpu_type is not None and gpu_type not in gke_catalog.ACCELERATORS:
        raise SpecError(
            f"{obj.key}.gpuType",
            gpu_type,
            "unknown GPU type",
            ", ".join(sorted(gke_catalog.ACCELERATORS)),
        )
    try:
        return gke_catalog.gpu_shape(machine_type, gpu_type, count)
    except gke_catalog.CatalogError as error:
        name, value = {
            "machine_type": ("machineType", machine_type),
            "accelerator": ("gpuType", gpu_type),
            "count": ("gpusPerNode", count),
        }[error.culprit]
        raise SpecError(f"{obj.key}.{name}", value, error.problem, error.allowed) from None


def _gpu_pool(region: str) -> Callable[[str, Any], GpuPool]:
    def parse(key: str, raw: Any) -> GpuPool:
        obj = ConfigObject(key, raw)
        name = obj.field("name", dns_label(40))
        shape = _gpu(obj)
        capacity = Capacity(obj.field("capacity", choice(tuple(Capacity)), Capacity.SPOT.value))
        min_nodes, max_nodes = node_range(obj, 0, 0)
        pool = GpuPool(
            name=name,
            machine_type=shape.machine_type,
            gpu_type=shape.accelerator,
            gpus_per_node=shape.count,
            max_nodes=max_nodes,
            capacity=capacity,
            min_nodes=min_nodes,
            zones=_gpu_zones(obj, region, shape.accelerator),
            disk_gb=obj.field("diskGb", integer(50, 65536), 200),
            extra_taints=obj.field("extraTaints", taints, ()),
            extra_labels=obj.field("extraLabels", labels, {}),
        )
        obj.finish()
        return pool

    return parse


def _flex_start(region: str) -> Callable[[str, Any], FlexStartPool]:
    def parse(key: str, raw: Any) -> FlexStartPool:
        obj = ConfigObject(key, raw)
        name = obj.field("name", dns_label(40))
        shape = _gpu(obj)
        pool = FlexStartPool(
            name=name,
            machine_type=shape.machine_type,
            gpu_type=shape.accelerator,
            gpus_per_node=shape.count,
            max_nodes=obj.field("maxNodes", integer(1, 1000)),
            max_run_hours=obj.field("maxRunHours", integer(1, 168), 24),
            queued_provisioning=obj.field("queuedProvisioning", boolean, False),
            zones=_gpu_zones(obj, region, shape.accelerator),
            disk_gb=obj.field("diskGb", integer(50, 65536), 200),
        )
        obj.finish()
        return pool

    return parse


def _autoprovisioning(key: str, raw: Any) -> Autoprovisioning:
    obj = ConfigObject(key, raw)
    limits_raw = decode(obj.field("gpuLimits", lambda _k, v: v, {}))
    if not isinstance(limits_raw, Mapping):
        raise SpecError(
            f"{key}.gpuLimits", limits_raw, "expected an object", "a mapping of GPU type to count"
        )
    gpu_limits = {}
    for gpu_type, limit in limits_raw.items():
        if gpu_type not in gke_catalog.ACCELERATORS:
            raise SpecError(
                f"{key}.gpuLimits.{gpu_type}",
                gpu_type,
                "unknown GPU type",
                ", ".join(sorted(gke_catalog.ACCELERATORS)),
            )
        gpu_limits[gpu_type] = integer(1, 100_000)(f"{key}.gpuLimits.{gpu_type}", limit)
    result = Autoprovisioning(
        enabled=obj.field("enabled", boolean, True),
        max_cpu=obj.field("maxCpu", integer(1, 1_000_000), None),
        max_memory_gb=obj.field("maxMemoryGb", integer(1, 10_000_000), None),
        gpu_limits=gpu_limits,
    )
    obj.finish()
    return result


def pools(top: ConfigObject, region: str) -> dict[str, Any]:
    """The GKE-only :class:`FleetSpec` fields."""
    gpu_pools = tuple(
        _gpu_pool(region)(k, v)
        for k, v in items(top.key_of("gpuPools"), top.field("gpuPools", lambda _k, v: v, []))
    )
    return {
        "gpu_pools": gpu_pools,
        "flex_start": top.field("flexStartPool", _flex_start(region), None),
        "autoprovisioning": top.section("autoprovisioning", _autoprovisioning),
    }


SYSTEM_MACHINE_TYPE = (
    "machineType",
    text(gke_catalog.MACHINE_TYPE, "a machine type"),
    "e2-standard-4",
)
"""Config key, reader and default of the system pool's machine type on GKE."""


def _pool_need(machine_type: str, accelerator: str | None, gpus: int, nodes: int) -> Counter:
    cpus, memory_gb = gke_catalog.machine_resources(machine_type)
    need = Counter({"cpu": cpus * nodes, "memory": memory_gb * nodes})
    if accelerator:
        need[accelerator] += gpus * nodes
    return need


def cluster_need(spec: FleetSpec) -> Counter:
    """CPU, memory (GB) and GPUs per accelerator of every declared pool at its maximum
    (per-zone maxima times zones; the system pool spans GKE's default zones)."""
    system = spec.system_pool
    need = _pool_need(
        system.machine_type, None, 0, system.max_nodes * gke_catalog.DEFAULT_POOL_ZONES
    )
    for pool in [*spec.gpu_pools, *([spec.flex_start] if spec.flex_start else [])]:
        nodes = pool.max_nodes * max(len(pool.zones), 1)
        need += _pool_need(pool.machine_type, pool.gpu_type, pool.gpus_per_node, nodes)
    return need


def fit_autoprovisioning(spec: FleetSpec) -> FleetSpec:
    """Derive unset auto-provisioning limits from the declared pools; refuse set ones that
    cannot hold every declared pool at its maximum (GKE applies them cluster-wide)."""
    nap = spec.autoprovisioning
    if not nap.enabled:
        return spec
    try:
        need = cluster_need(spec)
    except gke_catalog.CatalogError as error:
        raise SpecError(
            f"{NAMESPACE}:systemPool.machineType",
            spec.system_pool.machine_type,
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
    fitted = replace(
        nap,
        max_cpu=nap.max_cpu or math.ceil(need["cpu"]) + NAP_HEADROOM_CPU,
        max_memory_gb=nap.max_memory_gb or math.ceil(need["memory"]) + NAP_HEADROOM_MEMORY_GB,
        gpu_limits=gpu_limits,
    )
    return replace(spec, autoprovisioning=fitted)
