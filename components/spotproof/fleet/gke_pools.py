"""GKE's node pools in a fleet: the system pool, the GPU pools of one machine type (spot
or on-demand) and DWS flex-start; and how each is read from stack config, its GPU checked
against the machine type and its zones against the region's offer."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from spotproof.catalog import gke as gke_catalog
from spotproof.catalog import gke_spot
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import Checked, ConfigObject, config_key, read_settings, setting
from spotproof.fleet.pools import Capacity, CapacityPool, PoolClass, SystemPool, check_node_range
from spotproof.fleet.readers import boolean, integer, items, text
from spotproof.fleet.shared import dns_label


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
        return pool_reader(cls, region)(key, raw)


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


def pool_reader(cls: type[GkeMachinePool], region: str) -> Callable[[str, Any], Any]:
    """How a pool of ``cls`` is read from stack config, its zones judged in ``region``."""

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
