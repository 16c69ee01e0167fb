"""Shared fixtures: real plans of the real stacks, and throwaway projects for bad input."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.plan import PlanResult
from tests.support import REPO, plan_of


@pytest.fixture
def gke_dev() -> PlanResult:
    return plan_of("gke-dev")


@pytest.fixture
def gke_prod() -> PlanResult:
    return plan_of("gke-prod")


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Path]:
    """A copy of this project whose ``stacks/`` holds one stack, with its config given."""

    def make(config: dict[str, Any], stack: str = "gke-test", program: str | None = None) -> Path:
        root = tmp_path / "project"
        (root / "stacks").mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
        (root / "infra").mkdir(exist_ok=True)
        main = program or (REPO / "infra" / "__main__.py").read_text()
        (root / "infra" / "__main__.py").write_text(main)
        (root / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
        return root

    return make
