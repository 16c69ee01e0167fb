"""Where each config value was written, so a finding can point at its line.

A plan's findings name config keys (``spotproof:gpuPools[1].gpusPerNode``, from a
:class:`~spotproof.fleet.SpecError`) or resources (``gke-dev-l4-spot``, from a rule). CI
annotates the file and line the value came from: the stack file, or the project's
``Pulumi.yaml`` when the value is a project-level default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class Location:
    path: Path
    line: int
    """1-based."""


@dataclass
class ConfigSources:
    """The YAML nodes each full config key's value was read from."""

    stack_file: Path
    values: dict[str, tuple[Path, yaml.Node, yaml.Node]] = field(default_factory=dict)
    """Full key -> (file, key node, value node)."""

    def add(self, path: Path, full_key: str, key: yaml.Node, value: yaml.Node) -> None:
        self.values.setdefault(full_key, (path, key, value))

    def locate(self, key_path: str) -> Location:
        """The line of ``key_path`` (a full key, then ``.field`` and ``[index]`` steps), or
        of its nearest written ancestor; the stack file's first line if none was written."""
        full_key, rest = _split(key_path, self.values)
        if full_key is None:
            return Location(self.stack_file, 1)
        path, key_node, node = self.values[full_key]
        line = key_node.start_mark.line
        for name, index in _STEP.findall(rest):
            child = _child(node, name, int(index) if index else None)
            if child is None:
                break
            line, node = child
        return Location(path, line + 1)

    def locate_resource(self, resource: str) -> Location:
        """The line of the longest config string a resource's name contains: a pool's
        ``name`` for its node pool, a bucket's name for its bucket; else the first line."""
        best: tuple[int, Location] | None = None
        for path, _, node in self.values.values():
            for scalar in _scalars(node):
                text = str(scalar.value)
                if len(text) >= 3 and text in resource and (best is None or len(text) > best[0]):
                    best = (len(text), Location(path, scalar.start_mark.line + 1))
        return best[1] if best else Location(self.stack_file, 1)


def _split(key_path: str, known: dict[str, object]) -> tuple[str | None, str]:
    """The longest known full key that ``key_path`` starts with, and the steps after it."""
    for end in sorted({m.start() for m in re.finditer(r"[.\[]", key_path)} | {len(key_path)})[::-1]:
        if key_path[:end] in known:
            return key_path[:end], key_path[end:]
    return None, ""


def _child(node: yaml.Node, name: str, index: int | None) -> tuple[int, yaml.Node] | None:
    if index is not None and isinstance(node, yaml.SequenceNode) and index < len(node.value):
        item = node.value[index]
        return item.start_mark.line, item
    if name and isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == name:
                return key.start_mark.line, value
    return None


def _scalars(node: yaml.Node) -> list[yaml.ScalarNode]:
    if isinstance(node, yaml.ScalarNode):
        return [node]
    if isinstance(node, yaml.SequenceNode):
        return [s for item in node.value for s in _scalars(item)]
    if isinstance(node, yaml.MappingNode):
        if [key.value for key, _ in node.value] == ["secure"]:
            return []  # ciphertext names nothing
        return [s for _, value in node.value for s in _scalars(value)]
    return []
