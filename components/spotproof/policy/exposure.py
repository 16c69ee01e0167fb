"""What of a stack the internet can reach: the Kubernetes API and the nodes' addresses.

Each cloud opens both unless told otherwise. A stack restricts the API to named networks
or makes it private (``spotproof:apiAccess``) and keeps nodes on private addresses; each
cloud's policy module (``policy.gke``, ``policy.eks``, ``policy.aks``) flags a stack, or a
change to one, that re-opens either, reading address ranges as this module does.
"""

from __future__ import annotations

import ipaddress
from typing import Any

EVERYWHERE = "0.0.0.0/0"
FIX = "allowed: spotproof:apiAccess.authorizedNetworks (named CIDRs) or privateEndpoint: true"


def open_ranges(cidrs: list[Any]) -> list[str]:
    """The ranges of ``cidrs`` that span the whole IPv4 internet (a /0, however written)."""
    found = []
    for cidr in cidrs:
        try:
            if ipaddress.ip_network(str(cidr), strict=False).prefixlen == 0:
                found.append(str(cidr))
        except ValueError:
            continue
    return found
