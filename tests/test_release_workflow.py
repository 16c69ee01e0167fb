"""The release workflow (.github/workflows/release.yml): on a version tag it builds the sdist
and the wheel with Karpenter's schemas bundled, checks them, attests their provenance and
publishes them through PyPI's trusted publishing. Linted by actionlint; every action pinned
by commit; each job only the permissions it uses; and the build job's steps run here as a
runner would, but for `npm ci` (this checkout's node_modules stands in for it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import check_dist
from spotproof import __version__
from spotproof.ci import actions
from tests import venvs
from tests.checkout import copy_checkout
from tests.support import REPO
from tests.test_workflow import PINNED, _actionlint

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

RELEASE = REPO / ".github" / "workflows" / "release.yml"
TOOLS = REPO / ".github" / "release-requirements.txt"
GITHUB_SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail")


def _release() -> dict[Any, Any]:
    return yaml.safe_load(RELEASE.read_text())


def _job(name: str) -> dict[str, Any]:
    return _release()["jobs"][name]


def _uses(job: str) -> list[str]:
    return [step["uses"].split("@")[0] for step in _job(job)["steps"] if "uses" in step]


def test_actionlint_finds_nothing_in_the_release_workflow() -> None:
    assert [f"{e['line']}: {e['message']}" for e in _actionlint(RELEASE)] == []


def test_it_runs_on_version_tags_only() -> None:
    # PyYAML reads the key `on` as True.
    assert _release()[True] == {"push": {"tags": ["v*"]}}


def test_every_action_is_pinned_by_commit_with_its_tag_and_given_only_its_inputs() -> None:
    lines = [line for line in RELEASE.read_text().splitlines() if "uses:" in line]
    known = {(a.name, a.commit, a.tag) for a in actions.RELEASE_ACTIONS}
    declared = {a.name: a.inputs for a in actions.RELEASE_ACTIONS}
    assert len(lines) == 8
    for line in lines:
        match = PINNED.match(line)
        assert match, line
        assert match.group(2, 3, 4) in known, line
    for job in _release()["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert set(step.get("with") or {}) <= declared[step["uses"].split("@")[0]], step


def test_each_job_holds_only_the_permissions_it_uses() -> None:
    assert _release()["permissions"] == {}
    assert _job("build")["permissions"] == {"contents": "read"}
    # A Sigstore certificate (the OIDC token) and the attestation's storing.
    assert _job("attest")["permissions"] == {"id-token": "write", "attestations": "write"}
    # PyPI's trusted publishing exchanges the OIDC token; nothing else.
    assert _job("publish")["permissions"] == {"id-token": "write"}


def test_publishing_waits_for_the_attestation_in_the_pypi_environment_with_no_token() -> None:
    publish = _job("publish")
    assert publish["needs"] == ["build", "attest"]
    assert publish["environment"] == {"name": "pypi", "url": "https://pypi.org/p/spotproof"}
    assert _uses("publish") == ["actions/download-artifact", "pypa/gh-action-pypi-publish"]
    [upload] = [s for s in publish["steps"] if s["uses"].startswith("pypa/")]
    assert "password" not in upload["with"] and upload["with"]["packages-dir"] == "dist/"
    assert _uses("attest") == ["actions/download-artifact", "actions/attest-build-provenance"]
    [attest] = [s for s in _job("attest")["steps"] if "attest" in s["uses"]]
    assert attest["with"] == {"subject-path": "dist/*"}
    assert "${{ secrets." not in RELEASE.read_text()


def test_the_build_installs_by_hash_bundles_the_schemas_and_checks_before_uploading() -> None:
    steps = _job("build")["steps"]
    assert steps[0]["with"] == {"persist-credentials": False}
    runs = [step.get("run", "") for step in steps]
    joined = "\n".join(runs)
    assert "python -m pip install --require-hashes -r .github/release-requirements.txt" in runs
    assert "npm ci --no-audit --no-fund --ignore-scripts" in runs
    assert joined.index("bundle_karpenter_schemas.sh") < joined.index("python -m build")
    assert "python -m build --no-isolation --outdir dist" in joined
    assert 'python scripts/check_dist.py dist "${TAG}"' in joined
    assert "pip install --no-index --no-deps dist/*.whl" in joined
    assert "python -m pip check" in joined
    assert all("${{" not in run for run in runs)  # the tag reaches scripts as $TAG
    assert _uses("build")[-1] == "actions/upload-artifact"
    for line in joined.splitlines():  # nothing installed from an index but by hash
        if "pip install" in line:
            assert "--require-hashes" in line or "--no-index" in line, line


def test_the_build_tools_lock_hashes_every_file_and_covers_the_build() -> None:
    text = TOOLS.read_text()
    requirements = [
        " ".join(line.split())
        for line in text.replace("\\\n", " ").splitlines()
        if line[:1] not in ("#", "")
    ]
    names = set()
    for requirement in requirements:
        assert re.fullmatch(r"[\w.-]+==\S+ --hash=sha256:[0-9a-f]{64}", requirement), requirement
        names.add(requirement.split("==")[0].lower().replace("_", "-"))
    assert {"build", "setuptools", "fsspec", "crc32c", "packaging", "pyproject-hooks"} <= names


def _step(name: str) -> str:
    [step] = [s for s in _job("build")["steps"] if s.get("name") == name]
    return step["run"]


def test_the_build_jobs_steps_make_a_checked_wheel_and_sdist(tmp_path: Path) -> None:
    """Every run step of the build job but `npm ci`, in a copy of this checkout, on a fresh
    Python as the runner's: the tools from their lock (by hash, from the index), the schemas
    bundled, both artifacts built without isolation, checked, and the wheel installed."""
    source = copy_checkout(tmp_path / "checkout")
    (source / "node_modules").symlink_to(REPO / "node_modules")
    runner = venvs.create(tmp_path / "python").parent
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": f"{runner}:{env['PATH']}", "TAG": f"v{__version__}"}
    for name in ("Build tools, each file by its hash", "Build", "Check the artifacts"):
        script = tmp_path / "step.sh"
        script.write_text(_step(name))
        done = subprocess.run(
            [*GITHUB_SHELL, str(script)],
            cwd=source,
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        assert done.returncode == 0, f"{name}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.splitlines()[0] == (
        f"spotproof {__version__}: one wheel and one sdist, Karpenter's schemas in both"
    )
    assert done.stdout.splitlines()[-1] == f"spotproof {__version__}"
    dist = source / "dist"
    assert sorted(p.name for p in dist.iterdir()) == [
        f"spotproof-{__version__}-py3-none-any.whl",
        f"spotproof-{__version__}.tar.gz",
    ]

    # The same check refuses another tag, and a wheel without the schemas.
    with pytest.raises(check_dist.DistError, match="names another version"):
        check_dist.check(dist, "v9.9.9")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(next(dist.glob("*.tar.gz")), bare)
    wheel = next(dist.glob("*.whl"))
    with zipfile.ZipFile(wheel) as full, zipfile.ZipFile(bare / wheel.name, "w") as stripped:
        for item in full.infolist():
            if "karpenter_schemas/validators.mjs" not in item.filename:
                stripped.writestr(item, full.read(item))
    with pytest.raises(check_dist.DistError, match="lacks plan/schemas/karpenter_schemas/"):
        check_dist.check(bare, f"v{__version__}")
    with tarfile.open(next(dist.glob("*.tar.gz"))) as sdist:
        assert any(m.name.endswith("karpenter_schemas/validators.mjs") for m in sdist)
