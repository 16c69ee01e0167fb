"""The environment a runtime process is configured by, read strictly, in one place.

The trainer and the batch worker are configured by variables a manifest sets, where a
typo is easy and a silent reinterpretation is costly: ``int()`` takes ``"٣"``, ``"1_000"``
and ``" 5 "``, ``float()`` takes ``"nan"`` and ``"1e999"``, and truncating ``0.5`` to a
whole number turns a half-second lease into none at all. So a number here is ASCII
digits in the plain notation (an optional sign, decimals and exponent for reals only), at
most :data:`MAX_CHARACTERS` long, finite and inside a range stated with the variable; a
whole number is refused when it has a fraction rather than rounded. Anything else raises
:class:`ConfigError`, one line that names the variable, what it held and what is allowed,
which the process turns into exit 2 (``exit_codes.BAD_CONFIG``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

MAX_CHARACTERS = 32
"""Longer than any number in range; refused before conversion (Python refuses integers
over 4,300 digits with an error of its own)."""
_WHOLE = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class ConfigError(Exception):
    """A configuration the process must not go on with: exit 2 with this one line. Not a
    ``ValueError``, so that no handler meant for bad data (a corrupt checkpoint, a poison
    message) mistakes it for one."""


class Variables:
    """Typed, range-checked reads of ``env``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def _raw(self, name: str) -> str | None:
        raw = self.env.get(name)
        return None if raw is None or raw == "" else raw

    def required(self, name: str, what: str) -> str:
        raw = self._raw(name)
        if raw is None:
            raise ConfigError(f"{name} is required ({what})")
        return raw

    def text(self, name: str, default: str | None = None) -> str | None:
        return self._raw(name) or default

    def whole(self, name: str, default: int | None, low: int, high: int) -> int:
        """A whole number in ``low..high``; ``default`` when unset (None: required, unless
        the default is passed explicitly as None through :meth:`optional_whole`)."""
        raw = self._raw(name)
        if raw is None:
            if default is None:
                raise ConfigError(f"{name} is required (a whole number, {low} to {high})")
            return default
        if len(raw) > MAX_CHARACTERS or not _WHOLE.fullmatch(raw):
            raise ConfigError(f"{name}={raw!r:.60}: not a whole number; allowed {low} to {high}")
        value = int(raw)
        if not low <= value <= high:
            raise ConfigError(f"{name}={raw!r}: allowed {low} to {high}")
        return value

    def optional_whole(self, name: str, low: int, high: int) -> int | None:
        """A whole number in ``low..high``, or None when unset."""
        return None if self._raw(name) is None else self.whole(name, low, low, high)

    def number(self, name: str, default: float | None, low: float, high: float) -> float:
        """A finite number in ``low..high``; ``default`` when unset (None: required)."""
        raw = self._raw(name)
        if raw is None:
            if default is None:
                raise ConfigError(f"{name} is required (a number, {low:g} to {high:g})")
            return default
        if len(raw) > MAX_CHARACTERS or not _REAL.fullmatch(raw):
            raise ConfigError(f"{name}={raw!r:.60}: not a number; allowed {low:g} to {high:g}")
        value = float(raw)
        if not math.isfinite(value) or not low <= value <= high:
            raise ConfigError(f"{name}={raw!r}: allowed {low:g} to {high:g}")
        return value

    def optional_number(self, name: str, low: float, high: float) -> float | None:
        """A finite number in ``low..high``, or None when unset."""
        return None if self._raw(name) is None else self.number(name, low, low, high)

    def choice(self, name: str, default: str, allowed: Iterable[str]) -> str:
        options = tuple(allowed)
        raw = self._raw(name) or default
        if raw not in options:
            raise ConfigError(f"{name}={raw!r:.60}: allowed {' or '.join(options)}")
        return raw
