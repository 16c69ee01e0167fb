"""The GKE section of a fleet: project, its pools (``fleet.gke_pools``), node
auto-provisioning, network and compute classes; and how it is read from stack config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from spotproof.catalog import Cloud, gke_spot
from spotproof.fleet.drill import GCP_MEMBER
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject, config_key, setting
from spotproof.fleet.gke_autoprovisioning import Autoprovisioning, fitted, read_autoprovisioning
from spotproof.fleet.gke_compute_class import ComputeClassSpec, read_compute_classes
from spotproof.fleet.gke_network import GkeNetwork, read_network
from spotproof.fleet.gke_pools import FlexStartPool, GkeGpuPool, GkeSystemPool, pool_reader
from spotproof.fleet.pools import SystemPool
from spotproof.fleet.readers import items, text
from spotproof.fleet.shared import CloudConfig, check_unique_names, required
from spotproof.fleet.types import FleetSpec

NAMESPACE = "spotproof"


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


def _section(top: ConfigObject, config: Mapping[str, Any]) -> tuple[GkeFleet, str]:
    project, region = project_and_region(config)
    pools_key = config_key(GkeFleet, "gpu_pools")
    gpu_pools = tuple(
        pool_reader(GkeGpuPool, region)(k, v)
        for k, v in items(top.key_of(pools_key), top.field(pools_key, lambda _k, v: v, []))
    )
    section = GkeFleet(
        project=project,
        gpu_pools=gpu_pools,
        flex_start=top.field(
            config_key(GkeFleet, "flex_start"), pool_reader(FlexStartPool, region), None
        ),
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
