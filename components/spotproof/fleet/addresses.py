"""IPv4 ranges in stack config: a network's own (private) ranges, checked to be usable."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from spotproof.fleet.errors import SpecError

PRIVATE_RANGES = tuple(
    ipaddress.IPv4Network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
"""RFC 1918 space. Python's ``is_private`` also admits loopback, link-local, ``0.0.0.0/8``
and the reserved class E range, none of which a VPC can use."""


def private_range(shortest: int, longest: int) -> Callable[[str, Any], str]:
    """A parser of an RFC 1918 range from a /``shortest`` to a /``longest``."""
    allowed = f"a /{shortest} to /{longest} inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"

    def parse(key: str, raw: Any) -> str:
        try:
            network = ipaddress.IPv4Network(str(raw))
        except ValueError:
            raise SpecError(key, raw, "not an IPv4 network", allowed) from None
        if not any(network.subnet_of(block) for block in PRIVATE_RANGES):
            raise SpecError(key, raw, "not in private (RFC 1918) address space", allowed)
        if not shortest <= network.prefixlen <= longest:
            raise SpecError(
                key, raw, f"a /{network.prefixlen} is outside /{shortest} to /{longest}", allowed
            )
        return str(network)

    return parse


def check_disjoint(ranges: Iterable[tuple[str, str]]) -> None:
    """Refuse the second of any two ``(key, cidr)`` ranges that overlap."""
    seen: list[tuple[str, ipaddress.IPv4Network]] = []
    for key, cidr in ranges:
        network = ipaddress.IPv4Network(cidr)
        for other_key, other in seen:
            if network.overlaps(other):
                raise SpecError(
                    key, cidr, f"overlaps {other_key} ({other})", f"a range disjoint from {other}"
                )
        seen.append((key, network))
