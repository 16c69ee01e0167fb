"""The JSON types of an object's fields, checked before any rule reads them.

kubernetes-validate checks core kinds against their OpenAPI schemas; for kinds it has no
schema for (JobSet here) the checks of ``plan.schemas.jobset`` read fields directly, and a list
where an object belongs would crash them instead of being reported. A *shape* says what
type each field the checks read must have:

- ``str``, ``int``, ``bool``: that JSON scalar (``bool`` is not an ``int`` here);
- a ``dict``: an object whose listed fields have those shapes (others are left to the
  field checks, which report them unknown);
- a one-item ``list``: a list whose every item has that shape;
- :data:`OBJECT`, :data:`STRING_MAP`: any object, an object of strings.

A field that is absent or null passes: the API server reads null as unset.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class _AnyObject:
    """Any JSON object."""


class _StringMap:
    """A JSON object whose values are strings (labels, annotations, node selectors)."""


OBJECT = _AnyObject()
STRING_MAP = _StringMap()
Shape = Any

METADATA: dict[str, Shape] = {
    "name": str,
    "generateName": str,
    "namespace": str,
    "labels": STRING_MAP,
    "annotations": STRING_MAP,
}
_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


def errors(value: Any, shape: Shape, path: str = "") -> Iterator[str]:
    """``path: expected ...`` for every field of ``value`` whose type ``shape`` refuses;
    nothing below a field that is already of the wrong type."""
    if value is None:
        return
    where = path or "(root)"
    if isinstance(shape, type):
        if not _is(value, shape):
            yield f"{where}: expected {_NAMES[shape]}, found {_kind(value)}"
    elif isinstance(shape, list):
        if not isinstance(value, list):
            yield f"{where}: expected a list, found {_kind(value)}"
            return
        for index, item in enumerate(value):
            if item is None:
                yield f"{path}[{index}]: expected an item, found null"
            else:
                yield from errors(item, shape[0], f"{path}[{index}]")
    elif not isinstance(value, Mapping):
        yield f"{where}: expected an object, found {_kind(value)}"
    elif shape is STRING_MAP:
        for key, item in value.items():
            if not isinstance(item, str):
                yield f"{path}.{key}: expected a string, found {_kind(item)}"
    elif isinstance(shape, dict):
        for key, inner in shape.items():
            yield from errors(value.get(key), inner, f"{path}.{key}" if path else key)


def _is(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "an integer"}.get(
        type(value), f"a {type(value).__name__}"
    )
