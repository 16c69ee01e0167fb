"""Readers every cloud's part of the config uses: names, node ranges, taints."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from spotproof.spec.errors import SpecError
from spotproof.spec.fields import MISSING, ConfigObject, check_label, integer, items, text
from spotproof.spec.types import Taint, TaintEffect

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
"""An RFC 1123 label starting with a letter; bound its length with :func:`dns_label`."""


def dns_label(max_length: int) -> Callable[[str, Any], str]:
    """Reader of a lowercase DNS label of at most ``max_length`` characters (Kubernetes
    namespaces and label values: 63; GKE node pools: 40)."""
    pattern = re.compile(rf"[a-z]([-a-z0-9]{{0,{max_length - 2}}}[a-z0-9])?")
    return text(pattern, f"a lowercase DNS label of at most {max_length} characters")


def required(key: str, allowed: str) -> Any:
    raise SpecError(key, None, "required", allowed)


def taint(key: str, raw: Any) -> Taint:
    match = re.fullmatch(r"([^=:]+)=([^=:]*):([A-Za-z_]+)", raw) if isinstance(raw, str) else None
    if not match:
        raise SpecError(key, raw, "not a taint", "key=value:Effect, e.g. team=research:NoSchedule")
    taint_key, value, effect = match.groups()
    if effect not in TaintEffect._value2member_map_:
        raise SpecError(key, raw, f"unknown taint effect {effect}", ", ".join(TaintEffect))
    check_label(key, taint_key, value)
    return Taint(taint_key, value, TaintEffect(effect))


def taints(key: str, raw: Any) -> tuple[Taint, ...]:
    return tuple(taint(item_key, item) for item_key, item in items(key, raw))


def node_range(obj: ConfigObject, min_default: int, min_floor: int) -> tuple[int, int]:
    """``minNodes``/``maxNodes`` of a pool; ``maxNodes`` is required when ``minNodes`` may be 0."""
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
