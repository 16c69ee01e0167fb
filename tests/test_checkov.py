"""checkov on the rendered manifests of every dev stack reports exactly the findings
docs/ci.md lists and justifies: a new one fails, and so does a listed one that went away."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spotproof.plan.recording import manifests
from tests.support import plan_of, section

pytestmark = pytest.mark.processes

CHECKOV = "checkov==3.3.30"
"""In a venv of its own: it pins boto3, packaging and networkx below what spotproof uses."""


@pytest.fixture(scope="module")
def checkov(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("checkov") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        # --no-compile: checkov compiles what its one run imports; byte-compiling all of it
        # and its dependencies at install cost most of the fixture's time.
        [
            str(venv / "bin" / "pip"),
            "install",
            "--quiet",
            "--no-compile",
            "--disable-pip-version-check",
            CHECKOV,
        ],
        check=True,
    )
    return venv / "bin" / "checkov"


def _justified() -> set[str]:
    justified = section("docs/ci.md", "What checkov says about the rendered manifests")
    return set(re.findall(r"CKV_K8S_\d+", justified))


def _findings(checkov: Path, stack: str, out: Path) -> set[str]:
    """checkov's failed checks on what ``spotproof plan --stack STACK --out`` writes."""
    rendered = out / stack
    manifests.write(plan_of(stack).recording, rendered)
    assert any(rendered.iterdir())
    done = subprocess.run(
        [
            *(str(checkov), "-d", str(rendered), "--framework", "kubernetes"),
            *("-o", "json", "--skip-download", "--quiet"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: findings, anything else: it failed
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    return {
        check["check_id"]
        for report in reports
        if isinstance(report, dict)
        for check in report["results"]["failed_checks"]
    }


def test_checkov_reports_only_the_findings_the_docs_justify(checkov: Path, tmp_path: Path) -> None:
    found = set().union(
        *(_findings(checkov, s, tmp_path) for s in ("gke-dev", "eks-dev", "aks-dev"))
    )
    justified = _justified()
    assert found - justified == set(), "unjustified checkov findings"
    assert justified - found == set(), "docs/ci.md justifies findings checkov no longer reports"
