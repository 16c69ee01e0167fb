"""A Pulumi project's stacks and the cloud each deploys to, from its files alone.

The CI workflow lists stacks before it installs anything heavy, so this reads
``Pulumi.yaml`` (its ``stackConfigDir`` and any project-wide ``spotproof:cloud``) and each
``Pulumi.<stack>.yaml`` with PyYAML only. The full reading, as the engine does it, is
``spotproof.plan.config.project`` and ``spotproof.plan.config.stack``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotproof import bounded_yaml
from spotproof.catalog import PROFILES

CLOUD_KEY = "spotproof:cloud"
EXTRAS = {cloud.value: profile.extra for cloud, profile in PROFILES.items()}
"""Each cloud's extra: its provider SDK and the components."""


class StackListError(ValueError):
    """A project whose stacks cannot be listed; the message is one line."""


@dataclass(frozen=True)
class Stack:
    name: str
    cloud: str
    extra: str


def project_root(start: Path) -> Path:
    """The folder of the ``Pulumi.yaml`` at or above ``start``."""
    for folder in [start, *start.parents]:
        if (folder / "Pulumi.yaml").is_file():
            return folder
    raise StackListError(f"no Pulumi.yaml in {start} or its parents; run from a Pulumi project")


def stacks(root: Path) -> list[Stack]:
    """Every stack of the project at ``root``, in name order."""
    settings = read_settings(root / "Pulumi.yaml")
    folder = root / str(settings.get("stackConfigDir") or ".")
    default = _cloud_of(settings.get("config"))
    found = []
    for path in sorted(folder.glob("Pulumi.*.yaml")):
        name = path.name[len("Pulumi.") : -len(".yaml")]
        config = read_settings(path).get("config")
        cloud = _cloud_of(config) or default or _existing_cloud(config)
        if cloud not in EXTRAS:
            raise StackListError(
                f"{path}: {CLOUD_KEY} is {cloud!r}; allowed: {', '.join(EXTRAS)} (or, for "
                "components on an existing cluster, its providers' settings)"
            )
        found.append(Stack(name, cloud, EXTRAS[cloud]))
    return found


PROVIDER_PREFIXES = {profile.provider_prefix: cloud.value for cloud, profile in PROFILES.items()}
"""A stack of components on an existing cluster sets no ``spotproof:cloud``; its
``spotproof:existingCluster.cloud`` or its providers' settings say the cloud."""


def _existing_cloud(config: Any) -> str | None:
    if not isinstance(config, dict):
        return None
    existing = config.get("spotproof:existingCluster")
    if isinstance(existing, dict) and isinstance(existing.get("cloud"), str):
        return existing["cloud"]
    return next(
        (
            cloud
            for key in config
            for prefix, cloud in PROVIDER_PREFIXES.items()
            if str(key).startswith(prefix)
        ),
        None,
    )


def _cloud_of(config: Any) -> str | None:
    if not isinstance(config, dict):
        return None
    value = config.get(CLOUD_KEY)
    if isinstance(value, dict):  # a project file's {value: ...} or {default: ...}
        value = value.get("value", value.get("default"))
    return value if isinstance(value, str) else None


def read_settings(path: Path) -> dict[str, Any]:
    """A project or stack file's settings, one mapping."""
    try:
        [document], _ = bounded_yaml.load(path, bounded_yaml.STACK_FILE)
    except bounded_yaml.YamlLimitError as error:
        raise StackListError(str(error)) from None
    except ValueError:
        raise StackListError(f"{path}: not one YAML document") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise StackListError(f"{path}: not a mapping of settings")
    return document


def program_virtualenv(root: Path) -> str:
    """The virtualenv ``Pulumi.yaml`` names for the program (``runtime.options``), where
    ``pulumi`` runs it; ``venv`` when it names none."""
    runtime = read_settings(root / "Pulumi.yaml").get("runtime")
    options = runtime.get("options") if isinstance(runtime, dict) else None
    named = options.get("virtualenv") if isinstance(options, dict) else None
    return named if isinstance(named, str) and named else "venv"
