"""Find the Pulumi project on disk and read its ``Pulumi.yaml``, as the engine does.

The project file's ``config:`` block declares keys (pulumi/pulumi,
``sdk/go/common/workspace/project.go``: ``ProjectConfigType``, ``RewriteShorthandConfigValues``
and ``Validate``; schema ``sdk/go/common/workspace/project.json``):

- a key in the project's namespace (``name`` or ``<project>:name``) may declare ``type``
  (``string``, ``integer``, ``boolean``, ``array`` with ``items``, ``object``),
  ``description``, ``default`` and ``secret``; a bare scalar or list is its ``default``;
- a key in another namespace (``gcp:region``) may only give a ``value``; a bare scalar or
  list is that ``value``;
- ``default`` and ``value`` exclude each other, and a typed default must have its type.

How stack files are merged with these declarations is ``plan.config.stack``'s concern.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spotproof import bounded_yaml
from spotproof.plan.config.sources import Location

CONFIG_TYPES = ("string", "integer", "boolean", "array", "object")
NOT_SET: Any = object()


class PlanInputError(ValueError):
    """Bad input to ``spotproof plan`` itself (unknown stack, unreadable file, config that
    Pulumi would refuse): exit 2. ``location`` is the line to annotate, where known."""

    def __init__(self, message: str, location: Location | None = None) -> None:
        super().__init__(message)
        self.location = location


@dataclass(frozen=True)
class ConfigDeclaration:
    """One key of the project's ``config:`` block."""

    key: str
    """Full key, ``namespace:name``."""
    type: str | None = None
    items: dict[str, Any] | None = None
    """For ``array``: the items' type, ``{"type": ..., "items": ...}``."""
    default: Any = NOT_SET
    value: Any = NOT_SET
    secret: bool = False
    node: yaml.Node | None = field(default=None, compare=False, repr=False)
    key_node: yaml.Node | None = field(default=None, compare=False, repr=False)

    @property
    def fallback(self) -> Any:
        """What the stack gets when it sets nothing: the default, else the value."""
        return self.default if self.default is not NOT_SET else self.value

    def type_name(self) -> str:
        """As Pulumi names it in errors: ``array<string>`` for typed arrays."""
        name, items = self.type or "", self.items
        suffix = ""
        while items is not None:
            name, suffix = f"{name}<{items.get('type')}", f"{suffix}>"
            items = items.get("items")
        return name + suffix


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    main: Path
    """The program's entry file."""
    stack_dir: Path
    config: dict[str, ConfigDeclaration] = field(default_factory=dict)
    """The ``config:`` block, by full key."""

    @property
    def file(self) -> Path:
        return self.root / "Pulumi.yaml"

    def stacks(self) -> list[str]:
        return sorted(
            p.name[len("Pulumi.") : -len(".yaml")] for p in self.stack_dir.glob("Pulumi.*.yaml")
        )

    def stack_file(self, stack: str) -> Path:
        return self.stack_dir / f"Pulumi.{stack}.yaml"

    def full_key(self, key: str) -> str:
        """A key without a namespace belongs to the project (as in the Pulumi CLI)."""
        return key if ":" in key else f"{self.name}:{key}"


def find_project(start: Path) -> Project:
    """The project whose ``Pulumi.yaml`` is in ``start`` or the nearest parent."""
    for directory in [start, *start.parents]:
        if (directory / "Pulumi.yaml").is_file():
            return _load_project(directory)
    raise PlanInputError(f"no Pulumi.yaml in {start} or its parents; run from a Pulumi project")


def _load_project(root: Path) -> Project:
    path = root / "Pulumi.yaml"
    settings, document = read_yaml(path)
    if not isinstance(settings, dict) or not settings.get("name"):
        raise PlanInputError(f"{path}: not a Pulumi project file (needs 'name')")
    name = str(settings["name"])
    main = root / str(settings.get("main", "."))
    if main.is_dir():
        main = main / "__main__.py"
    if not main.is_file():
        raise PlanInputError(f"{path}: main program {main} does not exist")
    stack_dir = settings.get("stackConfigDir", ".")
    if not isinstance(stack_dir, str):
        raise PlanInputError(f"{path}: stackConfigDir must be a path; got {stack_dir!r}")
    declarations = _declarations(path, name, settings.get("config"), document)
    return Project(root, name, main, root / stack_dir, declarations)


def _declarations(
    path: Path, project: str, block: Any, document: yaml.Node | None
) -> dict[str, ConfigDeclaration]:
    if block is None:
        return {}
    if not isinstance(block, dict):
        # A string here is the old spelling of stackConfigDir.
        raise PlanInputError(
            f"{path}: 'config' must map keys to declarations; use stackConfigDir for a folder"
        )
    config_entry = _mapping_items(document).get("config")
    nodes = _mapping_items(config_entry[1]) if config_entry else {}
    found = {}
    for raw_key, raw in block.items():
        key = str(raw_key)
        full_key = key if ":" in key else f"{project}:{key}"
        own = ":" not in key or key.startswith(f"{project}:")
        key_node, node = nodes.get(key, (None, None))
        where = f"{path}:{key_node.start_mark.line + 1 if key_node else 1}: config {key}"
        # The shorthand: a bare scalar or list is a default in the project's namespace and
        # a value in any other; an empty entry declares a key with neither.
        if isinstance(raw, dict):
            spelled = raw
        elif raw is None:
            spelled = {}
        elif isinstance(raw, str | int | float | bool | list):
            spelled = {"default": raw} if own else {"value": raw}
        else:
            raise PlanInputError(f"{where}: not a value or a declaration")
        unknown = set(spelled) - {"type", "items", "description", "secret", "default", "value"}
        if unknown:
            raise PlanInputError(
                f"{where}: unknown field {sorted(unknown)[0]!r}; allowed: type, items, "
                "description, secret, default, value"
            )
        declaration = ConfigDeclaration(
            full_key,
            spelled.get("type"),
            spelled.get("items"),
            spelled.get("default", NOT_SET),
            spelled.get("value", NOT_SET),
            bool(spelled.get("secret", False)),
            node,
            key_node,
        )
        _check_declaration(where, declaration, own)
        found[full_key] = declaration
    return found


def _check_declaration(where: str, declaration: ConfigDeclaration, own: bool) -> None:
    """The rules of ``Project.Validate`` in pulumi/pulumi's project.go."""
    if declaration.default is not NOT_SET and declaration.value is not NOT_SET:
        raise PlanInputError(f"{where}: cannot have both a 'default' and a 'value'")
    if declaration.type is not None and declaration.type not in CONFIG_TYPES:
        raise PlanInputError(
            f"{where}: unknown type {declaration.type!r}; allowed: {', '.join(CONFIG_TYPES)}"
        )
    if not own:
        if declaration.type is not None or declaration.default is not NOT_SET:
            raise PlanInputError(
                f"{where}: is not in the project's namespace, so it may only give a 'value'"
            )
        if declaration.value is NOT_SET:
            raise PlanInputError(f"{where}: is in another namespace and must give a 'value'")
        return
    if declaration.type == "array" and declaration.items is None:
        raise PlanInputError(f"{where}: declares an array without its 'items' type")
    if (
        declaration.type
        and declaration.default is not NOT_SET
        and not conforms(declaration, declaration.default)
    ):
        raise PlanInputError(
            f"{where}: default is not of the declared type {declaration.type_name()}"
        )


def conforms(declaration: ConfigDeclaration, value: Any) -> bool:
    """Whether ``value`` passes Pulumi's ``ValidateConfigValue`` for the declared type:
    integers may be whole floats or numeric strings, booleans the strings true/false."""
    return _conforms(declaration.type or "", declaration.items, value)


def _conforms(type_name: str, items: dict[str, Any] | None, value: Any) -> bool:
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return True
        return isinstance(value, str) and _is_integer_text(value)
    if type_name == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or not isinstance(items, dict):
        return False
    return all(_conforms(str(items.get("type")), items.get("items"), item) for item in value)


def _is_integer_text(text: str) -> bool:
    # Go's strconv.Atoi: an optional sign, then decimal digits.
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit()


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """A YAML file's value and its node tree (for line numbers), read within the bounds of
    a stack file (``spotproof.bounded_yaml``); one-line errors."""
    try:
        values, nodes = bounded_yaml.load(path, bounded_yaml.STACK_FILE)
    except bounded_yaml.YamlLimitError as error:
        raise PlanInputError(str(error), Location(path, error.line)) from None
    return (values[0], nodes[0]) if nodes else (None, None)


def _mapping_items(node: yaml.Node | None) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """Key text -> (key node, value node) of a YAML mapping node; empty for anything else."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(key.value): (key, value) for key, value in node.value}
