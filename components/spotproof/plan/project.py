"""Find the Pulumi project on disk and read one stack's config the way the engine does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class PlanInputError(ValueError):
    """Bad input to ``spotproof plan`` itself (unknown stack, unreadable file): exit 2."""


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    main: Path
    """The program's entry file."""
    stack_dir: Path

    def stacks(self) -> list[str]:
        return sorted(
            p.name[len("Pulumi.") : -len(".yaml")] for p in self.stack_dir.glob("Pulumi.*.yaml")
        )

    def stack_file(self, stack: str) -> Path:
        return self.stack_dir / f"Pulumi.{stack}.yaml"


def find_project(start: Path) -> Project:
    """The project whose ``Pulumi.yaml`` is in ``start`` or the nearest parent."""
    for directory in [start, *start.parents]:
        if (directory / "Pulumi.yaml").is_file():
            return _load_project(directory)
    raise PlanInputError(f"no Pulumi.yaml in {start} or its parents; run from a spotproof project")


def _load_project(root: Path) -> Project:
    settings = _read_yaml(root / "Pulumi.yaml")
    if not isinstance(settings, dict) or "name" not in settings:
        raise PlanInputError(f"{root / 'Pulumi.yaml'}: not a Pulumi project file (needs 'name')")
    main = root / str(settings.get("main", "."))
    if main.is_dir():
        main = main / "__main__.py"
    if not main.is_file():
        raise PlanInputError(f"{root / 'Pulumi.yaml'}: main program {main} does not exist")
    return Project(
        root, str(settings["name"]), main, root / str(settings.get("stackConfigDir", "."))
    )


def stack_config(project: Project, stack: str) -> dict[str, str]:
    """The stack's config as the engine passes it to a program: full ``ns:key`` names,
    scalars as strings, objects and lists as JSON. Keys without a namespace belong to the
    project, as in the Pulumi CLI."""
    path = project.stack_file(stack)
    if not path.is_file():
        available = ", ".join(project.stacks()) or "none"
        raise PlanInputError(f"unknown stack {stack!r}: no {path}; available: {available}")
    document = _read_yaml(path) or {}
    if not isinstance(document, dict) or not isinstance(document.get("config") or {}, dict):
        raise PlanInputError(f"{path}: 'config' must be a mapping of keys to values")
    config = {}
    for key, value in (document.get("config") or {}).items():
        full_key = key if ":" in str(key) else f"{project.name}:{key}"
        config[full_key] = _engine_value(value)
    return config


def _engine_value(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PlanInputError(f"{path}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise PlanInputError(
            f"{path}: not UTF-8 (byte {error.object[error.start]:#04x} at offset "
            f"{error.start}); Pulumi reads stack files as UTF-8"
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise PlanInputError(f"{path}:{where}: not valid YAML") from None
