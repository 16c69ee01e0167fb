"""The variables of ``runtime.settings``: defaults that mirror the checkpointer's stay
equal to them, and the module stays importable by a Pulumi program without the runtime."""

from __future__ import annotations

import ast
from pathlib import Path

from spotproof.runtime import settings
from spotproof.runtime.checkpointer.gang import PEER_WAIT_SECONDS
from spotproof.runtime.checkpointer.manifest import DEFAULT_KEEP
from spotproof.runtime.checkpointer.transfer import MAX_PART


def test_the_trainers_defaults_and_bounds_are_the_checkpointers() -> None:
    assert settings.KEEP_CHECKPOINTS.default == DEFAULT_KEEP
    assert settings.PEER_WAIT_SECONDS.default == PEER_WAIT_SECONDS
    assert settings.CHECKPOINT_PART_KB.high == MAX_PART // 1024


def test_settings_import_nothing_else_of_spotproof() -> None:
    tree = ast.parse(Path(settings.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    imported |= {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {name for name in imported if name.startswith("spotproof")}
