"""Each cloud's own module in a layer, found from the registry (``catalog.PROFILES``), and
the contract that says what each of those modules provides (:data:`CONTRACT`).

What differs per cloud lives, in each layer that needs it, in a module named after the
cloud: its facts and profile (``catalog.gke``), its config section (``fleet.gke``), how its
pools read as nodes (``scheduling.gke``), its rules (``policy.gke``), what its managed
Prometheus evaluates beyond the shared rules (``observability.gke``), its part of the
offline plan (``plan.gke``), its Pulumi components (``spotproof.gke``, with the drill's
grant in ``spotproof.gke.drill``) and its reclaim for ``spotproof drill``
(``drill.reclaim.gke``). Shared code never names a cloud: it asks here for the module of
the cloud at hand, or of every registered one, so a cloud added to the registry is found
in every layer, and one that lacks a module fails on first use with :class:`UnknownCloud`,
naming the module and what it must provide. ``tests/test_clouds.py`` checks
:data:`CONTRACT` for every registered cloud (:func:`lacks`).

Modules are imported when asked for, not when the asking layer is: a cloud's module may
import the shared code that asks for it, and a stack never imports another cloud's
components, whose Pulumi SDK is another extra. For the same reason the contract names the
types it checks as text (``spotproof.fleet.shared:CloudConfig``), imported only by
:func:`lacks`: they belong to the layers above this one.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from dataclasses import dataclass
from enum import StrEnum
from types import ModuleType

from spotproof.catalog import PROFILES, Cloud, UnknownCloud, profile, registered

RECIPE = 'docs/layout.md, "A new cloud"'


class Form(StrEnum):
    """How a provided name relates to its type."""

    INSTANCE = "an instance of"
    EACH = "a tuple, each an instance of"
    SUBCLASS = "a subclass of"
    DATACLASS = "a dataclass"


@dataclass(frozen=True)
class Provides:
    """One name a cloud's module defines for shared code, and what it must be."""

    name: str
    kind: str = ""
    """Its type as ``module:Class``, imported only when checked; empty for a dataclass."""
    form: Form = Form.INSTANCE

    def judge(self, value: object) -> bool:
        if self.form is Form.DATACLASS:
            return isinstance(value, type) and dataclasses.is_dataclass(value)
        module, _, name = self.kind.partition(":")
        kind = getattr(importlib.import_module(module), name)
        if self.form is Form.SUBCLASS:
            return isinstance(value, type) and issubclass(value, kind)
        if self.form is Form.EACH:
            return isinstance(value, tuple) and all(isinstance(v, kind) for v in value)
        return isinstance(value, kind)

    @property
    def wanted(self) -> str:
        """``an instance of spotproof.fleet.shared:CloudConfig``."""
        return f"{self.form} {self.kind}".strip()


@dataclass(frozen=True)
class CloudModule:
    """One module every registered cloud has, and what it provides."""

    template: str
    """Its dotted name, ``{cloud}`` standing for the cloud's value: ``spotproof.fleet.{cloud}``."""
    provides: tuple[Provides, ...]
    what: str
    """What it holds, in words; docs/layout.md's new-cloud recipe says the same."""
    needs_sdk: bool = False
    """It imports the cloud's Pulumi SDK (the cloud's extra): where that is not installed it
    is found, not imported, and what it provides goes unchecked."""

    def module_name(self, cloud: Cloud) -> str:
        return self.template.format(cloud=cloud.value)


def _each(name: str, kind: str) -> Provides:
    return Provides(name, kind, Form.EACH)


CONTRACT: tuple[CloudModule, ...] = (
    CloudModule(
        "spotproof.catalog.{cloud}",
        (Provides("PROFILE", "spotproof.catalog.profile:CloudProfile"),),
        "its facts, ending in the profile that catalog.PROFILES registers",
    ),
    CloudModule(
        "spotproof.fleet.{cloud}",
        (Provides("CONFIG", "spotproof.fleet.shared:CloudConfig"),),
        "its stack config section",
    ),
    CloudModule(
        "spotproof.scheduling.{cloud}",
        (Provides("SHAPES", "spotproof.scheduling.node_shapes:CloudShapes"),),
        "how its rendered pools read as nodes",
    ),
    CloudModule(
        "spotproof.policy.{cloud}",
        (
            _each("RESOURCE_RULES", "spotproof.policy.base:ResourceRule"),
            _each("STACK_RULES", "spotproof.policy.base:StackRule"),
            _each("IDENTITY_BINDINGS", "spotproof.policy.identity_readiness:IdentityBinding"),
        ),
        "its rules, its drill grant's among them, and how its identities are bound",
    ),
    CloudModule(
        "spotproof.observability.{cloud}",
        (Provides("RULES", "spotproof.observability.cloud:CloudRules"),),
        "what its managed Prometheus evaluates beyond the shared rules",
    ),
    CloudModule(
        "spotproof.plan.{cloud}",
        (Provides("PLAN", "spotproof.plan.cloud:CloudPlan"),),
        "its part of the offline plan: mocks, how its pools scale, its reclaim path",
    ),
    CloudModule(
        "spotproof.{cloud}",
        (
            Provides("HybridCluster", "spotproof.kube.cluster:ClusterForWorkloads", Form.SUBCLASS),
            Provides("HybridClusterArgs", form=Form.DATACLASS),
            Provides("Monitoring", "pulumi:ComponentResource", Form.SUBCLASS),
        ),
        "its Pulumi components: the cluster the program builds, and its managed Prometheus",
        needs_sdk=True,
    ),
    CloudModule(
        "spotproof.{cloud}.drill",
        (Provides("DrillGrant", "pulumi:ComponentResource", Form.SUBCLASS),),
        "what spotproof:drill grants, exported as the drill output its DRILL.grant reads",
        needs_sdk=True,
    ),
    CloudModule(
        "spotproof.drill.reclaim.{cloud}",
        (Provides("DRILL", "spotproof.drill.reclaim:CloudDrill"),),
        "how spotproof drill reclaims one of its nodes",
    ),
)
"""Every module a cloud needs, lowest layer first: what shared code finds through here."""


def module_name(layer: str, cloud: Cloud) -> str:
    """``spotproof.policy``, GKE -> ``spotproof.policy.gke``."""
    return f"{layer}.{cloud.value}"


def _contract_of(name: str, cloud: Cloud) -> str:
    """What the contract says ``name`` provides, for an error."""
    for entry in CONTRACT:
        if entry.module_name(cloud) == name:
            return f" providing {', '.join(p.name for p in entry.provides)}"
    return ""


def _found(name: str) -> bool:
    """Whether module ``name`` exists, without importing it (its package is imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its package is missing
        return False


def module(layer: str, cloud: Cloud) -> ModuleType:
    """``layer``'s module of ``cloud``; UnknownCloud, in one line, when the cloud is not
    registered or lacks the module."""
    profile(cloud)  # an unregistered cloud says so
    name = module_name(layer, cloud)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise  # the module is there; something it imports is not
        raise UnknownCloud(
            f"cloud {str(cloud)!r} has no module {name}{_contract_of(name, cloud)} ({RECIPE}); "
            f"registered: {registered()}"
        ) from None


def modules(layer: str) -> list[ModuleType]:
    """``layer``'s module of every registered cloud, in the registry's order."""
    return [module(layer, cloud) for cloud in PROFILES]


def lacks(cloud: Cloud) -> list[str]:
    """What ``cloud`` lacks of :data:`CONTRACT`, one line each; empty when it has it all."""
    if cloud not in PROFILES:
        return [f"catalog.PROFILES has no entry for {cloud}"]
    sdk = _found(profile(cloud).sdk_module)
    missing = []
    for entry in CONTRACT:
        name = entry.module_name(cloud)
        if not _found(name):
            missing.append(f"{name}: no such module ({entry.what})")
            continue
        if entry.needs_sdk and not sdk:
            continue
        found = importlib.import_module(name)
        for provided in entry.provides:
            value = getattr(found, provided.name, None)
            if value is None:
                missing.append(f"{name}.{provided.name}: missing ({provided.wanted})")
            elif not provided.judge(value):
                missing.append(f"{name}.{provided.name}: not {provided.wanted}")
    return missing
