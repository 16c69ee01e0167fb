"""The AKS section of a fleet: spot GPU agent pools (one VM size each, scaled by the
cluster autoscaler) and node auto-provisioning pools (managed Karpenter NodePools over
several VM sizes); and how it is read from stack config."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, ClassVar

from spotproof.catalog import Cloud
from spotproof.catalog import aks as aks_catalog
from spotproof.fleet.drill import ENTRA_OBJECT_ID
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject, config_key, read_settings, setting
from spotproof.fleet.pools import CapacityPool, SystemPool, Taint, check_node_range
from spotproof.fleet.readers import decode, enumeration, integer, items, text
from spotproof.fleet.shared import (
    DEFAULT_WEIGHT,
    CloudConfig,
    check_fallback_weights,
    check_unique_names,
    dns_label,
    required,
)
from spotproof.fleet.types import FleetSpec

_LOCATION = re.compile(r"^[a-z]+[a-z0-9]*$")
_RESOURCE_GROUP = re.compile(r"^[-\w.()]{0,89}[-\w()]$")
"""1-90 of letters, digits, ``_-.()``, not ending in a period
(https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules)."""
STORAGE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
BUCKET_RULE = "a storage account name: 3-24 lowercase letters and digits, unique across Azure"
ZONES = ("1", "2", "3")

PLATFORM_SPOT_TAINT = Taint(aks_catalog.SCALE_SET_PRIORITY_LABEL, aks_catalog.SPOT_PRIORITY)
"""AKS taints every spot agent pool ``kubernetes.azure.com/scalesetpriority=spot:NoSchedule``
by itself (``articles/aks/spot-node-pool.md``), and writes it back into the pool's
``nodeTaints``: declaring it keeps a second ``pulumi up`` diff-free. AKS node
auto-provisioning only labels spot nodes (no code in karpenter-provider-azure adds the
taint), so its NodePools carry the contract's own spot taint instead."""


class GpuDriver(StrEnum):
    """Who installs the NVIDIA driver on GPU nodes (AgentPool ``gpuProfile.driver``;
    AKSNodeClass ``gpu.mode`` Driver/None). ``None`` is for the NVIDIA GPU Operator; the
    retired ``SkipGPUDriverInstall`` node tag no longer works
    (``articles/aks/use-nvidia-gpu.md``)."""

    INSTALL = "Install"
    NONE = "None"


class ImageFamily(StrEnum):
    """Node OS image of auto-provisioned nodes (AKSNodeClass ``imageFamily``)."""

    AZURE_LINUX = "AzureLinux"
    UBUNTU = "Ubuntu"
    UBUNTU_2204 = "Ubuntu2204"
    UBUNTU_2404 = "Ubuntu2404"


def _vm_size(key: str, raw: Any) -> str:
    return text(aks_catalog.VM_SIZE, "an Azure VM size like Standard_D4ds_v5")(key, raw)


def _gpu_vm_size(key: str, raw: Any) -> str:
    if not isinstance(raw, str) or raw not in aks_catalog.GPU_VM_SIZES:
        raise SpecError(key, raw, "unknown GPU VM size", ", ".join(aks_catalog.GPU_VM_SIZES))
    return str(raw)


def _agent_pool_name(key: str, raw: Any) -> str:
    return text(aks_catalog.AGENT_POOL_NAME, "1-12 lowercase letters and digits, a letter first")(
        key, raw
    )


@dataclass(frozen=True)
class AksSystemPool(SystemPool):
    """The ``System`` mode agent pool, declared with the cluster; its sizes are totals."""

    machine_type: str = setting("vmSize", _vm_size, aks_catalog.SYSTEM_VM_SIZE)
    """At least 4 vCPU and 4 GB of memory (``articles/aks/use-system-pools.md``)."""
    min_nodes: int = setting("minNodes", integer(2, 1000), 2)
    """At least 2: AKS asks for two system nodes or more (three recommended) so that
    CoreDNS and konnectivity survive a node's loss."""
    disk_gb: int = setting("diskGb", integer(30, 2048), 128)


@dataclass(frozen=True, kw_only=True)
class GpuAgentPool(CapacityPool):
    """An AKS agent pool of one GPU VM size, scaled from zero by the cluster autoscaler.
    Several pools of one class diversify the fleet (sizes are evicted independently)."""

    name: str = setting("name", _agent_pool_name)
    """Agent pool name, unique in the stack."""
    vm_size: str = setting("vmSize", _gpu_vm_size)
    """One of ``catalog.aks.GPU_VM_SIZES``; it fixes the GPU model and count."""
    gpus_per_node: int = setting("gpusPerNode", None, 0)
    """The size's GPU count; may be given to document it, and must then match (0, the
    default, takes the size's)."""
    min_nodes: int = setting("minNodes", integer(0, 1000), 0)
    """Nodes kept when idle; 0 lets an idle GPU pool cost nothing."""
    max_nodes: int = setting("maxNodes", integer(1, 1000))
    zones: tuple[str, ...] = setting("zones", None, ())
    """Availability zones (``1``, ``2``, ``3``); empty lets Azure place nodes regionally."""
    disk_gb: int = setting("diskGb", integer(30, 2048), 256)
    """OS disk; CUDA images are large."""
    gpu_driver: GpuDriver = setting("gpuDriver", enumeration(GpuDriver), GpuDriver.INSTALL)

    @classmethod
    def judge(cls, key: str, raw: Any) -> GpuAgentPool:
        return _agent_pool(key, raw)


@dataclass(frozen=True, kw_only=True)
class AutoProvisionedPool(CapacityPool):
    """A ``karpenter.sh/v1`` NodePool that AKS node auto-provisioning fills with any of
    several GPU VM sizes of one GPU count. Karpenter picks the size at launch, so one pool
    is already diversified."""

    name: str = setting("name", dns_label(40))
    """NodePool name, unique in the stack."""
    vm_sizes: tuple[str, ...] = setting("vmSizes", None)
    """GPU VM sizes to choose from, all with ``gpusPerNode`` GPUs."""
    gpus_per_node: int = setting("gpusPerNode", None, 0)
    """Defaults (0) to the first size's GPU count."""
    gpu_limit: int = setting("gpuLimit", None)
    """Most ``nvidia.com/gpu`` the pool's nodes may hold together: the spend ceiling."""
    weight: int = setting(
        "weight",
        integer(1, 100),
        None,  # derived, below: a program that leaves it out gets its capacity's
        derived_default=lambda read: DEFAULT_WEIGHT[read["capacity"]],
    )
    """Priority among pools a pod fits, highest first; spot pools default to 100 and
    on-demand fallbacks to 10, and a fallback must stay below every spot pool."""
    disk_gb: int = setting("diskGb", integer(30, 2048), 256)
    """AKSNodeClass ``osDiskSizeGB`` (30-2048)."""
    image_family: ImageFamily = setting(
        "imageFamily", enumeration(ImageFamily), ImageFamily.AZURE_LINUX
    )
    gpu_driver: GpuDriver = setting("gpuDriver", enumeration(GpuDriver), GpuDriver.INSTALL)
    expire_after_hours: int = setting("expireAfterHours", integer(1, 8760), 720)
    """Nodes are replaced after this long, picking up new node images."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> AutoProvisionedPool:
        return _auto_provisioned_pool(key, raw)


@dataclass(frozen=True)
class AksFleet:
    """What an AKS stack adds to the shared fleet."""

    cloud: ClassVar[Cloud] = Cloud.AKS
    system_pool_type: ClassVar[type[SystemPool]] = AksSystemPool

    resource_group: str | None = setting(
        "resourceGroup", text(_RESOURCE_GROUP, "an existing resource group name"), None
    )
    """An existing resource group to build in; default: a new one named after the stack."""
    gpu_pools: tuple[GpuAgentPool, ...] = setting("gpuPools", None, ())
    auto_provisioned_pools: tuple[AutoProvisionedPool, ...] = setting(
        "autoProvisionedPools", None, ()
    )
    """Node auto-provisioning turns on when there is at least one."""

    @property
    def node_auto_provisioning(self) -> bool:
        return bool(self.auto_provisioned_pools)

    @property
    def pools(self) -> tuple[GpuAgentPool | AutoProvisionedPool, ...]:
        return (*self.gpu_pools, *self.auto_provisioned_pools)


def location_of(config: Mapping[str, Any]) -> str:
    allowed = "an Azure region name like eastus2"
    raw = config.get("azure-native:location") or required("azure-native:location", allowed)
    return text(_LOCATION, allowed)("azure-native:location", raw)


def default_storage_account(stack: str, region: str) -> str:
    """``sp`` + the stack's letters and digits + a digest of stack and region: storage
    account names are global, so two stacks (or regions) never collide."""
    digest = hashlib.sha256(f"{stack}/{region}".encode()).hexdigest()[:8]
    return f"sp{re.sub('[^a-z0-9]', '', stack)[:14]}{digest}"


def _raw(_key: str, value: Any) -> Any:
    return value


def _zones(key: str, raw: Any) -> tuple[str, ...]:
    zones = tuple(str(z) for _, z in items(key, raw))
    unknown = [z for z in zones if z not in ZONES]
    if unknown or len(set(zones)) != len(zones):
        raise SpecError(key, raw, "not distinct availability zones", ", ".join(ZONES))
    return zones


def _gpu_count(obj: ConfigObject, sizes: tuple[str, ...], sizes_key: str) -> int:
    """The pool's GPUs per node: every size must have the same count."""
    gpus_key = config_key(GpuAgentPool, "gpus_per_node")
    first = aks_catalog.GPU_VM_SIZES[sizes[0]].gpus
    gpus = obj.field(gpus_key, integer(1, 16), first)
    for index, size in enumerate(sizes):
        has = aks_catalog.GPU_VM_SIZES[size].gpus
        if has != gpus:
            where = obj.key_of(sizes_key) + (f"[{index}]" if len(sizes) > 1 else "")
            raise SpecError(
                where, size, f"has {has} GPUs, not gpusPerNode {gpus}", f"a size with {gpus}"
            )
    return gpus


def _agent_pool(key: str, raw: Any) -> GpuAgentPool:
    obj = ConfigObject(key, raw, fields_of=GpuAgentPool)
    size_key = config_key(GpuAgentPool, "vm_size")
    size = obj.field(size_key, _gpu_vm_size)
    values = read_settings(
        GpuAgentPool,
        obj,
        vm_size=size,
        gpus_per_node=_gpu_count(obj, (size,), size_key),
        zones=obj.field(config_key(GpuAgentPool, "zones"), _zones, ()),
    )
    check_node_range(obj, values["min_nodes"], values["max_nodes"])
    obj.finish()
    return GpuAgentPool(**values)


def _sizes(key: str, raw: Any) -> tuple[str, ...]:
    sizes: list[str] = []
    for size_key, size in items(key, raw):
        if _gpu_vm_size(size_key, size) in sizes:
            raise SpecError(size_key, size, "listed twice", "each size once")
        sizes.append(size)
    if not sizes:
        raise SpecError(key, raw, "empty", "one or more of " + ", ".join(aks_catalog.GPU_VM_SIZES))
    return tuple(sizes)


def _auto_provisioned_pool(key: str, raw: Any) -> AutoProvisionedPool:
    obj = ConfigObject(key, raw, fields_of=AutoProvisionedPool)
    sizes_key = config_key(AutoProvisionedPool, "vm_sizes")
    sizes = obj.field(sizes_key, _sizes)
    gpus = _gpu_count(obj, sizes, sizes_key)
    pool = AutoProvisionedPool(
        **read_settings(
            AutoProvisionedPool,
            obj,
            vm_sizes=sizes,
            gpus_per_node=gpus,
            gpu_limit=obj.field(
                config_key(AutoProvisionedPool, "gpu_limit"), integer(gpus, 100_000)
            ),
        )
    )
    obj.finish()
    return pool


def _list(top: ConfigObject, name: str, read: Callable[[str, Any], Any]) -> tuple[Any, ...]:
    key = config_key(AksFleet, name)
    return tuple(read(k, v) for k, v in items(top.key_of(key), top.field(key, _raw, [])))


def _section(top: ConfigObject, config: Mapping[str, Any]) -> tuple[AksFleet, str]:
    location = location_of(config)
    gpu_pools = _list(top, "gpu_pools", _agent_pool)
    nap_pools = _list(top, "auto_provisioned_pools", _auto_provisioned_pool)
    gpu_key = top.key_of(config_key(AksFleet, "gpu_pools"))
    nap_key = top.key_of(config_key(AksFleet, "auto_provisioned_pools"))
    check_unique_names(
        [(f"{gpu_key}[{i}].name", p.name) for i, p in enumerate(gpu_pools)]
        + [(f"{nap_key}[{i}].name", p.name) for i, p in enumerate(nap_pools)]
    )
    check_fallback_weights(nap_key, nap_pools)
    if gpu_pools and nap_pools:
        raise SpecError(
            gpu_key,
            ", ".join(p.name for p in gpu_pools),
            "autoscaled agent pools cannot run beside node auto-provisioning (AKS: with "
            "nodeProvisioningProfile.mode Auto, autoscaling node pools cannot be created)",
            f"either {gpu_key} or {nap_key}, not both",
        )
    system = decode(top.raw.get("systemPool")) or {}
    if nap_pools and isinstance(system, Mapping) and "maxNodes" in system:
        # pulumi-azure-native NodeProvisioningMode.AUTO: "Fixed size Node Pools can still
        # be created, but autoscaling Node Pools cannot be" (the system pool included).
        raise SpecError(
            top.key_of("systemPool.maxNodes"),
            system["maxNodes"],
            "with autoProvisionedPools the system pool cannot autoscale; its size is minNodes",
            "leave maxNodes out",
        )
    section = AksFleet(
        **read_settings(AksFleet, top, gpu_pools=gpu_pools, auto_provisioned_pools=nap_pools)
    )
    return section, location


def _fixed_system_pool(spec: FleetSpec) -> FleetSpec:
    """With node auto-provisioning the system pool has a fixed size, ``minNodes``."""
    assert isinstance(spec.platform, AksFleet)
    if not spec.platform.node_auto_provisioning:
        return spec
    return replace(
        spec, system_pool=replace(spec.system_pool, max_nodes=spec.system_pool.min_nodes)
    )


CONFIG = CloudConfig(
    section=AksFleet,
    read_section=_section,
    default_bucket_name=lambda _section, stack, region: default_storage_account(stack, region),
    bucket_name_ok=lambda name: bool(STORAGE_ACCOUNT.fullmatch(name)),
    bucket_rule=BUCKET_RULE,
    finish=_fixed_system_pool,
    own_keys=("azure-native:location",),
    drill_principals=ENTRA_OBJECT_ID,
)
"""How the AKS section is read from stack config."""
