"""The EKS section of a fleet: network, Karpenter and its GPU NodePools; and how it is
read from stack config."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from spotproof.catalog import Cloud
from spotproof.catalog import eks as eks_catalog
from spotproof.fleet.addresses import private_range
from spotproof.fleet.drill import AWS_ROLE
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import (
    Checked,
    ConfigObject,
    config_key,
    read_object,
    read_settings,
    setting,
)
from spotproof.fleet.pools import CapacityPool, SystemPool
from spotproof.fleet.readers import boolean, integer, items, published, text
from spotproof.fleet.shared import (
    DEFAULT_WEIGHT,
    CloudConfig,
    check_fallback_weights,
    check_unique_names,
    dns_label,
    required,
)
from spotproof.fleet.types import FleetSpec

_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_NODE_IMAGE = re.compile(r"^bottlerocket@(latest|v[0-9]+\.[0-9]+\.[0-9]+)$")
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
RESERVED_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
RESERVED_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
"""S3 general purpose bucket naming rules:
https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html"""
BUCKET_RULE = (
    "3-63 of [a-z0-9-], starting and ending alphanumeric, not starting "
    + " or ".join(RESERVED_BUCKET_PREFIXES)
    + ", not ending "
    + " or ".join(RESERVED_BUCKET_SUFFIXES)
)
KMS_KEY = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]{36}$")

MAX_ZONES = 6
"""A created VPC gives each zone an eighth of its range and keeps the last for public subnets."""


@dataclass(frozen=True)
class EksSystemPool(SystemPool):
    """An ON_DEMAND managed node group; sizes are totals across the cluster's subnets."""

    machine_type: str = setting(
        "instanceType",
        text(eks_catalog.INSTANCE_TYPE, "an EC2 instance type like m6i.xlarge"),
        eks_catalog.SYSTEM_INSTANCE_TYPE,
    )
    min_nodes: int = setting("minNodes", integer(1, 1000), 2)
    """Two by default, so the Karpenter controller's two replicas sit in two zones."""


@dataclass(frozen=True)
class Subnet:
    id: str = setting("id", text(_SUBNET_ID, "a subnet id like subnet-0123456789abcdef0"))
    zone: str = setting("zone")
    """Availability zone; named in config because an offline plan cannot look it up."""


@dataclass(frozen=True)
class NetworkSpec:
    """Where the cluster lives: subnets the stack names, or a VPC spotproof creates."""

    subnets: tuple[Subnet, ...] = setting("subnets", None, ())
    """Existing private subnets in at least two zones; empty means create a VPC."""
    cidr: str = setting("cidr", None, "10.0.0.0/16")
    """Address range of the created VPC: a /16 to /20 of RFC 1918 space."""
    zones: tuple[str, ...] = setting("zones", None, ())
    """Zones of the created VPC's private subnets (2-6); default the region's a, b and c."""


@dataclass(frozen=True)
class KarpenterSpec(Checked):
    """The Karpenter installation."""

    version: str = setting("version", published(eks_catalog.KARPENTER_VERSIONS, "Karpenter v1"))
    """Helm chart version of ``karpenter`` and ``karpenter-crd``, pinned (``1.6.3``); one
    of ``catalog.eks.KARPENTER_VERSIONS``."""
    node_image: str = setting(
        "nodeImage",
        text(_NODE_IMAGE, "bottlerocket@latest or bottlerocket@vX.Y.Z"),
        "bottlerocket@latest",
    )
    """AMI alias for GPU nodes. Bottlerocket ships the NVIDIA driver and device plugin, so
    no DaemonSet is needed; pin a version (``bottlerocket@v1.40.0``) in production, as
    ``latest`` replaces nodes on every AMI release."""
    namespace: str = setting("namespace", dns_label(63), "kube-system")
    replicas: int = setting("replicas", integer(1, 5), 2)
    """Controller replicas, at most the system pool's ``minNodes``: the chart keeps them on
    different nodes."""
    node_ssm_access: bool = setting("nodeSsmAccess", boolean, False)
    """Attach ``AmazonSSMManagedInstanceCore`` to the nodes Karpenter launches, for Session
    Manager shells (and Bottlerocket's control container). Off by default: nothing
    spotproof runs needs it, and it widens what the node role may do."""


@dataclass(frozen=True)
class KarpenterPool(CapacityPool):
    """A Karpenter ``NodePool`` of GPU instances: several families, one GPU count.

    Karpenter chooses the instance type at launch from every type the requirements allow,
    so one pool is already diversified; ``min_instance_types`` makes that a guarantee.
    """

    name: str = setting("name", dns_label(40))
    """NodePool name, unique in the stack."""
    instance_families: tuple[str, ...] = setting("instanceFamilies", None)
    """EC2 families to choose from (``g6``, ``g5``, ``g6e``); see ``catalog.eks.FAMILIES``."""
    gpu_limit: int = setting("gpuLimit", None)
    """Most ``nvidia.com/gpu`` the pool's nodes may hold together: the spend ceiling; at
    least ``gpusPerNode``."""
    gpus_per_node: int = setting("gpusPerNode", None, 1)
    """A GPU count some instance of the families has."""
    min_instance_types: int = setting("minInstanceTypes", None, 3)
    """Karpenter launches only if at least this many instance types remain eligible
    (``minValues``): a spot request across many types is far less likely to be refused.
    Capped at the number of types the families offer."""
    weight: int = setting(
        "weight",
        integer(1, 100),
        None,  # derived, below: a program that leaves it out gets its capacity's
        derived_default=lambda read: DEFAULT_WEIGHT[read["capacity"]],
    )
    """Priority among pools a pod fits, 1-100, highest first. Spot pools default to 100,
    on-demand fallbacks to 10 and must stay below every spot pool."""
    disk_gb: int = setting("diskGb", integer(50, 16384), 200)
    """Data volume for container images; CUDA images are large."""
    expire_after_hours: int = setting("expireAfterHours", integer(1, 8760), 720)
    """Nodes are replaced after this long, picking up new AMIs."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> KarpenterPool:
        return _pool(key, raw)


@dataclass(frozen=True)
class EksFleet:
    """What an EKS stack adds to the shared fleet."""

    cloud: ClassVar[Cloud] = Cloud.EKS
    system_pool_type: ClassVar[type[SystemPool]] = EksSystemPool

    karpenter: KarpenterSpec = setting("karpenter", None)
    network: NetworkSpec = setting("network", None, NetworkSpec())
    gpu_pools: tuple[KarpenterPool, ...] = setting("gpuPools", None, ())

    @property
    def pools(self) -> tuple[KarpenterPool, ...]:
        return self.gpu_pools


def region_of(config: Mapping[str, Any]) -> str:
    allowed = "an AWS region like us-west-2"
    raw = config.get("aws:region") or required("aws:region", allowed)
    return text(_REGION, allowed)("aws:region", raw)


def bucket_name_ok(name: str) -> bool:
    return (
        bool(BUCKET_NAME.fullmatch(name))
        and not name.startswith(RESERVED_BUCKET_PREFIXES)
        and not name.endswith(RESERVED_BUCKET_SUFFIXES)
    )


def _zone(region: str) -> Callable[[str, Any], str]:
    known = eks_catalog.region_zones(region)

    def parse(key: str, raw: Any) -> str:
        shaped = isinstance(raw, str) and re.fullmatch(rf"{re.escape(region)}[a-z]", raw)
        if not shaped or (known is not None and raw not in known):
            allowed = ", ".join(known) if known else f"{region}a, {region}b, ..."
            raise SpecError(key, raw, f"not a zone of {region}", allowed)
        return raw

    return parse


def _subnet(region: str) -> Callable[[str, Any], Subnet]:
    def parse(key: str, raw: Any) -> Subnet:
        obj = ConfigObject(key, raw, fields_of=Subnet)
        subnet = Subnet(
            **read_settings(Subnet, obj, zone=obj.field(config_key(Subnet, "zone"), _zone(region)))
        )
        obj.finish()
        return subnet

    return parse


_cidr = private_range(16, 20)


def _network(region: str) -> Callable[[str, Any], NetworkSpec]:
    def parse(key: str, raw: Any) -> NetworkSpec:
        obj = ConfigObject(key, raw)
        subnets_key = config_key(NetworkSpec, "subnets")
        subnets = tuple(
            _subnet(region)(k, v)
            for k, v in items(f"{key}.{subnets_key}", obj.field(subnets_key, _raw, []))
        )
        if subnets:
            network = NetworkSpec(subnets=subnets)
            zones = {s.zone for s in subnets}
            if len(zones) < 2:
                raise SpecError(
                    f"{key}.{subnets_key}",
                    ", ".join(s.id for s in subnets),
                    f"all in one zone ({', '.join(sorted(zones))}); EKS needs two or more",
                    "private subnets in at least two zones",
                )
        else:
            zones = tuple(
                _zone(region)(k, v)
                for k, v in items(
                    f"{key}.zones", obj.field("zones", _raw, [f"{region}{z}" for z in "abc"])
                )
            )
            if not 2 <= len(set(zones)) == len(zones) <= MAX_ZONES:
                raise SpecError(
                    f"{key}.zones",
                    ", ".join(zones),
                    f"needs 2 to {MAX_ZONES} distinct zones",
                    f"e.g. {region}a, {region}b, {region}c",
                )
            network = NetworkSpec(cidr=obj.field("cidr", _cidr, NetworkSpec.cidr), zones=zones)
        obj.finish()
        return network

    return parse


def _raw(_key: str, value: Any) -> Any:
    return value


def _karpenter(key: str, raw: Any) -> KarpenterSpec:
    return read_object(KarpenterSpec, key, raw)


def _families(key: str, raw: Any) -> tuple[str, ...]:
    families = []
    for family_key, family in items(key, raw):
        if not isinstance(family, str) or family not in eks_catalog.FAMILIES:
            raise SpecError(
                family_key, family, "unknown GPU instance family", ", ".join(eks_catalog.FAMILIES)
            )
        if family in families:
            raise SpecError(family_key, family, "listed twice", "each family once")
        families.append(family)
    if not families:
        raise SpecError(key, raw, "empty", "one or more of " + ", ".join(eks_catalog.FAMILIES))
    return tuple(families)


def _pool(key: str, raw: Any) -> KarpenterPool:
    obj = ConfigObject(key, raw, fields_of=KarpenterPool)
    families = obj.field(config_key(KarpenterPool, "instance_families"), _families)
    gpus_key = config_key(KarpenterPool, "gpus_per_node")
    gpus = obj.field(gpus_key, integer(1, 16), KarpenterPool.gpus_per_node)
    if gpus not in eks_catalog.gpu_counts(families):
        raise SpecError(
            f"{key}.{gpus_key}",
            gpus,
            f"no {'/'.join(families)} instance has that many GPUs",
            ", ".join(map(str, eks_catalog.gpu_counts(families))),
        )
    types = eks_catalog.instance_types(families, gpus)
    pool = KarpenterPool(
        **read_settings(
            KarpenterPool,
            obj,
            instance_families=families,
            gpus_per_node=gpus,
            gpu_limit=obj.field(config_key(KarpenterPool, "gpu_limit"), integer(gpus, 100_000)),
            min_instance_types=obj.field(
                config_key(KarpenterPool, "min_instance_types"),
                integer(1, len(types)),
                min(KarpenterPool.min_instance_types, len(types)),
            ),
        )
    )
    obj.finish()
    return pool


def _section(top: ConfigObject, config: Mapping[str, Any]) -> tuple[EksFleet, str]:
    region = region_of(config)
    key = top.key_of(config_key(EksFleet, "gpu_pools"))
    gpu_pools = tuple(
        _pool(k, v) for k, v in items(key, top.field(config_key(EksFleet, "gpu_pools"), _raw, []))
    )
    check_unique_names([(f"{key}[{i}].name", pool.name) for i, pool in enumerate(gpu_pools)])
    check_fallback_weights(key, gpu_pools)
    section = EksFleet(
        network=top.section(config_key(EksFleet, "network"), _network(region)),
        karpenter=top.field(config_key(EksFleet, "karpenter"), _karpenter),
        gpu_pools=gpu_pools,
    )
    return section, region


def _kms_key(obj: ConfigObject, region: str) -> dict[str, Any]:
    kms_key = obj.field("kmsKeyArn", text(KMS_KEY, "a KMS key ARN"), None)
    # SSE-KMS needs a key in the bucket's own region: S3 refuses any other.
    if kms_key and kms_key.split(":")[3] != region:
        raise SpecError(
            obj.key_of("kmsKeyArn"),
            kms_key,
            f"key in region {kms_key.split(':')[3]}, bucket in {region}",
            f"a KMS key in {region}",
        )
    return {"kms_key": kms_key}


def _check_karpenter_replicas(spec: FleetSpec) -> FleetSpec:
    """Karpenter's chart keeps replicas on different nodes: each needs a system node."""
    assert isinstance(spec.platform, EksFleet)
    replicas, system_nodes = spec.platform.karpenter.replicas, spec.system_pool.min_nodes
    if replicas > system_nodes:
        raise SpecError(
            f"spotproof:{config_key(EksFleet, 'karpenter')}."
            f"{config_key(KarpenterSpec, 'replicas')}",
            replicas,
            f"more than the system pool's minNodes ({system_nodes}); the extra "
            "replicas would never schedule",
            f"1-{system_nodes}",
        )
    return spec


CONFIG = CloudConfig(
    section=EksFleet,
    read_section=_section,
    default_bucket_name=lambda _section, stack, region: f"spotproof-{stack}-{region}",
    bucket_name_ok=bucket_name_ok,
    bucket_rule=BUCKET_RULE,
    read_bucket_extras=_kms_key,
    finish=_check_karpenter_replicas,
    own_keys=("aws:region",),
    drill_principals=AWS_ROLE,
)
"""How the EKS section is read from stack config."""
