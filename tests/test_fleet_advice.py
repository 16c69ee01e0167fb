"""A smoke Job with more state than its final save can commit inside the grace period is
a warning, at the measured commit rate: the plan passes, and says where and why."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from spotproof.catalog import FINAL_SAVE_MIB_PER_SECOND, GRACE_PERIOD_SECONDS, Cloud
from spotproof.fleet import SpecError, advice, fleet_from_config
from tests.support import run_cli, stack_config

GKE_GRACE = GRACE_PERIOD_SECONDS[Cloud.GKE]
TOO_BIG = math.ceil(FINAL_SAVE_MIB_PER_SECOND * GKE_GRACE) + 64


def _gke_with_model_mb(model_mb: int) -> dict:
    config = stack_config("gke-dev")
    config["spotproof:smokeTest"] = {**config["spotproof:smokeTest"], "modelMb": model_mb}
    return config


def test_state_that_commits_within_the_grace_period_raises_no_warning() -> None:
    fits = math.floor(FINAL_SAVE_MIB_PER_SECOND * GKE_GRACE)
    assert advice.warnings(fleet_from_config("gke-dev", _gke_with_model_mb(fits))) == []


def test_state_too_large_to_commit_in_gke_grace_is_named_with_the_rate() -> None:
    [warning] = advice.warnings(fleet_from_config("gke-dev", _gke_with_model_mb(TOO_BIG)))
    assert warning.key == "spotproof:smokeTest.modelMb"
    assert f"{TOO_BIG} MiB of state" in warning.message
    assert f"{FINAL_SAVE_MIB_PER_SECOND} MiB/s" in warning.message
    assert f"the {GKE_GRACE} s grace period on GKE" in warning.message


def test_the_longer_eks_grace_period_fits_more_state() -> None:
    config = stack_config("eks-dev")
    config["spotproof:smokeTest"] = {**config.get("spotproof:smokeTest", {}), "modelMb": TOO_BIG}
    assert advice.warnings(fleet_from_config("eks-dev", config)) == []


def test_plan_passes_and_prints_the_warning(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(_gke_with_model_mb(TOO_BIG))
    code, out, _ = run_cli(
        capsys, "plan", "--stack", "gke-test", "--json", str(root / "plan.json"),
        "--project-dir", str(root),
    )  # fmt: skip
    assert code == 0
    assert "warning: spotproof:smokeTest.modelMb: " in out
    [warning] = json.loads((root / "plan.json").read_text())["warnings"]
    assert warning["key"] == "spotproof:smokeTest.modelMb"


def test_github_format_puts_the_warning_on_the_model_mb_line(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(_gke_with_model_mb(TOO_BIG))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GITHUB_WORKSPACE", str(root))
        code, out, _ = run_cli(
            capsys, "plan", "--stack", "gke-test", "--format", "github", "--project-dir", str(root)
        )
    stack_file = root / "stacks" / "Pulumi.gke-test.yaml"
    line = next(
        n for n, text in enumerate(stack_file.read_text().splitlines(), 1) if "modelMb" in text
    )
    assert code == 0
    assert f"::warning file=stacks/Pulumi.gke-test.yaml,line={line}," in out


@pytest.mark.parametrize("stack", ["gke-dev", "eks-dev", "aks-dev"])
def test_the_shipped_dev_stacks_raise_no_warning(stack: str) -> None:
    assert advice.warnings(fleet_from_config(stack, stack_config(stack))) == []


@pytest.mark.parametrize("stack", ["gke-prod", "eks-prod", "aks-prod"])
def test_a_production_stack_is_told_to_pin_its_image_by_digest(stack: str) -> None:
    # The shipped prod stacks name spotproof's image by tag: a user's build gives the digest.
    warned = advice.warnings(fleet_from_config(stack, stack_config(stack)))
    [pin] = [w for w in warned if w.key == "spotproof:smokeTest.image"]
    assert "pin the digest" in pin.message
    # eks-prod also names subnets of its own, which the plan cannot see.
    assert {w.key for w in warned} - {pin.key} <= {"spotproof:network.subnets"}


def test_an_image_pinned_by_digest_is_not_warned_about() -> None:
    config = stack_config("gke-prod")
    digest = "sha256:" + "ab" * 32
    config["spotproof:smokeTest"]["image"] = f"ghcr.io/acme/trainer:1.4.2@{digest}"
    assert advice.warnings(fleet_from_config("gke-prod", config)) == []


@pytest.mark.parametrize(
    ("image", "says"),
    [
        ("ghcr.io/acme/trainer", "pulls whatever 'latest' is"),
        ("ghcr.io/acme/trainer:latest", "pulls whatever 'latest' is"),
        ("ghcr.io/acme/Trainer:1.0", "not an image reference"),
        ("ghcr.io/acme/trainer@sha256:abc", "not an image reference"),
    ],
)
def test_an_image_that_does_not_say_what_runs_is_refused(image: str, says: str) -> None:
    config = stack_config("gke-dev")
    config["spotproof:smokeTest"]["image"] = image
    with pytest.raises(SpecError, match=says):
        fleet_from_config("gke-dev", config)
