"""What every cloud's section of the config uses: how a section is read, and the readers
of names, node ranges and taints."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from spotproof.fleet.drill import NO_DRILL, PrincipalRule
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject
from spotproof.fleet.pools import Capacity, check_node_range, taints
from spotproof.fleet.readers import dns_label
from spotproof.fleet.types import CloudFleet, FleetSpec

__all__ = [
    "DEFAULT_WEIGHT",
    "CloudConfig",
    "check_fallback_weights",
    "check_node_range",
    "check_unique_names",
    "dns_label",
    "required",
    "taints",
]


@dataclass(frozen=True)
class CloudConfig:
    """How one cloud's section of a stack's config is read; the shared reader
    (``fleet.config``) calls these and never branches on the cloud."""

    section: type[CloudFleet]
    """The section's dataclass: its fields name the cloud's keys in the ``spotproof``
    namespace, which any stack's config may hold."""
    read_section: Callable[[ConfigObject, Mapping[str, Any]], tuple[CloudFleet, str]]
    """Reads the cloud's keys from the ``spotproof`` namespace (and its own namespace,
    such as ``gcp:project``) into its section, returning it with the stack's region."""
    default_bucket_name: Callable[[Any, str, str], str]
    """The checkpoint bucket's name when the stack names none: (section, stack, region)."""
    bucket_name_ok: Callable[[str], bool]
    bucket_rule: str
    """The bucket naming rule, for the error when ``bucket_name_ok`` refuses a name."""
    read_bucket_extras: Callable[[ConfigObject, str], dict[str, Any]] = lambda _obj, _r: {}
    """Bucket fields only this cloud has (EKS: ``kmsKeyArn``)."""
    finish: Callable[[FleetSpec], FleetSpec] = lambda spec: spec
    """Checks and derived values that need the whole fleet (GKE's cluster-wide limits)."""
    own_keys: tuple[str, ...] = ()
    """Keys the section reads outside the ``spotproof`` namespace (``gcp:project``)."""
    project_of: Callable[[Any], str | None] = lambda _section: None
    """The project the stack deploys into, where its config names one (GKE's
    ``gcp:project``): ids the cloud computes from it (a service account's email) depend on
    it, so the offline plan fakes them with it."""
    drill_principals: PrincipalRule = NO_DRILL
    """How the cloud names who may run drills (``spotproof:drill.principals``), its
    components granting them what a drill needs (``fleet.drill``)."""


DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
"""An RFC 1123 label starting with a letter; bound its length with :func:`dns_label`."""


def required(key: str, allowed: str) -> Any:
    raise SpecError(key, None, "required", allowed)


def check_unique_names(named: list[tuple[str, str]]) -> None:
    """``named`` is (config key, pool name) per pool; ``system`` is always taken."""
    seen = {"system": "the system pool"}
    for key, name in named:
        if name in seen:
            raise SpecError(
                key, name, f"duplicate pool name (also {seen[name]})", "a name no other pool uses"
            )
        seen[name] = key


DEFAULT_WEIGHT = {Capacity.SPOT: 100, Capacity.ON_DEMAND: 10}
"""Karpenter NodePool weights by capacity: spot first, the on-demand fallback after."""


class WeightedPool(Protocol):
    name: str
    capacity: Capacity
    weight: int


def check_fallback_weights(key: str, pools: Sequence[WeightedPool]) -> None:
    """The highest-weight NodePool that fits wins: a fallback above spot would be used first."""
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
