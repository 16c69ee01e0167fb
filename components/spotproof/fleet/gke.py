"""The GKE section of a fleet: project, machine-type GPU pools, DWS flex-start, node
auto-provisioning; and how it is read from stack config."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from spotproof.catalog import Cloud, gke_spot
from spotproof.catalog import gke as gke_catalog
from spotproof.fleet.drill import GCP_MEMBER
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import Checked, ConfigObject, config_key, read_settings, setting
from spotproof.fleet.gke_autoprovisioning import Autoprovisioning, fitted, read_autoprovisioning
from spotproof.fleet.gke_compute_class import ComputeClassSpec, read_compute_classes
from spotproof.fleet.gke_network import GkeNetwork, read_network
from spotproof.fleet.pools import Capacity, CapacityPool, PoolClass, SystemPool, check_node_range
from spotproof.fleet.readers import boolean, integer, items, text
from spotproof.fleet.shared import CloudConfig, check_unique_names, dns_label, required
from spotproof.fleet.types import FleetSpec

NAMESPACE = "spotproof"


@dataclass(frozen=True)
class GkeSystemPool(SystemPool):
    """A node pool; its sizes are per zone, over GKE's default zones of the region."""

    machine_type: str = setting(
        "machineType", text(gke_catalog.MACHINE_TYPE, "a machine type"), "e2-standard-4"
    )


@dataclass(frozen=True)
class GkeMachinePool(Checked):
    """What every GKE GPU pool declares: one machine type and the GPUs it carries."""

    name: str = setting("name", dns_label(40))
    """Node pool name, unique in the stack."""
    machine_type: str = setting("machineType")
    gpu_type: str = setting("gpuType")
    """Accelerator name (``nvidia-l4``); implied by accelerator-optimized machine types."""
    gpus_per_node: int = setting("gpusPerNode")
    """GPUs on each node, 1-16; implied by accelerator-optimized machine types."""
    max_nodes: int = setting("maxNodes", integer(1, 1000))
    """Upper bound per zone."""
    zones: tuple[str, ...] = setting("zones")
    """Zones to spread over; default every zone of the region that offers the GPU."""
    disk_gb: int = setting("diskGb", integer(50, 65536), 200)
    """Boot disk; GPU images with CUDA are large."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> GkeMachinePool:
        # Built in a program, a pool names its zones; their region is the one to judge
        # them in (the component that places the pool checks it is the cluster's).
        zones = raw.get("zones") or [""]
        region = zones[0].rsplit("-", 1)[0] if isinstance(zones[0], str) else ""
        return _pool_reader(cls, region)(key, raw)


def _shutdown_seconds(key: str, raw: Any) -> int:
    value = integer()(key, raw)
    if value not in gke_spot.SPOT_SHUTDOWN_SECONDS:
        raise SpecError(key, raw, "not a shutdown period GKE offers", "30 (the default) or 120")
    return value


@dataclass(frozen=True)
class GkeGpuPool(GkeMachinePool, CapacityPool):
    """Spot or on-demand GPU nodes of one machine type. Several pools of one class
    diversify the fleet."""

    min_nodes: int = setting("minNodes", integer(0, 1000), 0)
    """Nodes per zone kept when idle; 0 lets an idle GPU pool cost nothing."""
    shutdown_seconds: int = setting(
        "shutdownSeconds", _shutdown_seconds, gke_spot.DEFAULT_SPOT_SHUTDOWN_SECONDS
    )
    """How long a reclaimed spot node shuts down gracefully: 30 (GKE's default) or 120
    seconds. Non-system pods get it less the system pods' 15 s, so 15 or 105 s to commit
    their final checkpoint, and the smoke test's grace period follows. 120 needs
    ``kubernetesVersion`` 1.35 or later (GKE takes it from control plane
    1.35.0-gke.1171000, ``catalog.gke_spot``); spot pools only, as GKE accepts it on Spot VMs
    only."""

    @property
    def reclaim_grace_seconds(self) -> int | None:
        if self.capacity is not Capacity.SPOT:
            return None
        return gke_spot.pod_shutdown_seconds(self.shutdown_seconds)

    @property
    def long_shutdown(self) -> bool:
        """Asks for more than GKE's default shutdown: the pool renders it, and the control
        plane must take it (``catalog.gke_spot``)."""
        return self.shutdown_seconds != gke_spot.DEFAULT_SPOT_SHUTDOWN_SECONDS


@dataclass(frozen=True)
class FlexStartPool(GkeMachinePool):
    """A DWS flex-start pool: GPUs obtained when available, held for ``max_run_hours``."""

    max_run_hours: int = setting("maxRunHours", integer(1, 168), 24)
    """How long a node may live before GKE reclaims it; at most 168 (7 days)."""
    queued_provisioning: bool = setting("queuedProvisioning", boolean, False)
    """Provision whole gangs through ProvisioningRequest (needs Kueue or the API directly)."""

    pool_class: ClassVar[PoolClass] = PoolClass.FLEX_START

    @property
    def queued(self) -> bool:
        return self.queued_provisioning

    @property
    def reclaim_grace_seconds(self) -> int | None:
        """Not reclaimed before ``max_run_hours``."""
        return None


@dataclass(frozen=True)
class GkeFleet:
    """What a GKE stack adds to the shared fleet."""

    cloud: ClassVar[Cloud] = Cloud.GKE
    system_pool_type: ClassVar[type[SystemPool]] = GkeSystemPool

    project: str
    """GCP project id (config ``gcp:project``)."""
    gpu_pools: tuple[GkeGpuPool, ...] = setting("gpuPools", None, ())
    flex_start: FlexStartPool | None = setting("flexStartPool", None, None)
    autoprovisioning: Autoprovisioning = setting("autoprovisioning", None, factory=Autoprovisioning)
    network: GkeNetwork = setting("network", None, factory=GkeNetwork)
    compute_classes: tuple[ComputeClassSpec, ...] = setting("computeClasses", None, ())
    """GKE ComputeClasses over the stack's pools: a target's pools, then its fallbacks'
    (``fleet.gke_compute_class``); none by default."""

    @property
    def pools(self) -> tuple[GkeGpuPool | FlexStartPool, ...]:
        return (*self.gpu_pools, *((self.flex_start,) if self.flex_start else ()))


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
    return obj.field(
        config_key(GkeMachinePool, "zones"),
        _zones(region, accelerator),
        tuple(sorted(default or ())),
    )


def _gpu(obj: ConfigObject) -> gke_catalog.GpuShape:
    machine_type = obj.field(
        config_key(GkeMachinePool, "machine_type"), text(gke_catalog.MACHINE_TYPE, "a machine type")
    )
    gpu_type = obj.field(config_key(GkeMachinePool, "gpu_type"), text(), None)
    count = obj.field(config_key(GkeMachinePool, "gpus_per_node"), integer(1, 16), None)
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


def _gpu_pool(region: str) -> Callable[[str, Any], GkeGpuPool]:
    return _pool_reader(GkeGpuPool, region)


def _flex_start(region: str) -> Callable[[str, Any], FlexStartPool]:
    return _pool_reader(FlexStartPool, region)


def _pool_reader(cls: type[GkeMachinePool], region: str) -> Callable[[str, Any], Any]:
    def parse(key: str, raw: Any) -> Any:
        obj = ConfigObject(key, raw, fields_of=cls)
        shape = _gpu(obj)
        values = read_settings(
            cls,
            obj,
            machine_type=shape.machine_type,
            gpu_type=shape.accelerator,
            gpus_per_node=shape.count,
        )
        if "min_nodes" in values:
            check_node_range(obj, values["min_nodes"], values["max_nodes"])
        shutdown_key = "shutdownSeconds"
        if obj.raw.get(shutdown_key) is not None and values.get("capacity") is not Capacity.SPOT:
            raise SpecError(
                obj.key_of(shutdown_key),
                obj.raw[shutdown_key],
                "only spot nodes are reclaimed, and GKE takes a shutdown period for Spot VMs only",
                "leave it unset on an on-demand pool",
            )
        values["zones"] = _gpu_zones(obj, region, shape.accelerator)
        pool = cls(**values)
        obj.finish()
        return pool

    return parse


def _section(top: ConfigObject, config: Mapping[str, Any]) -> tuple[GkeFleet, str]:
    project, region = project_and_region(config)
    pools_key = config_key(GkeFleet, "gpu_pools")
    gpu_pools = tuple(
        _gpu_pool(region)(k, v)
        for k, v in items(top.key_of(pools_key), top.field(pools_key, lambda _k, v: v, []))
    )
    section = GkeFleet(
        project=project,
        gpu_pools=gpu_pools,
        flex_start=top.field(config_key(GkeFleet, "flex_start"), _flex_start(region), None),
        autoprovisioning=top.section(
            config_key(GkeFleet, "autoprovisioning"), read_autoprovisioning
        ),
        network=top.section(
            config_key(GkeFleet, "network"), lambda k, v: read_network(k, v, region)
        ),
    )
    classes_key = config_key(GkeFleet, "compute_classes")
    section = replace(
        section,
        compute_classes=top.field(classes_key, read_compute_classes(section.pools), ()),
    )
    names = [(f"{top.key_of(pools_key)}[{i}].name", p.name) for i, p in enumerate(gpu_pools)]
    if section.flex_start:
        flex_key = top.key_of(config_key(GkeFleet, "flex_start"))
        names.append((f"{flex_key}.name", section.flex_start.name))
    check_unique_names(names)
    return section, region


def _finish(spec: FleetSpec) -> FleetSpec:
    """What needs the whole stack: the Kubernetes version a pool's setting needs, and
    auto-provisioning's limits fitted to every pool."""
    section = _gke(spec)
    version = tuple(int(part) for part in spec.kubernetes_version.split("."))
    for index, pool in enumerate(section.gpu_pools):
        if pool.long_shutdown and version < gke_spot.LONG_SHUTDOWN_MIN_MINOR:
            raise SpecError(
                f"{NAMESPACE}:gpuPools[{index}].shutdownSeconds",
                pool.shutdown_seconds,
                f"needs GKE 1.35 or later (control plane {gke_spot.LONG_SHUTDOWN_MIN_VERSION}"
                f"); spotproof:kubernetesVersion is {spec.kubernetes_version}",
                f"{gke_spot.DEFAULT_SPOT_SHUTDOWN_SECONDS}, or kubernetesVersion 1.35 or later",
            )
    _check_fallback_targets(spec, section)
    nap = fitted(section.autoprovisioning, spec.system_pool, section.pools)
    return replace(spec, platform=replace(section, autoprovisioning=nap))


def _check_fallback_targets(spec: FleetSpec, section: GkeFleet) -> None:
    """A workload aimed at a class whose pools a compute class takes as its fallback
    could never land there: they carry the class's taint. It goes through the class."""
    for spec_class in section.compute_classes:
        for key, workload in (("smokeTest", spec.smoke_test), ("batch", spec.batch)):
            if workload is not None and workload.target in spec_class.fallback:
                raise SpecError(
                    f"{NAMESPACE}:{key}.target",
                    workload.target.value,
                    f"its pools are compute class {spec_class.name}'s fallback, tainted for "
                    "that class alone",
                    f"{spec_class.target.value}, which tries them after its own pools",
                )


def _gke(spec: FleetSpec) -> GkeFleet:
    assert isinstance(spec.platform, GkeFleet)
    return spec.platform


CONFIG = CloudConfig(
    section=GkeFleet,
    read_section=_section,
    default_bucket_name=lambda section, stack, region: f"{section.project}-{stack}-checkpoints",
    bucket_name_ok=bucket_name_ok,
    bucket_rule=BUCKET_RULE,
    finish=_finish,
    own_keys=("gcp:project", "gcp:region"),
    project_of=lambda section: section.project,
    drill_principals=GCP_MEMBER,
)
"""How the GKE section is read from stack config."""
