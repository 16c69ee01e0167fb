"""Read a stack's config into a validated :class:`FleetSpec`.

Input is the stack's config as a flat mapping of full keys (``spotproof:gpuPools``,
``gcp:region``) to values, either YAML-native or as Pulumi hands them to a program
(scalars as strings, objects as JSON strings). Every check raises :class:`SpecError`
naming the key, the value and what is allowed, before any resource is declared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from spotproof.catalog import PREEMPTION_NOTICE_SECONDS, Cloud
from spotproof.catalog import gke as gke_catalog
from spotproof.spec.errors import SpecError
from spotproof.spec.fields import (
    MISSING,
    ConfigObject,
    boolean,
    check_label,
    choice,
    decode,
    integer,
    items,
    labels,
    text,
)
from spotproof.spec.types import (
    Autoprovisioning,
    Capacity,
    CheckpointBucket,
    FleetSpec,
    FlexStartPool,
    GpuPool,
    PoolClass,
    SmokeTest,
    SystemPool,
    Taint,
    TaintEffect,
)

NAMESPACE = "spotproof"
SUPPORTED_CLOUDS = (Cloud.GKE,)
KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(31, 38))
"""Minor versions with GA podFailurePolicy (1.31+) that kubernetes-validate has schemas for."""

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_GCP_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def _taint(key: str, raw: Any) -> Taint:
    match = re.fullmatch(r"([^=:]+)=([^=:]*):([A-Za-z_]+)", raw) if isinstance(raw, str) else None
    if not match:
        raise SpecError(key, raw, "not a taint", "key=value:Effect, e.g. team=research:NoSchedule")
    taint_key, value, effect = match.groups()
    if effect not in TaintEffect._value2member_map_:
        raise SpecError(key, raw, f"unknown taint effect {effect}", ", ".join(TaintEffect))
    check_label(key, taint_key, value)
    return Taint(taint_key, value, TaintEffect(effect))


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


def _node_range(obj: ConfigObject, min_default: int, min_floor: int) -> tuple[int, int]:
    min_nodes = obj.field("minNodes", integer(min_floor, 1000), min_default)
    max_nodes = obj.field(
        "maxNodes", integer(1, 1000), MISSING if min_default == 0 else max(3, min_nodes)
    )
    if max_nodes < min_nodes:
        raise SpecError(
            f"{obj.key}.maxNodes",
            max_nodes,
            f"below minNodes ({min_nodes})",
            f"a number >= {min_nodes}",
        )
    return min_nodes, max_nodes


def _system_pool(key: str, raw: Any) -> SystemPool:
    obj = ConfigObject(key, raw)
    machine_type = obj.field(
        "machineType", text(gke_catalog.MACHINE_TYPE, "a machine type"), SystemPool.machine_type
    )
    min_nodes, max_nodes = _node_range(obj, SystemPool.min_nodes, 1)
    disk_gb = obj.field("diskGb", integer(20, 65536), SystemPool.disk_gb)
    obj.finish()
    return SystemPool(machine_type, min_nodes, max_nodes, disk_gb)


def _gpu_pool(region: str) -> Callable[[str, Any], GpuPool]:
    def parse(key: str, raw: Any) -> GpuPool:
        obj = ConfigObject(key, raw)
        name = obj.field("name", text(_DNS_LABEL, "a lowercase DNS label of at most 40 characters"))
        shape = _gpu(obj)
        capacity = Capacity(obj.field("capacity", choice(tuple(Capacity)), Capacity.SPOT.value))
        min_nodes, max_nodes = _node_range(obj, 0, 0)
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
            extra_taints=tuple(
                _taint(k, v)
                for k, v in items(
                    f"{key}.extraTaints", obj.field("extraTaints", lambda _k, v: v, [])
                )
            ),
            extra_labels=obj.field("extraLabels", labels, {}),
        )
        obj.finish()
        return pool

    return parse


def _flex_start(region: str) -> Callable[[str, Any], FlexStartPool]:
    def parse(key: str, raw: Any) -> FlexStartPool:
        obj = ConfigObject(key, raw)
        name = obj.field("name", text(_DNS_LABEL, "a lowercase DNS label of at most 40 characters"))
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


def _bucket(project: str, stack: str, region: str) -> Callable[[str, Any], CheckpointBucket]:
    def parse(key: str, raw: Any) -> CheckpointBucket:
        obj = ConfigObject(key, raw)
        name = obj.field(
            "name",
            text(_BUCKET, "3-63 of [a-z0-9_-], starting and ending alphanumeric"),
            f"{project}-{stack}-checkpoints",
        )
        if name.startswith("goog") or "google" in name or not _BUCKET.match(name):
            raise SpecError(
                f"{key}.name",
                name,
                "not a valid bucket name",
                "3-63 of [a-z0-9_-], without 'goog' or 'google'",
            )
        location = obj.field("location", text(), region)
        if location.lower() != region:
            raise SpecError(
                f"{key}.location", location, f"differs from the cluster region {region}", region
            )
        bucket = CheckpointBucket(
            name=name,
            location=region,
            prefix=obj.field(
                "prefix",
                text(
                    re.compile(r"^[a-z0-9][a-z0-9/_-]*[a-z0-9]$"), "a key prefix like checkpoints"
                ),
                "checkpoints",
            ),
            noncurrent_versions_kept=obj.field("noncurrentVersionsKept", integer(1, 100), 3),
            noncurrent_days=obj.field("noncurrentDays", integer(1, 3650), 7),
        )
        obj.finish()
        return bucket

    return parse


def _smoke_test(
    cloud: Cloud, pool_classes: dict[PoolClass, int]
) -> Callable[[str, Any], SmokeTest | None]:
    """``pool_classes`` maps each class that has pools to its largest GPUs-per-node."""

    def parse(key: str, raw: Any) -> SmokeTest | None:
        obj = ConfigObject(key, raw)
        if not obj.field("enabled", boolean, True):
            return None
        targets = tuple(c.value for c in PoolClass if c is not PoolClass.SYSTEM)
        target = PoolClass(obj.field("target", choice(targets), SmokeTest.target.value))
        if target not in pool_classes:
            raise SpecError(
                f"{key}.target",
                target.value,
                "no pool of that class in this stack",
                ", ".join(c.value for c in pool_classes) or "add a GPU pool first",
            )
        notice = PREEMPTION_NOTICE_SECONDS[cloud]
        interval = obj.field("checkpointInterval", integer(1), SmokeTest.checkpoint_interval)
        smoke = SmokeTest(
            image=obj.field(
                "image", text(re.compile(r"^\S+$"), "an image reference"), SmokeTest.image
            ),
            namespace=obj.field(
                "namespace", text(_DNS_LABEL, "a lowercase DNS label"), SmokeTest.namespace
            ),
            target=target,
            gpus=obj.field("gpus", integer(1, pool_classes[target]), SmokeTest.gpus),
            cpu=obj.field(
                "cpu", text(_QUANTITY, "a Kubernetes quantity like 2 or 500m"), SmokeTest.cpu
            ),
            memory=obj.field(
                "memory", text(_QUANTITY, "a Kubernetes quantity like 8Gi"), SmokeTest.memory
            ),
            checkpoint_interval=interval,
            total_steps=obj.field("totalSteps", integer(interval), SmokeTest.total_steps),
            seed=obj.field("seed", integer(0, 2**32 - 1), SmokeTest.seed),
            model_mb=obj.field("modelMb", integer(1, 65536), SmokeTest.model_mb),
            grace_period_seconds=obj.field("gracePeriodSeconds", integer(1, notice), notice),
            backoff_limit=obj.field("backoffLimit", integer(0, 100), SmokeTest.backoff_limit),
        )
        obj.finish()
        return smoke

    return parse


def _kubernetes_version(key: str, raw: Any) -> str:
    if not isinstance(raw, str) or raw not in KUBERNETES_VERSIONS:
        raise SpecError(
            key,
            raw,
            "unsupported Kubernetes minor version (quote it in YAML)",
            ", ".join(KUBERNETES_VERSIONS),
        )
    return raw


def fleet_from_config(stack: str, config: Mapping[str, Any]) -> FleetSpec:
    """Build the fleet of ``stack`` from its config; raises :class:`SpecError`."""
    if not _DNS_LABEL.match(stack) or len(stack) > 40:
        raise SpecError(
            "stack",
            stack,
            "not usable as a cluster name",
            "a lowercase DNS label of at most 40 characters",
        )
    top = ConfigObject(
        NAMESPACE,
        {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith(f"{NAMESPACE}:")},
        separator=":",
    )
    cloud = Cloud(top.field("cloud", choice(tuple(c.value for c in SUPPORTED_CLOUDS))))
    project = text(_GCP_PROJECT, "a GCP project id")(
        "gcp:project", config.get("gcp:project") or _missing("gcp:project", "a GCP project id")
    )
    region = text(_GCP_REGION, "a GCP region like us-central1")(
        "gcp:region",
        config.get("gcp:region") or _missing("gcp:region", "a GCP region like us-central1"),
    )
    environment = top.field(
        "environment", text(_DNS_LABEL, "a lowercase DNS label"), stack.split("-", 1)[-1]
    )

    gpu_pools = tuple(
        _gpu_pool(region)(k, v)
        for k, v in items(f"{NAMESPACE}:gpuPools", top.field("gpuPools", lambda _k, v: v, []))
    )
    flex_start = top.field("flexStartPool", _flex_start(region), None)
    _check_unique_names(gpu_pools, flex_start)

    pool_classes: dict[PoolClass, int] = {}
    for pool in gpu_pools:
        pool_classes[pool.pool_class] = max(
            pool_classes.get(pool.pool_class, 0), pool.gpus_per_node
        )
    if flex_start:
        pool_classes[PoolClass.FLEX_START] = flex_start.gpus_per_node

    spec = FleetSpec(
        stack=stack,
        cloud=cloud,
        environment=environment,
        project=project,
        region=region,
        kubernetes_version=top.field(
            "kubernetesVersion", _kubernetes_version, FleetSpec.kubernetes_version
        ),
        protect=top.field("protect", boolean, environment == "prod"),
        system_pool=top.section("systemPool", _system_pool),
        gpu_pools=gpu_pools,
        flex_start=flex_start,
        autoprovisioning=top.section("autoprovisioning", _autoprovisioning),
        bucket=top.section("checkpointBucket", _bucket(project, stack, region)),
        smoke_test=top.section("smokeTest", _smoke_test(cloud, pool_classes)),
    )
    top.finish()
    return spec


def _missing(key: str, allowed: str) -> Any:
    raise SpecError(key, None, "required", allowed)


def _check_unique_names(gpu_pools: tuple[GpuPool, ...], flex_start: FlexStartPool | None) -> None:
    seen = {"system": "the system pool"}
    named = [(f"{NAMESPACE}:gpuPools[{i}].name", p.name) for i, p in enumerate(gpu_pools)]
    if flex_start:
        named.append((f"{NAMESPACE}:flexStartPool.name", flex_start.name))
    for key, name in named:
        if name in seen:
            raise SpecError(
                key, name, f"duplicate pool name (also {seen[name]})", "a name no other pool uses"
            )
        seen[name] = key
