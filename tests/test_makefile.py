"""The README's two commands set up what they need the way a fresh machine should: the
CPU build of torch where PyPI's is the CUDA one, before anything else asks for torch."""

from __future__ import annotations

import platform
import subprocess

import pytest

from tests.support import REPO


def _planned(target: str) -> list[str]:
    """The commands ``make`` would run for ``target`` from scratch, without running them."""
    done = subprocess.run(
        ["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize("stamp", [".venv/.demo-stamp", ".venv/.installed-stamp"])
@pytest.mark.skipif(
    (platform.system(), platform.machine()) != ("Linux", "x86_64"),
    reason="elsewhere PyPI's torch is the CPU build already",
)
def test_torch_comes_from_the_cpu_index_first_and_alone(stamp: str) -> None:
    commands = _planned(stamp)
    installs = [c for c in commands if "/pip install" in c]
    first = installs[0]
    assert "--no-deps torch --extra-index-url https://download.pytorch.org/whl/cpu" in first
    assert "-c constraints.txt" in first  # the tested version, not the newest
    assert all("download.pytorch.org" not in c for c in installs[1:])
