"""``spotproof.testing.record`` reads a stack as ``spotproof plan`` does: a user's program
that builds its fleet from the stack's config records in a test as it plans."""

from __future__ import annotations

import runpy
from collections.abc import Callable
from pathlib import Path

import pytest

from spotproof.testing import record
from tests.support import stack_config

NODE_POOL = "gcp:container/nodePool:NodePool"


def _program(root: Path) -> Callable[[], None]:
    """The project's own program (``infra/__main__.py``), as a test imports it."""
    return lambda: runpy.run_path(str(root / "infra" / "__main__.py"), run_name="__main__")


def test_a_programs_stack_config_is_read_from_its_stack_file(
    make_project: Callable[..., Path],
) -> None:
    root = make_project(stack_config("gke-dev"), stack="dev")

    recording = record(_program(root), stack="dev", project_dir=root)

    assert recording.project == "spotproof"  # the project's own name, from Pulumi.yaml
    pools = {r.inputs["name"] for r in recording.of_type(NODE_POOL)}
    assert {"system", "l4-spot"} <= pools


def test_the_working_directory_is_where_the_project_is_looked_for(
    make_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(stack_config("gke-dev"), stack="dev")
    monkeypatch.chdir(root / "infra")
    assert record(_program(root), stack="dev").of_type(NODE_POOL)


def test_config_given_by_hand_replaces_the_stack_file(make_project: Callable[..., Path]) -> None:
    root = make_project(stack_config("gke-dev"), stack="dev")
    with pytest.raises(Exception, match="spotproof:cloud"):
        record(_program(root), stack="dev", project_dir=root, config={})


def test_a_stack_with_no_file_records_with_no_config(tmp_path: Path) -> None:
    """A component tested alone, outside any project: nothing to read."""
    recording = record(lambda: None, stack="research", project="ml", project_dir=tmp_path)
    assert recording.project == "ml" and recording.resources == []
