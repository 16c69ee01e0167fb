"""Typed readers for stack config values, each failing as one :class:`SpecError` line.

A reader takes the full key (``spotproof:gpuPools[1].maxNodes``) and the raw value, as
YAML gives it or as the Pulumi engine passes it (scalars as strings, objects as JSON), and
returns the typed value or raises naming the key, the value and what is allowed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from spotproof.spec.errors import SpecError

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
RESERVED_LABEL_PREFIXES = ("spotproof.dev/", "cloud.google.com/", "kubernetes.io/", "k8s.io/")

T = TypeVar("T")
MISSING: Any = object()


class ConfigObject:
    """One config object being read; remembers which keys were read to reject the rest."""

    def __init__(self, key: str, raw: Any, separator: str = ".") -> None:
        raw = decode(raw)
        if not isinstance(raw, Mapping):
            raise SpecError(key, raw, "expected an object", "a mapping of field names to values")
        self.key, self.raw, self.known = key, raw, set[str]()
        self.separator = separator  # ":" between a config namespace and its keys

    def key_of(self, name: str) -> str:
        return f"{self.key}{self.separator}{name}"

    def field(self, name: str, parse: Callable[[str, Any], T], default: Any = MISSING) -> T:
        self.known.add(name)
        key = self.key_of(name)
        if name not in self.raw or self.raw[name] is None:
            if default is MISSING:
                raise SpecError(key, None, "required", "a value")
            return default
        return parse(key, self.raw[name])

    def section(self, name: str, parse: Callable[[str, Any], T]) -> T:
        """A nested object whose fields all have defaults: absent reads as ``{}``."""
        self.known.add(name)
        return parse(self.key_of(name), self.raw.get(name) or {})

    def finish(self) -> None:
        for name in self.raw:
            if name not in self.known:
                raise SpecError(
                    self.key_of(name),
                    self.raw[name],
                    "unknown field",
                    ", ".join(sorted(self.known)),
                )


def decode(raw: Any) -> Any:
    """Pulumi passes structured config to programs as JSON strings."""
    if isinstance(raw, str) and raw[:1] in ("{", "["):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str, Any], int]:
    def parse(key: str, raw: Any) -> int:
        value = raw
        whole_text = isinstance(raw, str) and re.fullmatch(r"-?[0-9]+", raw.strip())
        if whole_text or (isinstance(raw, float) and raw.is_integer()):
            value = int(raw)
        allowed = "a whole number" + (f" >= {minimum}" if minimum is not None else "")
        allowed += f" and <= {maximum}" if maximum is not None else ""
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(key, raw, "not a whole number", allowed)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise SpecError(key, raw, "out of range", allowed)
        return value

    return parse


def boolean(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise SpecError(key, raw, "not a boolean", "true or false")


def text(
    pattern: re.Pattern[str] | None = None, allowed: str = "a string"
) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        if not isinstance(raw, str) or (pattern is not None and not pattern.fullmatch(raw)):
            raise SpecError(key, raw, "malformed", allowed)
        return raw

    return parse


def choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        if raw not in options:
            raise SpecError(key, raw, "unknown value", ", ".join(options))
        return str(raw)

    return parse


def items(key: str, raw: Any) -> Iterator[tuple[str, Any]]:
    """The elements of a config list, each with its indexed key."""
    raw = decode(raw)
    if not isinstance(raw, list):
        raise SpecError(key, raw, "expected a list", "a YAML list")
    for index, element in enumerate(raw):
        yield f"{key}[{index}]", element


def check_label(key: str, label_key: str, value: str) -> None:
    if not LABEL_KEY.fullmatch(label_key) or label_key.startswith(RESERVED_LABEL_PREFIXES):
        raise SpecError(
            key,
            label_key,
            "not a usable label key",
            "[prefix/]name, not under " + ", ".join(RESERVED_LABEL_PREFIXES),
        )
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        raise SpecError(key, value, "not a label value", "up to 63 of [A-Za-z0-9_.-]")


def labels(key: str, raw: Any) -> dict[str, str]:
    raw = decode(raw)
    if not isinstance(raw, Mapping):
        raise SpecError(key, raw, "expected an object", "a mapping of label keys to values")
    for label_key, value in raw.items():
        check_label(f"{key}.{label_key}", str(label_key), str(value))
    return {str(k): str(v) for k, v in raw.items()}
