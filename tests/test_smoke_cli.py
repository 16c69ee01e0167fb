"""``spotproof smoke`` as a person runs it: a report, JSON, a timeline picture, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import run_cli

pytestmark = pytest.mark.processes


def _smoke(*argv: str) -> subprocess.CompletedProcess[str]:
    """``spotproof smoke`` as a person starts it, its output piped."""
    return subprocess.run(
        [sys.executable, "-m", "spotproof.cli", "smoke", "--store", "file", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


@pytest.fixture(scope="module")
def smoked(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One rehearsal with a preemption and a hard kill, read by the tests below."""
    report_path = tmp_path_factory.mktemp("smoke") / "smoke.json"
    done = _smoke(
        *("--preemptions", "1", "--hard-kills", "1", "--steps", "100", "--interval", "20"),
        *("--json", str(report_path)),
    )
    return done, report_path


def test_smoke_passes_and_writes_report_json_and_timeline(
    smoked: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, report_path = smoked
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED: the interrupted run ended with the reference digest" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["passed"] is True
    assert report["digest"] == report["reference_digest"]
    kinds = sorted(i["kind"] for i in report["interruptions"])
    assert kinds == ["hard-kill", "preemption"]
    picture = report_path.with_suffix(".png")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "\x1b[" not in done.stdout  # piped: no colour


def _progress_order(stdout: str) -> list[str]:
    """The interrupted run's progress lines, each cut to what it announces."""
    lines = stdout.split("interrupted run:", 1)[1].splitlines()
    return [
        "attempt"
        if line.startswith("  attempt")
        else "training"
        if line.startswith("  training")
        else "interruption"
        if line.startswith(("  preemption", "  hard-kill"))
        else "other"
        for line in lines
        if line.startswith("  ")
    ]


def test_smoke_progress_says_each_event_before_the_attempt_it_causes(
    smoked: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = smoked
    assert done.returncode == 0, done.stdout + done.stderr
    order = [kind for kind in _progress_order(done.stdout) if kind != "other"]
    assert order == ["attempt", "training", *["interruption", "attempt", "training"] * 2], (
        done.stdout
    )
    assert "  attempt 0: trains from scratch" in done.stdout
    assert "  attempt 1: trains from step " in done.stdout


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--store", "nfs"], "invalid choice: 'nfs'"),
        (["--preemptions", "-1"], "out of range; allowed: 0..20"),
        (["--steps", "50", "--interval", "20"], "at least 4 x the checkpoint interval (80)"),
    ],
)
def test_bad_smoke_arguments_exit_2_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code, _, err = run_cli(capsys, "smoke", *argv)
    except SystemExit as exit_info:
        code, err = int(exit_info.code or 0), capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says in err
