"""A rule that ``spotproof check`` has never heard of is placed and scoped by what it
declares: the key path of its finding, and whether it applies to users' manifests and
needs the stack. Nothing in ``check`` names it, nor any of the plan's own checks: each
gives the key it judges, whatever its words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof import policy
from spotproof.check import check, load_all
from spotproof.plan.simulation import termination
from spotproof.policy import PlannedResource, Problem, Scope, StackRule
from tests.support import REPO, run_cli

JOB = REPO / "examples" / "finetune-job.yaml"
RULE = "backoff-judged"


def _backoff(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    for resource in resources:
        if resource.inputs.get("kind") == "Job":
            yield resource.name, Problem("a Job retries", "spec.backoffLimit")


def _findings(monkeypatch: pytest.MonkeyPatch, scope: Scope) -> list[tuple[int, str]]:
    rule = StackRule(RULE, "Every Job is judged.", _backoff, scope=scope)
    monkeypatch.setattr(policy, "STACK_RULES", (*policy.STACK_RULES, rule))
    result = check(load_all([JOB]), None)
    return [(f.line, f.message) for f in result.findings if f.policy == RULE]


def _line_of(path: Path, text: str) -> int:
    content = path.read_text()
    return content[: content.index(text)].count("\n") + 1


def test_a_new_rule_is_reported_at_the_key_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _findings(monkeypatch, Scope()) == [(_line_of(JOB, "backoffLimit:"), "a Job retries")]


@pytest.mark.parametrize(
    "scope", [Scope(needs_stack=True), Scope(manifests=False)], ids=["needs-stack", "not-manifests"]
)
def test_a_new_rule_is_left_out_where_its_scope_says(
    monkeypatch: pytest.MonkeyPatch, scope: Scope
) -> None:
    assert _findings(monkeypatch, scope) == []


def test_a_plan_check_is_reported_at_the_key_it_judges_whatever_its_words(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SIGTERM check judges a container's command: its finding is there even in words
    that name no container."""
    monkeypatch.setattr(termination, "_sigterm_answers", lambda container: iter(["exits 0"]))
    code, out, _ = run_cli(
        capsys, "check", str(JOB), "--stack", "gke-dev", "--project-dir", str(REPO)
    )
    assert code == 1, out
    line = _line_of(JOB, "command: [python, train.py]")
    assert f"{JOB}:{line}: [sigterm-exit-zero] Job spotproof/llm-finetune: exits 0" in out, out
