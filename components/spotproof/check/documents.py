"""Kubernetes manifests read from files, each object with the line of every key in it.

A file may hold many YAML documents (``---``); empty documents are skipped, and a
``kind: List`` is not unpacked (kubectl's own lists come from ``kubectl get``, not from
files people write). Lines are 1-based, for ``file:line`` findings.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spotproof import bounded_yaml

_STEP = re.compile(r'\.?([^.\[\]]+)|\[(\d+)\]|\["([^"]+)"\]')


class CheckInputError(Exception):
    """A file that cannot be read as manifests; the message is one line naming it."""


@dataclass(frozen=True)
class Document:
    path: Path
    index: int
    """Position among the file's non-empty documents, from 0."""
    line: int
    """Where the document starts."""
    obj: dict[str, Any]
    lines: dict[tuple[str | int, ...], int] = field(default_factory=dict)
    """Key path -> line of that key (of the item, in a list)."""

    @property
    def name(self) -> str:
        """``file#N``: unique among the documents of one run."""
        return f"{self.path}#{self.index}"

    @property
    def label(self) -> str:
        metadata = self.obj.get("metadata") or {}
        return f"{self.obj.get('kind')} {metadata.get('name', '?')}"

    def line_of(self, key_path: str) -> int:
        """The line of ``key_path`` (``spec.template.spec.containers[0].env``), or of its
        nearest ancestor written in the file."""
        steps = list(steps_of(key_path))
        while steps:
            line = self.lines.get(tuple(steps))
            if line is not None:
                return line
            steps.pop()
        return self.line

    def written(self, key_path: str) -> bool:
        """Whether ``key_path`` itself is written in the file."""
        return steps_of(key_path) in self.lines

    def value(self, key_path: str) -> Any:
        """What the object holds at ``key_path``; None where it holds nothing."""
        node: Any = self.obj
        for step in steps_of(key_path):
            if isinstance(step, int):
                node = node[step] if isinstance(node, list) and step < len(node) else None
            else:
                node = node.get(step) if isinstance(node, dict) else None
            if node is None:
                return None
        return node


def steps_of(key_path: str) -> tuple[str | int, ...]:
    """``a.b[0].c`` (or ``a.b.0.c``, as schema errors write it) as ``("a", "b", 0, "c")``;
    a key holding dots quoted: ``metadata.labels["app.kubernetes.io/name"]``."""
    return tuple(
        quoted or (int(index) if index else int(name) if name.isdigit() else name)
        for name, index, quoted in _STEP.findall(key_path)
    )


def _index(node: yaml.Node, path: tuple[str | int, ...], lines: dict) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            lines[child] = key.start_mark.line + 1
            _index(value, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for position, value in enumerate(node.value):
            child = (*path, position)
            lines[child] = value.start_mark.line + 1
            _index(value, child, lines)


def without_nulls(value: Any) -> Any:
    """``value`` with every null field left out, as the API server reads one: unset."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def null_item(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """Where ``value`` holds a list with a null item, if anywhere: the API server would
    decode it as an empty object (a toleration that tolerates everything, say)."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
        if any(item is None for item in value):
            return (*path, value.index(None))
    else:
        return None
    for key, item in items:
        found = null_item(item, (*path, key))
        if found is not None:
            return found
    return None


STDIN = Path("<stdin>")
"""Where documents read from standard input (``-``) say they come from."""


def load(path: Path) -> list[Document]:
    """The objects of one manifest file; :class:`CheckInputError` if it is unreadable, not
    YAML, or holds something that is not a Kubernetes object."""
    try:
        text = bounded_yaml.read(path, bounded_yaml.MANIFESTS)
    except bounded_yaml.YamlLimitError as error:
        raise CheckInputError(str(error)) from None
    return parse(text, path)


def load_stdin() -> list[Document]:
    """The objects piped to ``spotproof check -``, bounded as a file is."""
    try:
        text = bounded_yaml.read_stream(sys.stdin.buffer, str(STDIN), bounded_yaml.MANIFESTS)
    except bounded_yaml.YamlLimitError as error:
        raise CheckInputError(str(error)) from None
    return parse(text, STDIN)


def parse(text: str, path: Path) -> list[Document]:
    """The objects of manifest ``text`` read from ``path``."""
    try:
        nodes = bounded_yaml.compose(text, path, bounded_yaml.MANIFESTS)
    except bounded_yaml.YamlLimitError as error:
        raise CheckInputError(str(error)) from None
    documents = []
    for node in nodes:
        if node is None:
            continue
        line = node.start_mark.line + 1
        try:
            obj = bounded_yaml.construct(node, path)
        except bounded_yaml.YamlLimitError as error:
            raise CheckInputError(str(error)) from None
        if obj is None:
            continue
        if not isinstance(obj, dict) or not all(
            isinstance(obj.get(field), str) and obj[field] for field in ("apiVersion", "kind")
        ):
            raise CheckInputError(
                f"{path}:{line}: not a Kubernetes object (allowed: a mapping with apiVersion "
                "and kind, both strings)"
            )
        lines: dict[tuple[str | int, ...], int] = {}
        _index(node, (), lines)
        null = null_item(obj)
        if null is not None:
            where = ".".join(map(str, null))
            raise CheckInputError(
                f"{path}:{lines.get(null, line)}: {where} is null; allowed: an item, or "
                "leave it out"
            )
        documents.append(Document(path, len(documents), line, without_nulls(obj), lines))
    return documents
