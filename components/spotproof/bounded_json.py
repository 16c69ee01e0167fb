"""JSON from files and answers someone else wrote, read within bounds, as ``bounded_yaml``
reads YAML.

Python's ``json`` reads whatever it is given as far as it goes: a file that never ends
(``/dev/zero``, a FIFO nobody writes) is read forever, nesting deep enough to exhaust the
interpreter's stack is a ``RecursionError``, an integer of more than 4,300 digits a
``ValueError`` about CPython's own limit, ``NaN`` and ``Infinity`` (no JSON) are taken as
numbers, and an object with one key twice keeps the last value, where another reader may
keep the first. :func:`read` and :func:`loads` refuse each of those with one line
(:class:`JsonLimitError`, naming where and what) before anything is built:

- a file is read as ``bounded_yaml.read`` reads one: opened without blocking, a regular
  file of at most :attr:`Limits.bytes`, UTF-8;
- at most :attr:`Limits.depth` levels of nesting, counted on the text (strings left out)
  before it is parsed;
- no key twice in an object, no integer of more than ``bounded_yaml.MAX_INTEGER_DIGITS``
  digits, no ``NaN``, ``Infinity`` or number beyond a float (``1e400``).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotproof import bounded_yaml
from spotproof.bounded_yaml import MAX_INTEGER_DIGITS, YamlLimitError


class JsonLimitError(ValueError):
    """Text that is not readable as bounded JSON; the message is one line naming where."""


@dataclass(frozen=True)
class Limits:
    bytes: int = 4 * 2**20
    depth: int = 64


FILE = Limits()
"""A file a person gives a command (``--outputs``): a stack's outputs, a few KiB."""
API_ANSWER = Limits(bytes=256 * 2**20, depth=100)
"""One answer of the Kubernetes API server: a list of every node or pod of a large
cluster is tens of MiB; its objects nest a few dozen levels (``managedFields``)."""

_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
"""A JSON string, matched without backtracking (possessive), so a long one costs one pass."""
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def read(path: Path, limits: Limits = FILE) -> Any:
    """The value of the JSON file at ``path``, within ``limits``."""
    try:
        text = bounded_yaml.read(path, bounded_yaml.Limits(bytes=limits.bytes))
    except YamlLimitError as error:  # the file's own bounds: the same words for JSON
        raise JsonLimitError(str(error)) from None
    return loads(text, str(path), limits)


def loads(text: str | bytes, where: str, limits: Limits = FILE) -> Any:
    """The value of ``text``, within ``limits``; ``where`` names it in a refusal."""
    if len(text) > limits.bytes:
        raise JsonLimitError(f"{where}: larger than {limits.bytes} bytes; allowed: at most that")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise JsonLimitError(
                f"{where}: not UTF-8 (byte {text[error.start]:#04x} at offset {error.start})"
            ) from None
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = max(itertools.accumulate(_STEP[c] for c in brackets), default=0)
    if depth > limits.depth:
        raise JsonLimitError(f"{where}: more than {limits.depth} levels of nesting")
    try:
        return json.loads(
            text,
            object_pairs_hook=lambda pairs: _unique(pairs, where),
            parse_int=lambda digits: _integer(digits, where),
            parse_float=lambda digits: _finite(digits, where),
            parse_constant=lambda name: _refuse_constant(name, where),
        )
    except JsonLimitError:
        raise
    except json.JSONDecodeError as error:
        raise JsonLimitError(f"{where}: not JSON ({error.msg} at line {error.lineno})") from None
    except (ValueError, RecursionError) as error:
        raise JsonLimitError(f"{where}: not JSON ({error})"[:300]) from None


def _unique(pairs: list[tuple[str, Any]], where: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise JsonLimitError(f"{where}: key {key!r:.60} twice in one object")
        found[key] = value
    return found


def _integer(digits: str, where: str) -> int:
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise JsonLimitError(
            f"{where}: an integer of {len(digits.lstrip('-'))} digits; allowed: at most "
            f"{MAX_INTEGER_DIGITS}"
        )
    return int(digits)


def _finite(digits: str, where: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise JsonLimitError(f"{where}: {digits[:40]} is beyond a float; allowed: a finite number")
    return value


def _refuse_constant(name: str, where: str) -> Any:
    raise JsonLimitError(f"{where}: {name} is no JSON value; allowed: a finite number")
