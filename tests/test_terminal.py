"""Colour on a terminal, plain text in pipes and logs, and never with NO_COLOR."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from spotproof import terminal
from spotproof.cli import DESCRIPTION
from tests.support import REPO, run_cli

pytestmark = pytest.mark.processes

CHECK = [sys.executable, "-m", "spotproof.cli", "check", "examples/", "--stack", "gke-dev"]


def _on_a_terminal(command: list[str], **env: str) -> str:
    """``command``'s standard output when it is a terminal (a pseudo-terminal here)."""
    leader, follower = pty.openpty()
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    done = subprocess.run(
        command,
        stdout=follower,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**environment, **env},
        check=False,
        timeout=300,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert done.returncode == 0, done.stderr
    return b"".join(chunks).decode()


def test_a_passing_check_is_green_on_a_terminal() -> None:
    out = _on_a_terminal(CHECK)
    assert "\x1b[32m0 findings: 4 object(s) in 2 file(s), against stack gke-dev\x1b[0m" in out


def test_no_color_keeps_a_terminal_plain() -> None:
    out = _on_a_terminal(CHECK, NO_COLOR="1")
    assert "\x1b[" not in out and "0 findings" in out


def test_a_pipe_gets_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    done = subprocess.run(CHECK, capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0 and "\x1b[" not in done.stdout


@pytest.mark.parametrize(
    ("line", "style"),
    [
        ("0 violations: schemas, policies all pass", terminal.GREEN),
        ("2 violation(s):", terminal.RED),
        ("  [gpu-limit] job: ...", terminal.RED),
        ("job.yaml:12: [scheduling-fit] Job ns/x fits no pool", terminal.RED),
        ("warning: spotproof:smokeTest: ...", terminal.YELLOW),
        ("PASSED: the interrupted run ended with the reference digest", terminal.GREEN),
    ],
)
def test_each_line_is_coloured_by_what_it_says(line: str, style: str) -> None:
    assert terminal.paint(line, enabled=True) == f"\x1b[{style}m{line}\x1b[0m"


def test_other_lines_stay_plain_even_on_a_terminal() -> None:
    assert terminal.paint("Scheduling:\n  Job x: fits l4-spot", enabled=True) == (
        "Scheduling:\n  Job x: fits l4-spot"
    )


def test_the_top_level_help_is_plain_sentences(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli(capsys, "--help")
    out = capsys.readouterr().out
    assert "``" not in out
    assert DESCRIPTION.endswith(".") and "spotproof check" not in DESCRIPTION
    assert "Exit codes: 0 when every check passes" in out
