"""checkov on the rendered manifests of every dev stack reports exactly the findings
docs/ci.md lists and justifies: a new one fails, and so does a listed one that went away."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from spotproof.plan.recording import manifests
from tests import venvs
from tests.support import plan_of, section

pytestmark = pytest.mark.processes

CHECKOV = "checkov==3.3.30"
"""In a venv of its own: it pins boto3, packaging and networkx below what spotproof uses."""


@pytest.fixture(scope="module")
def checkov(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Installed by uv (tests.venvs), uncompiled: checkov compiles what its one run imports;
    byte-compiling all of it and its dependencies at install would cost more than the run."""
    python = venvs.create(tmp_path_factory.mktemp("checkov") / "venv")
    venvs.install(python, CHECKOV)
    return python.parent / "checkov"


def _justified() -> set[str]:
    justified = section("docs/ci.md", "What checkov says about the rendered manifests")
    return set(re.findall(r"CKV_K8S_\d+", justified))


STACKS = ("gke-dev", "eks-dev", "aks-dev")


def _findings(checkov: Path, stacks: tuple[str, ...], out: Path) -> set[str]:
    """checkov's failed checks on what ``spotproof plan --stack STACK --out`` writes for each
    of ``stacks``, each in a folder of its own under ``out``, in one run of checkov over
    ``out`` (its start is most of a run's time; its counts are the three runs' sums)."""
    for stack in stacks:
        rendered = out / stack
        manifests.write(plan_of(stack).recording, rendered)
        assert any(rendered.iterdir())
    done = subprocess.run(
        [
            *(str(checkov), "-d", str(out), "--framework", "kubernetes"),
            *("-o", "json", "--skip-download"),  # passed checks too: each stack was read
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: findings, anything else: it failed
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    results = [report["results"] for report in reports if isinstance(report, dict)]
    checked = [c for r in results for c in (*r["passed_checks"], *r["failed_checks"])]
    assert {Path(c["file_path"]).parts[1] for c in checked} == set(stacks)
    return {check["check_id"] for r in results for check in r["failed_checks"]}


def test_checkov_reports_only_the_findings_the_docs_justify(checkov: Path, tmp_path: Path) -> None:
    found = _findings(checkov, STACKS, tmp_path)
    justified = _justified()
    assert found - justified == set(), "unjustified checkov findings"
    assert justified - found == set(), "docs/ci.md justifies findings checkov no longer reports"
