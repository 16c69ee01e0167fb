"""``spotproof ci init --spotproof``: the workflow installs exactly the artifact the user chose,
and every dependency, each file by its sha256, never a name from the index alone (spotproof
has no PyPI release, so ``spotproof==X`` would install whatever its registrant put there, in
the job that holds the cloud's OIDC credentials).

The locks are resolved for real, by pip against this machine's indexes, for a user's
repository given a wheel built from this checkout; then the listing job's install runs as a
runner would, and a wheel changed after ``ci init`` is refused."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.ci import artifact, lock, workflow
from spotproof.ci.lock import Pin
from tests import venvs
from tests.support import REPO, run_cli
from tests.test_workflow import _actionlint

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]

HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
COMMIT = "0123456789abcdef0123456789abcdef01234567"
GITHUB_SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail")


def _acme(root: Path, cloud: str = "gke") -> Path:
    """A repository whose Pulumi project lives in ``infra/``, with one stack."""
    (root / ".git").mkdir(parents=True)
    project = root / "infra"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: acme\nruntime: python\n")
    (project / f"Pulumi.{cloud}-staging.yaml").write_text(
        yaml.safe_dump({"config": {"spotproof:cloud": cloud}})
    )
    return project


@pytest.fixture(scope="module")
def initialised(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's repository after ``spotproof ci init --spotproof <the wheel>``."""
    repository = tmp_path_factory.mktemp("acme")
    project = _acme(repository)
    done = subprocess.run(
        [sys.executable, "-m", "spotproof.cli", "ci", "init", "--spotproof", str(wheel)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Commit them with the workflow." in done.stdout
    return repository


def _written(repository: Path) -> dict[str, Any]:
    return yaml.safe_load((repository / workflow.WORKFLOW_PATH).read_text())


def _requirements(text: str) -> list[str]:
    """A requirements file's requirements, each with its options on one line."""
    joined = text.replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in joined if line[:1] not in ("#", "")]


def test_every_install_of_the_workflow_is_a_lock_by_hash(initialised: Path) -> None:
    written = _written(initialised)
    text = (initialised / workflow.WORKFLOW_PATH).read_text()
    assert "spotproof==" not in text
    installs = [
        line.strip()
        for job in written["jobs"].values()
        for step in job["steps"]
        for line in step.get("run", "").splitlines()
        if "pip install" in line
    ]
    assert len(installs) == 6  # stacks; plan (+ the user's own); program (+ the user's); pack
    for line in installs:
        if "requirements.txt" in line:  # the user's own, as they wrote it
            continue
        command, _, lock_path = line.partition(" -m pip install --require-hashes -r ")
        assert lock_path, line
        assert command in ("python", "venv/bin/python")
        assert lock_path.startswith('"${GITHUB_WORKSPACE}/.github/spotproof/'), line
    for name in ("stacks", "gcp", "policy"):
        assert (initialised / lock.path_of(name)).is_file()


def test_every_line_of_every_lock_is_pinned_by_its_hash(initialised: Path, wheel: Path) -> None:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    copied = initialised / artifact.HOME / wheel.name
    assert copied.read_bytes() == wheel.read_bytes()
    for name, extras in (("stacks", ""), ("gcp", "[gcp]"), ("policy", "[policy]")):
        text = (initialised / lock.path_of(name)).read_text()
        assert "spotproof==" not in text
        first, *rest = _requirements(text)
        assert first == (
            f"spotproof{extras} @ file://${{GITHUB_WORKSPACE}}/.github/spotproof/{wheel.name}"
            f" --hash=sha256:{digest}"
        )
        assert rest, name
        for requirement in rest:
            name_version, _, options = requirement.partition(" ")
            assert re.fullmatch(r"[A-Za-z0-9._-]+==[^ =]+", name_version), requirement
            assert HASH.fullmatch(options.strip()), requirement
    gcp = {
        r.split("==")[0].lower()
        for r in _requirements((initialised / lock.path_of("gcp")).read_text())[1:]
    }
    assert {"pulumi", "pulumi-gcp", "pulumi-kubernetes", "pyyaml", "fsspec", "crc32c"} <= {
        name.replace("_", "-") for name in gcp
    }


def test_actionlint_finds_nothing_in_the_written_workflow(initialised: Path) -> None:
    found = _actionlint(initialised / workflow.WORKFLOW_PATH)
    assert [f"{e['line']}: {e['message']}" for e in found] == []


def _listing_step(repository: Path, python: Path) -> subprocess.CompletedProcess[str]:
    """The ``stacks`` job's listing step, as a runner runs it, with ``python`` first on PATH."""
    [listing] = [s for s in _written(repository)["jobs"]["stacks"]["steps"] if s.get("id")]
    output = repository / ".github-output"
    script = repository / ".github-step.sh"
    script.write_text(listing["run"])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        "PATH": f"{python.parent}:{env['PATH']}",
        "GITHUB_WORKSPACE": str(repository),
        "GITHUB_OUTPUT": str(output),
    }
    return subprocess.run(
        [*GITHUB_SHELL, str(script)],
        cwd=repository / _written(repository)["defaults"]["run"]["working-directory"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_the_listing_job_installs_the_lock_and_refuses_a_wheel_changed_since(
    initialised: Path, tmp_path: Path
) -> None:
    done = _listing_step(initialised, venvs.create(tmp_path / "runner"))
    assert done.returncode == 0, done.stdout + done.stderr
    listed = (initialised / ".github-output").read_text().strip()
    assert listed == 'stacks=[{"stack": "gke-staging", "cloud": "gke", "extra": "gcp"}]'

    # Someone swaps the committed wheel: pip refuses it, whatever it holds.
    changed = tmp_path / "changed"
    shutil.copytree(initialised, changed)
    wheel = next((changed / artifact.HOME).glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    fresh = tmp_path / "fresh"
    done = _listing_step(changed, venvs.create(fresh))
    assert done.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in done.stderr
    assert not (fresh / "bin" / "spotproof").exists()


REFUSED = {
    "a branch": (
        "git+https://github.com/acme/spotproof@main",
        "'main' is a branch, tag or short name, which can move to other code; give the full "
        "40-hex commit (git rev-parse <ref> prints it)",
    ),
    "a tag": ("git+https://github.com/acme/spotproof@v0.1.0", "'v0.1.0' is a branch, tag"),
    "a short commit": ("git+https://github.com/acme/spotproof@0123456", "'0123456' is a branch"),
    "a git URL without a commit": ("git+https://github.com/acme/spotproof", "not a git commit"),
    "git over ssh": (f"git+ssh://git@github.com/acme/spotproof@{COMMIT}", "not a git commit"),
    "an unhashed URL": (
        "https://example.com/spotproof-0.1.0-py3-none-any.whl",
        "https://example.com/spotproof-0.1.0-py3-none-any.whl: a URL without its sha256, which "
        "nothing could verify; add #sha256=<the wheel's 64-hex digest> (sha256sum prints it)",
    ),
    "a short digest": (
        "https://example.com/spotproof-0.1.0-py3-none-any.whl#sha256=abc",
        "a URL without its sha256",
    ),
    "plain http": (
        f"http://example.com/spotproof-0.1.0-py3-none-any.whl#sha256={'0' * 64}",
        "neither https nor a git commit over https",
    ),
    "an sdist": (
        f"https://example.com/spotproof-0.1.0.tar.gz#sha256={'0' * 64}",
        "not a spotproof wheel",
    ),
    "a version from the index": ("spotproof==0.1.0", "a name or version from the package index"),
    "a name from the index": ("spotproof", "whoever registers the name decides what it installs"),
    "a missing wheel": ("dist/spotproof-0.1.0-py3-none-any.whl", "no such wheel file"),
    "no choice": ("", "say which spotproof the workflow installs with --spotproof"),
}


@pytest.mark.parametrize("given, says", REFUSED.values(), ids=REFUSED.keys())
def test_a_choice_nothing_could_verify_is_refused_in_one_line(
    given: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _acme(tmp_path)
    code, out, err = run_cli(
        capsys, "ci", "init", "--spotproof", given, "--project-dir", str(project)
    )
    assert (code, out) == (2, "")
    assert err.startswith("spotproof ci init: --spotproof "), err
    assert says in err and err.count("\n") == 1, err
    assert not (tmp_path / ".github").exists()


def test_a_wheel_of_another_distribution_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _acme(tmp_path / "repo")
    fake = tmp_path / "spotproof-0.1.0-py3-none-any.whl"
    fake.write_bytes(b"not a zip")
    code, _, err = run_cli(
        capsys, "ci", "init", "--spotproof", str(fake), "--project-dir", str(project)
    )
    assert code == 2
    assert err == f"spotproof ci init: --spotproof {fake}: not a wheel with spotproof's metadata\n"


def test_a_commit_with_an_eks_stack_is_refused_for_its_missing_schemas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _acme(tmp_path, "eks")
    given = f"git+https://github.com/acme/spotproof@{COMMIT}"
    code, _, err = run_cli(
        capsys, "ci", "init", "--spotproof", given, "--project-dir", str(project)
    )
    assert code == 2
    assert "carries no bundled Karpenter schemas, which the EKS stacks' plans need" in err
    assert err.count("\n") == 1


def test_a_commit_is_built_after_each_lock_with_nothing_else_fetched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    given = f"git+https://github.com/acme/spotproof@{COMMIT}"
    project = _acme(tmp_path)
    code, out, _ = run_cli(
        capsys, "ci", "init", "--stdout", "--spotproof", given, "--project-dir", str(project)
    )
    assert code == 0
    for job in yaml.safe_load(out)["jobs"].values():
        for step in job["steps"]:
            lines = [line for line in step.get("run", "").splitlines() if "pip install" in line]
            lines = [line for line in lines if "requirements.txt" not in line]
            for first, second in zip(lines[::2], lines[1::2], strict=True):
                assert "-m pip install --require-hashes -r " in first
                assert second.endswith(
                    f'-m pip install --no-deps --no-build-isolation "spotproof @ {given}"'
                )
    written = tmp_path / "spotproof.yml"
    written.write_text(out)
    assert [e["message"] for e in _actionlint(written)] == []

    # Its lock holds the build backend, by hash, and no line for spotproof itself.
    asked = []
    monkeypatch.setattr(
        lock,
        "resolve",
        lambda requirements: asked.append(requirements) or [Pin("x", "1", "a" * 64)],
    )
    text = lock.lock_text(artifact.parse(given, tmp_path), tmp_path, "gcp", "gcp")
    assert asked == [[f"spotproof[gcp] @ {given}", *lock.BUILD_REQUIRES]]
    assert _requirements(text) == [f"x==1 --hash=sha256:{'a' * 64}"]


def test_a_release_url_is_locked_with_its_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "https://example.com/releases/spotproof-0.2.0-py3-none-any.whl"
    choice = artifact.parse(f"{url}#sha256={'B' * 64}", tmp_path)
    asked = []
    monkeypatch.setattr(lock, "resolve", lambda requirements: asked.append(requirements) or [])
    text = lock.lock_text(choice, tmp_path, "stacks", "")
    assert asked == [[f"spotproof @ {url}#sha256={'b' * 64}", "pyyaml>=6"]]
    assert _requirements(text) == [f"spotproof @ {url} --hash=sha256:{'b' * 64}"]


def test_the_build_backend_locked_is_what_pyproject_declares() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    assert list(lock.BUILD_REQUIRES) == declared
    assert lock.RUNNER_PYTHON == workflow.PYTHON_VERSION
