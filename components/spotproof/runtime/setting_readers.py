"""How an environment variable is read: the types of ``runtime.settings``' variables.

Reading is strict, since a manifest is where a typo is easy and a silent reinterpretation
costly: ``int()`` takes ``"٣"``, ``"1_000"`` and ``" 5 "``, ``float()`` takes ``"nan"``
and ``"1e999"``, and truncating ``0.5`` to a whole number turns a half-second lease into
none at all. So a number here is ASCII digits in the plain notation (an optional sign,
decimals and exponent for reals only), at most :data:`MAX_CHARACTERS` long, finite and
inside the range of its definition; a whole number is refused when it has a fraction
rather than rounded. An empty value counts as unset. Anything else raises
:class:`ConfigError`, one line that names the variable, what it held and what is allowed,
which the process turns into exit 2 (``exit_codes.BAD_CONFIG``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

MAX_CHARACTERS = 32
"""Longer than any number in range; refused before conversion (Python refuses integers
over 4,300 digits with an error of its own)."""
_WHOLE = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class ConfigError(Exception):
    """A configuration the process must not go on with: exit 2 with this one line. Not a
    ``ValueError``, so that no handler meant for bad data (a corrupt checkpoint, a poison
    message) mistakes it for one."""


def _raw(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name)
    return None if raw is None or raw == "" else raw


def _whole(name: str, raw: str, low: int, high: int) -> int:
    if len(raw) > MAX_CHARACTERS or not _WHOLE.fullmatch(raw):
        raise ConfigError(f"{name}={raw!r:.60}: not a whole number; allowed {low} to {high}")
    value = int(raw)
    if not low <= value <= high:
        raise ConfigError(f"{name}={raw!r}: allowed {low} to {high}")
    return value


def _number(name: str, raw: str, low: float, high: float) -> float:
    if len(raw) > MAX_CHARACTERS or not _REAL.fullmatch(raw):
        raise ConfigError(f"{name}={raw!r:.60}: not a number; allowed {low:g} to {high:g}")
    value = float(raw)
    if not math.isfinite(value) or not low <= value <= high:
        raise ConfigError(f"{name}={raw!r}: allowed {low:g} to {high:g}")
    return value


@dataclass(frozen=True)
class Text:
    """A required string."""

    name: str
    what: str
    """What it must be, for the line that says it is missing."""

    def read(self, env: Mapping[str, str]) -> str:
        raw = _raw(env, self.name)
        if raw is None:
            raise ConfigError(f"{self.name} is required ({self.what})")
        return raw


@dataclass(frozen=True)
class OptionalText:
    """A string, or None when unset."""

    name: str

    def read(self, env: Mapping[str, str]) -> str | None:
        return _raw(env, self.name)


@dataclass(frozen=True)
class Whole:
    """A whole number in ``low..high``; ``default`` when unset."""

    name: str
    low: int
    high: int | Callable[[], int]
    """A callable for a bound known only where the process runs."""
    default: int

    def read(self, env: Mapping[str, str]) -> int:
        raw = _raw(env, self.name)
        high = self.high() if callable(self.high) else self.high
        return self.default if raw is None else _whole(self.name, raw, self.low, high)

    def within(self, high: int) -> Whole:
        """The same variable, read by a process that takes at most ``high``."""
        return replace(self, high=high)


@dataclass(frozen=True)
class RequiredWhole:
    """A whole number in ``low..high`` that must be set."""

    name: str
    low: int
    high: int

    def read(self, env: Mapping[str, str]) -> int:
        raw = _raw(env, self.name)
        if raw is None:
            raise ConfigError(
                f"{self.name} is required (a whole number, {self.low} to {self.high})"
            )
        return _whole(self.name, raw, self.low, self.high)


@dataclass(frozen=True)
class OptionalWhole:
    """A whole number in ``low..high``, or None when unset."""

    name: str
    low: int
    high: int

    def read(self, env: Mapping[str, str]) -> int | None:
        raw = _raw(env, self.name)
        return None if raw is None else _whole(self.name, raw, self.low, self.high)


@dataclass(frozen=True)
class Number:
    """A finite number in ``low..high``; ``default`` when unset."""

    name: str
    low: float
    high: float
    default: float

    def read(self, env: Mapping[str, str]) -> float:
        raw = _raw(env, self.name)
        return self.default if raw is None else _number(self.name, raw, self.low, self.high)


@dataclass(frozen=True)
class OptionalNumber:
    """A finite number in ``low..high``, or None when unset."""

    name: str
    low: float
    high: float

    def read(self, env: Mapping[str, str]) -> float | None:
        raw = _raw(env, self.name)
        return None if raw is None else _number(self.name, raw, self.low, self.high)


@dataclass(frozen=True)
class Flag:
    """``0`` or ``1``; ``default`` when unset."""

    name: str
    default: bool = False

    def read(self, env: Mapping[str, str]) -> bool:
        raw = _raw(env, self.name) or ("1" if self.default else "0")
        if raw not in ("0", "1"):
            raise ConfigError(f"{self.name}={raw!r:.60}: allowed 0 or 1")
        return raw == "1"


@dataclass(frozen=True)
class Choice:
    """One of ``choices``; the first when unset."""

    name: str
    choices: tuple[str, ...]

    @property
    def default(self) -> str:
        return self.choices[0]

    def read(self, env: Mapping[str, str]) -> str:
        raw = _raw(env, self.name) or self.default
        if raw not in self.choices:
            raise ConfigError(f"{self.name}={raw!r:.60}: allowed {', '.join(self.choices)}")
        return raw


@dataclass(frozen=True)
class ModuleNames:
    """Python modules by name, separated by commas; none when unset."""

    name: str

    def read(self, env: Mapping[str, str]) -> tuple[str, ...]:
        raw = _raw(env, self.name)
        if raw is None:
            return ()
        names = tuple(part.strip() for part in raw.split(","))
        for module in names:
            if not _MODULE.fullmatch(module):
                raise ConfigError(
                    f"{self.name}={raw!r:.80}: {module!r:.40} is not a module name; allowed: "
                    "dotted Python names separated by commas (torch, transformers.models)"
                )
        return names


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

Setting = (
    Text
    | OptionalText
    | Whole
    | RequiredWhole
    | OptionalWhole
    | Number
    | OptionalNumber
    | Flag
    | Choice
    | ModuleNames
)
"""Any of the variables below."""
