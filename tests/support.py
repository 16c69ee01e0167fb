"""Helpers the tests share: real plans, stack configs, the CLI run in-process."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof import cli
from spotproof.plan import PlanResult, run_plan

REPO = Path(__file__).resolve().parents[1]
_PLANS: dict[str, PlanResult] = {}
INSTALLED_SIZES: dict[str, int] = {}
"""Environment label -> bytes in its site-packages, filled by ``test_packaging``."""


def plan_of(stack: str) -> PlanResult:
    """A private copy of the real plan of ``stack``: tests may mutate it freely."""
    if stack not in _PLANS:
        _PLANS[stack] = run_plan(stack, REPO)
    return copy.deepcopy(_PLANS[stack])


def stack_config(stack: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def iam_condition_allows(expression: str, resource_name: str) -> bool:
    """Evaluate an IAM condition (CEL) for a call on ``resource_name``, as IAM does."""
    import celpy  # noqa: PLC0415 - only the tests that check conditions need it

    environment = celpy.Environment()
    program = environment.program(environment.compile(expression))
    return bool(program.evaluate(celpy.json_to_cel({"resource": {"name": resource_name}})))
