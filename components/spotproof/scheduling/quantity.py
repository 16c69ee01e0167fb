"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1e3``) as numbers, read as the API
server reads them.

The grammar and its limits are k8s.io/apimachinery's ``pkg/api/resource`` (read at
kubernetes/apimachinery eed236ce, 2026-07, the tree of kubernetes 1.36; unchanged in what
follows since 1.2x): ``quantity.go`` ``parseQuantityString`` and ``ParseQuantity``,
``suffix.go`` ``interpret``:

- ``[+-]`` then digits, an optional ``.`` and more digits, each part optional: ``.``, ``+``
  and ``5.`` read as numbers (an empty numerator is 0), and a suffix alone (``Gi``) is 0 Gi;
- then a suffix from the characters ``eEinumkKMGTP``, an optional sign and digits, which
  must be a binary suffix (``Ki`` .. ``Ei``), a decimal one (``n u m "" k M G T P E``), or
  ``e``/``E`` and an exponent ``strconv.ParseInt`` reads as a 64-bit integer; anything else
  is refused, and so is the empty string. The exponent is then cut to 32 bits
  (``int32(parsed)``), and we cut it the same way;
- a non-zero amount is rounded up (away from zero) to a whole nano (``inf.RoundUp`` at
  ``Nano``); an amount with a binary suffix is capped at 2^63-1. The type's documentation
  says that no quantity is greater than 2^63-1 in magnitude, which the scheduler's int64
  ``Value``/``MilliValue`` assume; a decimal amount beyond it is capped here too, where
  the API would hold a number its consumers overflow on.

JSON decoding (``UnmarshalJSON``) trims surrounding white space first, so we do.

What is returned is a float, as ``Quantity.AsApproximateFloat64`` gives one. No big
arithmetic is done on what a file says: the exponent is bounded (at most 19 digits, as
``ParseInt`` takes) before it is read, the amount compared against the cap before it is
scaled, and the digits read by ``decimal`` at a bounded precision.
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Decimal, localcontext

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
"""Each binary suffix's power of two."""
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
"""Each decimal suffix's power of ten."""
_SHAPE = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)"
)
"""``parseQuantityString``'s scan: number, then the suffix's letters, a sign and digits."""
_EXPONENT = re.compile(r"[eE](?P<sign>[+-]?)0*(?P<digits>[0-9]+)")
MAX_AMOUNT = 2**63 - 1
"""The largest quantity in magnitude (``maxAllowed`` in ``math.go``)."""
_NANO = Decimal("1e-9")
_INT64_DIGITS = 19
_SHOWN = 40
"""Characters of a refused value a message repeats: a file may hold megabytes of one."""


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else f"{text[:_SHOWN]}...")


def _refused(text: str) -> ValueError:
    return ValueError(f"{_shown(text)} is not a Kubernetes quantity (like 500m, 16Gi, 2)")


def _exponent(text: str, suffix: str) -> int:
    """The power of ten of an ``e``/``E`` suffix as the API reads it: a 64-bit integer
    (``strconv.ParseInt``), then cut to its low 32 bits (``int32(parsed)``)."""
    found = _EXPONENT.fullmatch(suffix)
    if found is None:
        raise _refused(text)
    digits = found["digits"].lstrip("0") or "0"
    value = int(digits) if len(digits) <= _INT64_DIGITS else None  # bounded before int()
    if value is None or value > MAX_AMOUNT + (found["sign"] == "-"):
        raise ValueError(
            f"{_shown(text)}: its exponent does not fit a 64-bit integer, so the API server "
            "refuses it; allowed: a quantity like 500m, 16Gi, 2 or 1e3"
        )
    value = -value if found["sign"] == "-" else value
    return (value + 2**31) % 2**32 - 2**31


def parse(value: str | int | float) -> float:
    """The amount ``value`` stands for; ``ValueError`` naming it if the API server would
    refuse it."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _refused(str(value))
    if isinstance(value, int):  # a whole number is exact: only the cap applies
        return float(max(-MAX_AMOUNT, min(MAX_AMOUNT, value)))
    if isinstance(value, float) and not math.isfinite(value):
        raise _refused(str(value))
    text = (repr(value) if isinstance(value, float) else value).strip()
    found = _SHAPE.fullmatch(text)
    if not text or found is None:
        raise _refused(text)
    suffix, binary = found["suffix"], 0
    if suffix in _DECIMAL:
        power = _DECIMAL[suffix]
    elif suffix in _BINARY:
        power, binary = 0, _BINARY[suffix]
    else:
        power = _exponent(text, suffix)
    # Read exactly, whatever its length or exponent: a constructor rounds nothing.
    magnitude = Decimal(f"{found['whole'] or '0'}.{found['fraction'] or '0'}e{power}")
    negative = found["sign"] == "-"
    with localcontext(prec=60, rounding=ROUND_UP, Emin=MIN_EMIN, Emax=MAX_EMAX):
        if magnitude > Decimal(MAX_AMOUNT) / 2**binary:  # a comparison: no scaling
            return float(-MAX_AMOUNT if negative else MAX_AMOUNT)
        # Below the cap: 60 digits hold it to far below a nano, rounded up as the API does.
        amount = (magnitude * 2**binary).quantize(_NANO) if magnitude else magnitude
    return -float(amount) if negative else float(amount)


def amount_or_zero(value: str | int | float | None) -> float:
    """What a limit or quota holds for the plan's arithmetic: nothing when it is unset or
    no quantity (the schema checks report the latter)."""
    if value is None:
        return 0.0
    try:
        return parse(value)
    except ValueError:
        return 0.0
