"""The variables of ``runtime.settings``: defaults that mirror the checkpointer's stay
equal to them, and the module stays importable by a Pulumi program without the runtime."""

from __future__ import annotations

import ast
from pathlib import Path

from spotproof.runtime import setting_readers, settings
from spotproof.runtime.checkpointer.gang import PEER_WAIT_SECONDS
from spotproof.runtime.checkpointer.manifest import DEFAULT_KEEP
from spotproof.runtime.checkpointer.transfer import MAX_PART


def test_the_trainers_defaults_and_bounds_are_the_checkpointers() -> None:
    assert settings.KEEP_CHECKPOINTS.default == DEFAULT_KEEP
    assert settings.PEER_WAIT_SECONDS.default == PEER_WAIT_SECONDS
    assert settings.CHECKPOINT_PART_KB.high == MAX_PART // 1024


def _spotproof_imports(module: object) -> set[str]:
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    imported |= {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    return {name for name in imported if name.startswith("spotproof")}


def test_settings_import_nothing_else_of_spotproof_but_their_readers() -> None:
    """A Pulumi program imports them without the runtime."""
    assert _spotproof_imports(settings) <= {"spotproof.runtime.setting_readers"}
    assert not _spotproof_imports(setting_readers)
