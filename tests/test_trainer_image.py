"""The trainer image's Dockerfile, checked without a Docker engine: hadolint, and the
contract with the smoke Job (user, entrypoint) and with the tested dependency set."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
from pathlib import Path

from spotproof import __version__
from spotproof.fleet import SmokeTest
from tests.support import REPO, plan_of

DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            logical.append(pending.strip())
            pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1]) for text in logical]


def _one(instruction: str) -> str:
    [arguments] = [args for name, args in _instructions() if name == instruction]
    return arguments


def test_hadolint_finds_nothing() -> None:
    hadolint = Path(sys.prefix) / "bin" / "hadolint"
    done = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "")


def test_the_base_is_pytorchs_cuda_image_pinned_by_tag_and_digest() -> None:
    base = _one("FROM")
    match = re.fullmatch(
        r"pytorch/pytorch:(\S+)-cuda(\S+)-cudnn\d+-runtime@sha256:[0-9a-f]{64}", base
    )
    assert match, base
    torch_pin = re.search(r"^torch==(\S+)$", (REPO / "constraints.txt").read_text(), re.M)
    assert torch_pin and match.group(1) == torch_pin.group(1)  # the torch the tests ran


def test_it_runs_as_the_non_root_user_the_job_requires() -> None:
    job = plan_of("gke-dev").recording.one("kubernetes:batch/v1:Job", "gke-dev-smoke-job")
    security = job.inputs["spec"]["template"]["spec"]["securityContext"]
    user, _, group = _one("USER").partition(":")
    assert int(user) == int(security["runAsUser"]) != 0
    assert group and int(group) != 0


def test_the_entrypoint_is_the_trainer() -> None:
    assert shlex.split(_one("ENTRYPOINT").strip("[]").replace(",", " ")) == [
        "python",
        "-m",
        "spotproof.smoke.train",
    ]


def test_installs_are_constrained_and_checked() -> None:
    [run] = [args for name, args in _instructions() if name == "RUN"]
    assert "--constraint constraints.txt" in run
    assert "pip check" in run


def test_everything_copied_is_in_the_repo_and_admitted_by_dockerignore() -> None:
    rules = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def admitted(path: str) -> bool:
        keep = True
        for rule in rules:
            negated, pattern = rule.startswith("!"), rule.removeprefix("!").rstrip("/")
            if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
                keep = negated
        return keep

    copied = [
        source for name, args in _instructions() if name == "COPY" for source in args.split()[:-1]
    ]
    assert copied
    for source in copied:
        assert (REPO / source).exists(), source
        assert admitted(source), source


def test_the_default_smoke_image_is_tagged_with_this_version() -> None:
    assert SmokeTest.image.rsplit(":", 1)[1] == __version__
