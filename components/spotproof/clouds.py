"""Each cloud's own module in a layer, found from the registry (``catalog.PROFILES``).

What differs per cloud lives, in each layer that needs it, in a module named after the
cloud: ``catalog/gke.py`` (facts and the profile), ``fleet/gke.py`` (its config section),
``scheduling/gke.py`` (how its pools read as nodes), ``policy/gke.py`` (its rules),
``plan/gke.py`` (its part of the offline plan), and the Pulumi components in
``spotproof/gke/``. Shared code never names a cloud: it asks here for the module of the
cloud at hand, or of every registered one, so a cloud added to the registry is found in
every layer, and one that lacks a module fails on first use, naming it.

Modules are imported when asked for, not when the asking layer is: a cloud's module may
import the shared code that asks for it, and a stack never imports another cloud's
components, whose Pulumi SDK is another extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from spotproof.catalog import PROFILES, Cloud


def module_name(layer: str, cloud: Cloud) -> str:
    """``spotproof.policy``, GKE -> ``spotproof.policy.gke``."""
    return f"{layer}.{cloud.value}"


def module(layer: str, cloud: Cloud) -> ModuleType:
    return importlib.import_module(module_name(layer, cloud))


def modules(layer: str) -> list[ModuleType]:
    """``layer``'s module of every registered cloud, in the registry's order."""
    return [module(layer, cloud) for cloud in PROFILES]
