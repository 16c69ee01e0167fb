"""Every module imports on its own: a user's program may import any of them first.

An import cycle only shows when the module at its far end is imported before the rest, so
each module is imported into a fresh set of ``spotproof`` modules (third-party packages
stay loaded, which keeps this fast)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import spotproof

PACKAGE_ROOT = Path(spotproof.__file__).parent
# Entry points that run when imported.
RUN_ON_IMPORT = {"spotproof.policy.pack.__main__"}
# Modules of an extra the test environment cannot hold (pulumi-policy pins an older
# protobuf than gcsfs needs); test_packaging imports them in an environment of their own.
NEEDS = {"spotproof.policy.crossguard": "pulumi_policy"}


def _modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages([str(PACKAGE_ROOT)], prefix="spotproof.")
        if info.name not in RUN_ON_IMPORT
    ]
    return ["spotproof", *sorted(names)]


def _forget_spotproof() -> dict[str, object]:
    saved = {name: module for name, module in sys.modules.items() if name.startswith("spotproof")}
    for name in saved:
        del sys.modules[name]
    return saved


@pytest.mark.parametrize("module", _modules())
def test_module_imports_first(module: str) -> None:
    if module in NEEDS:
        pytest.importorskip(NEEDS[module])
    saved = _forget_spotproof()
    try:
        importlib.import_module(module)
    finally:
        _forget_spotproof()
        sys.modules.update(saved)  # type: ignore[arg-type]


def test_catalogs_depend_on_nothing_else_in_spotproof() -> None:
    """Cloud facts are the bottom layer: spec, plan and components read them, never the
    other way round."""
    for path in sorted((PACKAGE_ROOT / "catalog").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        outside = {
            m
            for m in imported
            if m.startswith("spotproof") and not m.startswith("spotproof.catalog")
        }
        assert not outside, f"{path.name} imports {sorted(outside)}"
