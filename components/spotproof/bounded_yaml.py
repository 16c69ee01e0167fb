"""YAML from files a user or a generator wrote, read within bounds, into node trees.

PyYAML's safe loader builds no objects of arbitrary classes, but it reads anything else
as far as it goes: a file that never ends (``/dev/zero``, a FIFO nobody writes), aliases
that expand a few lines into billions of nodes ("billion laughs"), nesting deep enough to
exhaust the interpreter's stack, integers too long for ``int()`` (CPython refuses to
convert more than 4,300 digits), and a mapping with the same key twice, which it reads as
the last value while Pulumi and Kubernetes refuse it. Every YAML file spotproof reads goes
through :func:`read` and :func:`compose`, which refuse each of those with one line
(:class:`YamlLimitError`) before anything walks the tree:

- the file is opened without blocking and must be a regular file of at most
  :attr:`Limits.bytes`;
- at most :attr:`Limits.documents` documents, :attr:`Limits.depth` levels of nesting,
  :attr:`Limits.nodes` nodes *counting every alias as the whole node it repeats*, and
  :attr:`Limits.aliases` aliases;
- no mapping key twice; no integer of more than :data:`MAX_INTEGER_DIGITS` digits.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import yaml

MAX_INTEGER_DIGITS = 30
"""Far beyond any count, size or port in a stack or a manifest (int64 has 19 digits)."""
_INTEGER_TAG = "tag:yaml.org,2002:int"


class YamlLimitError(ValueError):
    """A file that is not readable as bounded YAML; the message is one line naming it,
    ``line`` the line it is about (1 for the file as a whole)."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Limits:
    bytes: int = 4 * 2**20
    documents: int = 1000
    depth: int = 64
    nodes: int = 200_000
    aliases: int = 100


STACK_FILE = Limits(bytes=1 * 2**20, documents=1)
"""A Pulumi project or stack file: one document, small."""
MANIFESTS = Limits()
"""A file of Kubernetes manifests for ``spotproof check``."""


def read(path: Path, limits: Limits) -> str:
    """The text of ``path``: a regular file, at most ``limits.bytes``, UTF-8."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise YamlLimitError(f"{path}: cannot read: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise YamlLimitError(f"{path}: not a regular file (a FIFO, device or directory)")
        data = file.read(limits.bytes + 1)
    return _text(data, path, limits)


def read_stream(stream: BinaryIO, where: str, limits: Limits) -> str:
    """The text of a stream (standard input), read up to ``limits.bytes`` and no further."""
    data = stream.read(limits.bytes + 1)
    return _text(data, where, limits)


def _text(data: bytes, where: str | Path, limits: Limits) -> str:
    if len(data) > limits.bytes:
        raise YamlLimitError(f"{where}: larger than {limits.bytes} bytes; allowed: at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlLimitError(
            f"{where}: not UTF-8 (byte {data[error.start]:#04x} at offset {error.start})"
        ) from None


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (the wheels are): the same safe types,
read in C, so the bounds are checked at C speed before Python walks anything."""


def compose(text: str, where: str | Path, limits: Limits) -> list[yaml.Node]:
    """The node trees of every document in ``text`` (None for an empty one), within
    ``limits``; :class:`YamlLimitError` names ``where``, the line and the limit."""
    try:
        _scan(text, str(where), limits)
        documents = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise YamlLimitError(f"{where}:{line}: not valid YAML ({problem})", line) from None
    for node in documents:
        if node is not None:
            _check_nodes(node, str(where), limits)
    return documents


def _scan(text: str, where: str, limits: Limits) -> None:
    """Documents, depth, nodes and aliases, counted from the parser's events; stops at
    the first limit passed, long before a huge file is read through."""
    counts = {"documents": 0, "depth": 0, "values": 0, "aliases": 0}
    bounds = {
        "documents": limits.documents,
        "depth": limits.depth,
        "values": limits.nodes,
        "aliases": limits.aliases,
    }
    for event in yaml.parse(text, Loader=_Loader):
        counted = []
        if isinstance(event, yaml.DocumentStartEvent):
            counted.append("documents")
        if isinstance(event, yaml.CollectionStartEvent):
            counted.append("depth")
        if isinstance(event, yaml.CollectionEndEvent):
            counts["depth"] -= 1
        if isinstance(event, yaml.AliasEvent):
            counted.append("aliases")
        if isinstance(event, yaml.NodeEvent):
            counted.append("values")
        for name in counted:
            counts[name] += 1
            if counts[name] > bounds[name]:
                line = event.start_mark.line + 1
                what = "levels of nesting" if name == "depth" else name
                raise YamlLimitError(f"{where}:{line}: more than {bounds[name]} {what}", line)


def _check_nodes(root: yaml.Node, where: str, limits: Limits) -> None:
    """No key twice in a mapping, no over-long integer, and no more nodes than
    ``limits.nodes`` once every alias is expanded (each shared node counted once, so the
    count itself expands nothing)."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = limits.nodes + 1  # a node inside itself (a recursive alias)
        total = 1
        if isinstance(node, yaml.MappingNode):
            _unique_keys(node, where)
            total += sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif node.tag == _INTEGER_TAG:
            digits = sum(c.isalnum() for c in node.value)
            if digits > MAX_INTEGER_DIGITS:
                raise YamlLimitError(
                    f"{where}:{node.start_mark.line + 1}: an integer of {digits} digits; "
                    f"allowed: at most {MAX_INTEGER_DIGITS}",
                    node.start_mark.line + 1,
                )
        sizes[id(node)] = min(total, limits.nodes + 1)
        return sizes[id(node)]

    if size(root) > limits.nodes:
        raise YamlLimitError(
            f"{where}:{root.start_mark.line + 1}: more than {limits.nodes} values once "
            "its aliases are expanded",
            root.start_mark.line + 1,
        )


def _unique_keys(node: yaml.MappingNode, where: str) -> None:
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            raise YamlLimitError(
                f"{where}:{line}: key {key.value!r:.60} twice in one mapping (first at line "
                f"{seen[key.value]})",
                line,
            )
        seen[key.value] = line


def construct(node: yaml.Node, where: str | Path = "") -> Any:
    """The Python value of a node tree from :func:`compose`: safe types only, so a tag
    such as ``!!python/object`` is refused in one line."""
    try:
        return yaml.SafeLoader("").construct_document(node)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or node.start_mark
        problem = getattr(error, "problem", None) or "cannot be read"
        raise YamlLimitError(f"{where}:{mark.line + 1}: {problem}", mark.line + 1) from None


def load(path: Path, limits: Limits) -> tuple[list[Any], list[yaml.Node]]:
    """Every document of the file at ``path``, as values and as node trees (for lines)."""
    nodes = compose(read(path, limits), path, limits)
    return [None if node is None else construct(node, path) for node in nodes], nodes
