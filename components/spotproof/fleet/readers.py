"""Typed readers for stack config values, each failing as one :class:`SpecError` line.

A reader takes the full key (``spotproof:gpuPools[1].maxNodes``) and the raw value, as
YAML gives it or as the Pulumi engine passes it (scalars as strings, objects as JSON), and
returns the typed value or raises naming the key, the value and what is allowed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from spotproof.fleet.errors import SpecError

E = TypeVar("E", bound=StrEnum)

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
RESERVED_LABEL_PREFIXES = ("spotproof.dev/", "cloud.google.com/", "kubernetes.io/", "k8s.io/")


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
        # Digits bounded: int() refuses over 4,300 of them, and no setting needs 30.
        whole_text = isinstance(raw, str) and re.fullmatch(r"-?[0-9]{1,30}", raw.strip())
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


def number(minimum: float, maximum: float) -> Callable[[str, Any], float]:
    """A real number in [``minimum``, ``maximum``]; whole numbers and numeric text too."""

    def parse(key: str, raw: Any) -> float:
        value: Any = raw
        if isinstance(raw, str) and re.fullmatch(r"-?[0-9]{1,30}(\.[0-9]{1,30})?", raw.strip()):
            value = float(raw)
        allowed = f"a number >= {minimum:g} and <= {maximum:g}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(key, raw, "not a number", allowed)
        if not minimum <= value <= maximum:
            raise SpecError(key, raw, "out of range", allowed)
        return float(value)

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

    parse.allowed = ", ".join(options)  # type: ignore[attr-defined]  # named when missing
    return parse


def published(
    versions: tuple[str, ...], what: str, refused: Mapping[str, str] | None = None
) -> Callable[[str, Any], str]:
    """One of a chart's published ``versions`` (oldest first): an unpublished one fails
    ``pulumi up`` at the chart pull. ``refused`` maps published versions that cannot carry
    what spotproof renders to why."""

    def parse(key: str, raw: Any) -> str:
        if refused and isinstance(raw, str) and raw in refused:
            raise SpecError(
                key, raw, refused[raw], f"{versions[0]} to {versions[-1]}, e.g. {versions[-1]}"
            )
        if raw not in versions:
            raise SpecError(
                key,
                raw,
                f"not a published {what} chart version (quote it in YAML)",
                f"{versions[0]} to {versions[-1]}, e.g. {versions[-1]}",
            )
        return str(raw)

    return parse


def dns_label(max_length: int) -> Callable[[str, Any], str]:
    """Reader of a lowercase DNS label starting with a letter, of at most ``max_length``
    characters (Kubernetes namespaces and label values: 63; GKE node pools: 40)."""
    pattern = re.compile(rf"[a-z]([-a-z0-9]{{0,{max_length - 2}}}[a-z0-9])?")
    return text(pattern, f"a lowercase DNS label of at most {max_length} characters")


def enumeration(cls: type[E]) -> Callable[[str, Any], E]:
    """Reader of one member of a string enum, by value."""

    def parse(key: str, raw: Any) -> E:
        return cls(choice(tuple(member.value for member in cls))(key, raw))  # type: ignore[attr-defined]

    return parse


def items(key: str, raw: Any) -> Iterator[tuple[str, Any]]:
    """The elements of a config list, each with its indexed key."""
    raw = decode(raw)
    if not isinstance(raw, list):
        raise SpecError(key, raw, "expected a list", "a YAML list")
    for index, element in enumerate(raw):
        yield f"{key}[{index}]", element


def check_label(key: str, label_key: str, value: str, *, reserved_ok: bool = False) -> None:
    """A label spotproof may set; ``reserved_ok`` for labels a platform sets itself."""
    reserved = label_key.startswith(RESERVED_LABEL_PREFIXES) and not reserved_ok
    if not LABEL_KEY.fullmatch(label_key) or reserved:
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


KEY_PREFIX = re.compile(r"^(?=.{2,256}$)(?!.*//)[a-z0-9][a-z0-9/_-]*[a-z0-9]$")
"""A key prefix: lower-case segments joined by single slashes, at most 256 characters.
Object keys end at 1,024 bytes (S3 and GCS object names, Azure blob names), and the
runtime's keys below a prefix take some 200 of them; an empty segment is a key the
runtime refuses."""


def key_prefix(example: str) -> Any:
    return text(KEY_PREFIX, f"a key prefix like {example} (2-256 of a-z 0-9 / _ -)")
