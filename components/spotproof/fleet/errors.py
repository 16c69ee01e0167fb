"""The one error a bad stack config raises."""

from __future__ import annotations

import math
from typing import Any


class SpecError(ValueError):
    """A stack config value spotproof cannot build.

    Renders as one line naming the config key, the value and what is allowed, e.g.
    ``spotproof:gpuPools[1].gpusPerNode = 3: n1-standard-8 cannot carry 3 x nvidia-tesla-t4;
    allowed: 1, 2, 4``.
    """

    def __init__(self, key: str, value: Any, problem: str, allowed: str) -> None:
        self.key = key
        self.value = value
        self.problem = problem
        self.allowed = allowed
        super().__init__(f"{key} = {_shown(value)}: {problem}; allowed: {allowed}")


def _shown(value: Any, limit: int = 80) -> str:
    """The value as written in the message: its repr (one line), cut short if long. An
    integer too long to print (CPython refuses over 4,300 digits) is described instead."""
    if isinstance(value, int) and value.bit_length() > 4 * limit:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
