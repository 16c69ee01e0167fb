"""The GKE part of a stack's config: project and region, machine-type pools, flex-start,
node auto-provisioning."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
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
from spotproof.spec.shared import DNS_LABEL, node_range, required, taints
from spotproof.spec.types import Autoprovisioning, Capacity, FlexStartPool, GpuPool

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
    return bool(BUCKET_NAME.match(name)) and not name.startswith("goog") and "google" not in name


def _zones(region: str) -> Callable[[str, Any], tuple[str, ...]]:
    def parse(key: str, raw: Any) -> tuple[str, ...]:
        zones = []
        for zone_key, zone in items(key, raw):
            if not isinstance(zone, str) or not re.fullmatch(rf"{re.escape(region)}-[a-z]", zone):
                raise SpecError(
                    zone_key,
                    zone,
                    "zone outside the cluster region",
                    f"{region}-a, {region}-b, ...",
                )
            zones.append(zone)
        return tuple(zones)

    return parse


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
        name = obj.field("name", text(DNS_LABEL, "a lowercase DNS label of at most 40 characters"))
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
            zones=obj.field("zones", _zones(region), ()),
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
        name = obj.field("name", text(DNS_LABEL, "a lowercase DNS label of at most 40 characters"))
        shape = _gpu(obj)
        pool = FlexStartPool(
            name=name,
            machine_type=shape.machine_type,
            gpu_type=shape.accelerator,
            gpus_per_node=shape.count,
            max_nodes=obj.field("maxNodes", integer(1, 1000)),
            max_run_hours=obj.field("maxRunHours", integer(1, 168), 24),
            queued_provisioning=obj.field("queuedProvisioning", boolean, False),
            zones=obj.field("zones", _zones(region), ()),
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
        max_cpu=obj.field("maxCpu", integer(1, 1_000_000), 256),
        max_memory_gb=obj.field("maxMemoryGb", integer(1, 10_000_000), 1024),
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
