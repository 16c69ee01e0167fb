"""The EKS part of a stack's config: region, network, Karpenter and its GPU NodePools."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any

from spotproof.catalog import eks as eks_catalog
from spotproof.spec.errors import SpecError
from spotproof.spec.fields import ConfigObject, choice, integer, items, labels, text
from spotproof.spec.shared import dns_label, required, taints
from spotproof.spec.types import Capacity, Karpenter, KarpenterPool, Network, Subnet

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
DEFAULT_WEIGHT = {Capacity.SPOT: 100, Capacity.ON_DEMAND: 10}

SYSTEM_INSTANCE_TYPE = (
    "instanceType",
    text(eks_catalog.INSTANCE_TYPE, "an EC2 instance type like m6i.xlarge"),
    eks_catalog.SYSTEM_INSTANCE_TYPE,
)
"""Config key, reader and default of the system node group's instance type."""


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
        obj = ConfigObject(key, raw)
        subnet = Subnet(
            id=obj.field("id", text(_SUBNET_ID, "a subnet id like subnet-0123456789abcdef0")),
            zone=obj.field("zone", _zone(region)),
        )
        obj.finish()
        return subnet

    return parse


PRIVATE_RANGES = tuple(
    ipaddress.IPv4Network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
"""RFC 1918 space. Python's ``is_private`` also admits loopback, link-local, ``0.0.0.0/8``
and the reserved class E range, none of which a VPC can use."""


def _cidr(key: str, raw: Any) -> str:
    allowed = "a /16 to /20 inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"
    try:
        network = ipaddress.IPv4Network(str(raw))
    except ValueError:
        raise SpecError(key, raw, "not an IPv4 network", allowed) from None
    if not any(network.subnet_of(block) for block in PRIVATE_RANGES):
        raise SpecError(key, raw, "not in private (RFC 1918) address space", allowed)
    if not 16 <= network.prefixlen <= 20:
        raise SpecError(key, raw, f"a /{network.prefixlen} is outside /16 to /20", allowed)
    return str(network)


def _network(region: str) -> Callable[[str, Any], Network]:
    def parse(key: str, raw: Any) -> Network:
        obj = ConfigObject(key, raw)
        subnets = tuple(
            _subnet(region)(k, v)
            for k, v in items(f"{key}.subnets", obj.field("subnets", _raw, []))
        )
        if subnets:
            network = Network(subnets=subnets)
            zones = {s.zone for s in subnets}
            if len(zones) < 2:
                raise SpecError(
                    f"{key}.subnets",
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
            network = Network(cidr=obj.field("cidr", _cidr, Network.cidr), zones=zones)
        obj.finish()
        return network

    return parse


def _karpenter_version(key: str, raw: Any) -> str:
    """A published Karpenter chart: an unpublished one fails ``pulumi up`` at the chart pull."""
    if raw not in eks_catalog.KARPENTER_VERSIONS:
        newest = eks_catalog.KARPENTER_VERSIONS[-1]
        raise SpecError(
            key,
            raw,
            "not a published Karpenter v1 chart version (quote it in YAML)",
            f"1.0.0 to {newest}, e.g. {newest}",
        )
    return str(raw)


def _raw(_key: str, value: Any) -> Any:
    return value


def _karpenter(key: str, raw: Any) -> Karpenter:
    obj = ConfigObject(key, raw)
    karpenter = Karpenter(
        version=obj.field("version", _karpenter_version),
        node_image=obj.field(
            "nodeImage",
            text(_NODE_IMAGE, "bottlerocket@latest or bottlerocket@vX.Y.Z"),
            Karpenter.node_image,
        ),
        namespace=obj.field("namespace", dns_label(63), Karpenter.namespace),
        replicas=obj.field("replicas", integer(1, 5), Karpenter.replicas),
    )
    obj.finish()
    return karpenter


def _families(key: str, raw: Any) -> tuple[str, ...]:
    families = []
    for family_key, family in items(key, raw):
        if family not in eks_catalog.FAMILIES:
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
    obj = ConfigObject(key, raw)
    name = obj.field("name", dns_label(40))
    families = obj.field("instanceFamilies", _families)
    gpus = obj.field("gpusPerNode", integer(1, 16), KarpenterPool.gpus_per_node)
    if gpus not in eks_catalog.gpu_counts(families):
        raise SpecError(
            f"{key}.gpusPerNode",
            gpus,
            f"no {'/'.join(families)} instance has that many GPUs",
            ", ".join(map(str, eks_catalog.gpu_counts(families))),
        )
    types = eks_catalog.instance_types(families, gpus)
    capacity = Capacity(obj.field("capacity", choice(tuple(Capacity)), Capacity.SPOT.value))
    pool = KarpenterPool(
        name=name,
        instance_families=families,
        gpu_limit=obj.field("gpuLimit", integer(gpus, 100_000)),
        capacity=capacity,
        gpus_per_node=gpus,
        min_instance_types=obj.field(
            "minInstanceTypes",
            integer(1, len(types)),
            min(KarpenterPool.min_instance_types, len(types)),
        ),
        weight=obj.field("weight", integer(1, 100), DEFAULT_WEIGHT[capacity]),
        disk_gb=obj.field("diskGb", integer(50, 16384), KarpenterPool.disk_gb),
        expire_after_hours=obj.field("expireAfterHours", integer(1, 8760), 720),
        extra_taints=obj.field("extraTaints", taints, ()),
        extra_labels=obj.field("extraLabels", labels, {}),
    )
    obj.finish()
    return pool


def _check_fallback_weights(key: str, pools: tuple[KarpenterPool, ...]) -> None:
    """Karpenter tries the highest weight first: a fallback above spot would be used first."""
    spot = [p for p in pools if p.capacity is Capacity.SPOT]
    for index, pool in enumerate(pools):
        if pool.capacity is Capacity.ON_DEMAND and spot:
            lowest = min(spot, key=lambda p: p.weight)
            if pool.weight >= lowest.weight:
                raise SpecError(
                    f"{key}[{index}].weight",
                    pool.weight,
                    f"an on-demand fallback must weigh less than spot pool {lowest.name} "
                    f"({lowest.weight})",
                    f"1-{lowest.weight - 1}",
                )


def pools(top: ConfigObject, region: str) -> dict[str, Any]:
    """The EKS-only :class:`FleetSpec` fields."""
    key = top.key_of("gpuPools")
    karpenter_pools = tuple(_pool(k, v) for k, v in items(key, top.field("gpuPools", _raw, [])))
    _check_fallback_weights(key, karpenter_pools)
    return {
        "network": top.section("network", _network(region)),
        "karpenter": top.field("karpenter", _karpenter),
        "karpenter_pools": karpenter_pools,
    }
