"""A stack's config as the Pulumi engine hands it to the program, read offline.

The merge follows pulumi/pulumi ``pkg/workspace/config.go`` (``mergeConfig``,
``validateStackConfigValue``, ``createConfigValue``):

1. the stack file's ``config:`` values, keys without a namespace belonging to the project;
2. for every key the project file declares and the stack leaves unset, its ``default`` or
   ``value``; a project key with neither is required ("Stack 'dev' is missing
   configuration value 'x'");
3. every explicitly typed project key is checked against its type, and one declared
   ``secret: true`` must be ``secure:`` in the stack.

Values reach the program as strings, objects and lists as JSON. ``secure:`` values are
never decrypted here: the program sees a stand-in of the declared type (``[secret]`` for
strings) and the key is marked secret, so ``Config.get_secret`` wraps it and the plan's
output never shows a value. The one check that needs a decrypted value, the type of a
secret, is left to ``pulumi preview``.

ESC environments a stack imports (``environment:``) are not read offline; the plan says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spotproof.plan.config.project import (
    NOT_SET,
    ConfigDeclaration,
    PlanInputError,
    Project,
    conforms,
    read_yaml,
)
from spotproof.plan.config.sources import ConfigSources, Location

SECRET_TEXT = "[secret]"
_STAND_INS = {"integer": "0", "boolean": "false", "array": "[]", "object": "{}"}


@dataclass
class StackConfig:
    stack: str
    values: dict[str, str]
    """Full key -> the string the program reads."""
    secret_keys: frozenset[str]
    sources: ConfigSources
    notes: list[str] = field(default_factory=list)
    """What the offline read could not do as the engine would."""


class _Secure:
    """A ``secure:`` value, kept encrypted."""

    def __repr__(self) -> str:
        return SECRET_TEXT


def stack_config(project: Project, stack: str) -> StackConfig:
    path = project.stack_file(stack)
    if not path.is_file():
        available = ", ".join(project.stacks()) or "none"
        raise PlanInputError(f"unknown stack {stack!r}: no {path}; available: {available}")
    document, root = read_yaml(path)
    document = document or {}
    if not isinstance(document, dict) or not isinstance(document.get("config") or {}, dict):
        raise PlanInputError(f"{path}: 'config' must be a mapping of keys to values")
    sources = ConfigSources(path)
    raw = _stack_values(project, path, document.get("config") or {}, root, sources)
    notes = []
    if document.get("environment"):
        notes.append(
            f"{path.name} imports ESC environments (environment:); their values are not "
            "read offline, so keys only they set are missing from this plan"
        )
    _apply_project(project, stack, path, raw, sources)
    secret_keys = frozenset(key for key, value in raw.items() if _has_secure(value))
    values = {
        key: _engine_value(value, project.config.get(key)) for key, value in sorted(raw.items())
    }
    return StackConfig(stack, values, secret_keys, sources, notes)


def _stack_values(
    project: Project,
    path: Path,
    config: dict[Any, Any],
    root: yaml.Node | None,
    sources: ConfigSources,
) -> dict[str, Any]:
    nodes = _config_nodes(root)
    raw: dict[str, Any] = {}
    for key, value in config.items():
        full_key = project.full_key(str(key))
        key_node, value_node = nodes[str(key)]
        if full_key in raw:
            raise PlanInputError(
                f"{path}:{key_node.start_mark.line + 1}: config key {full_key} is set twice "
                f"(also as {key!r})",
                Location(path, key_node.start_mark.line + 1),
            )
        raw[full_key] = _decode_secure(value)
        sources.add(path, full_key, key_node, value_node)
    return raw


def _apply_project(
    project: Project, stack: str, path: Path, raw: dict[str, Any], sources: ConfigSources
) -> None:
    missing = []
    for key, declaration in sorted(project.config.items()):
        if key in raw:
            continue
        if declaration.fallback is NOT_SET:
            if key.split(":", 1)[0] == project.name:
                missing.append(key)
            continue
        raw[key] = declaration.fallback
        if declaration.key_node is not None and declaration.node is not None:
            sources.add(project.file, key, declaration.key_node, declaration.node)
    if missing:
        names = " and ".join(f"'{key}'" for key in missing)
        raise PlanInputError(
            f"stack {stack!r} is missing configuration {'values' if len(missing) > 1 else 'value'} "
            f"{names}: set {'them' if len(missing) > 1 else 'it'} in {path.name} or give a "
            f"default in Pulumi.yaml",
            Location(path, 1),
        )
    for key, declaration in sorted(project.config.items()):
        if declaration.type is not None:
            _check_type(stack, declaration, raw[key], sources.locate(key))


def _check_type(stack: str, declaration: ConfigDeclaration, value: Any, where: Location) -> None:
    prefix = f"{where.path}:{where.line}: stack {stack!r}: {declaration.key}"
    if declaration.secret and not _has_secure(value):
        raise PlanInputError(
            f"{prefix} is declared secret in Pulumi.yaml and must be set with "
            "`pulumi config set --secret` (secure: in the stack file)",
            where,
        )
    if _has_secure(value):
        return
    # The engine compares what the stack stores: scalars as their text, objects parsed.
    stored = value if isinstance(value, dict | list) else _text(value)
    if not conforms(declaration, stored):
        raise PlanInputError(
            f"{prefix} = {stored!r} must be of type {declaration.type_name()} "
            "(declared in Pulumi.yaml)",
            where,
        )


def _decode_secure(value: Any) -> Any:
    """``{secure: ciphertext}`` at any depth becomes a :class:`_Secure` marker."""
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return _Secure()
        return {key: _decode_secure(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode_secure(item) for item in value]
    return value


def _has_secure(value: Any) -> bool:
    if isinstance(value, _Secure):
        return True
    if isinstance(value, dict):
        return any(_has_secure(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_secure(item) for item in value)
    return False


def _engine_value(value: Any, declaration: ConfigDeclaration | None) -> str:
    if isinstance(value, _Secure):
        declared = declaration.type if declaration else None
        return _STAND_INS.get(declared or "", SECRET_TEXT)
    if isinstance(value, dict | list):
        return json.dumps(_plain(value))
    return _text(value)


def _plain(value: Any) -> Any:
    if isinstance(value, _Secure):
        return SECRET_TEXT
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _config_nodes(root: yaml.Node | None) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    if not isinstance(root, yaml.MappingNode):
        return {}
    for key, value in root.value:
        if key.value == "config" and isinstance(value, yaml.MappingNode):
            return {str(k.value): (k, v) for k, v in value.value}
    return {}
