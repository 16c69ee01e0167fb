"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1e3``) as numbers.

The grammar is the API's (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):
a signed decimal number, then a binary suffix (Ki, Mi, Gi, Ti, Pi, Ei), a decimal suffix
(n, u, m, k, M, G, T, P, E) or a decimal exponent (``e3``, ``E-2``).
"""

from __future__ import annotations

import re

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


def parse(value: str | int | float) -> float:
    """The amount ``value`` stands for; ``ValueError`` naming it if it is no quantity."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _QUANTITY.fullmatch(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (like 500m, 16Gi, 2)")
    number, suffix = float(match["number"]), match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * 10 ** int(suffix[1:])


def amount_or_zero(value: str | int | float | None) -> float:
    """What a limit or quota holds for the plan's arithmetic: nothing when it is unset or
    no quantity (the schema checks report the latter)."""
    if value is None:
        return 0.0
    try:
        return parse(value)
    except ValueError:
        return 0.0
