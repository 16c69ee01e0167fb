"""What ``training()`` says on stderr, where ``kubectl logs --previous`` shows it after a
reclaim: a few lines, each an event worth reading, ``key=value`` or JSON, never a step,
never a secret."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.events import Events, parse
from tests.test_training_loop import SCRIPT, _finish, _start, _until_step

pytestmark = pytest.mark.processes


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def _lines(lines: list[str]) -> list[dict[str, str]]:
    """The runtime's own lines on stderr, as key -> value."""
    found = []
    for line in lines:
        if not line.startswith("stderr: spotproof "):
            continue
        words = shlex.split(line.removeprefix("stderr: spotproof "))
        found.append(dict(word.split("=", 1) for word in words))
    return found


def test_a_reclaimed_trainer_says_what_happened_in_a_few_lines(
    script: Path, tmp_path: Path
) -> None:
    url = f"file://{tmp_path}/ckpt"
    first = _start(script, url, STEP_SECONDS="0.05")
    _until_step(first, 15)
    first.send_signal(signal.SIGTERM)
    code, lines = _finish(first)
    assert code == exit_codes.PREEMPTED

    said = _lines(lines)
    assert [s["event"] for s in said] == [
        "resumed",
        "checkpoint",
        "preempted",
        "final_save",
        "exit",
    ]
    resumed, periodic, preempted, final, leaving = said
    assert resumed["msg"] == "no checkpoint to resume: training from step 0"
    assert periodic["msg"].startswith("periodic checkpoint of step 10 committed in ")
    stopped = int(preempted["step"])
    assert preempted["msg"].startswith(f"SIGTERM received: stopping at step {stopped} with ")
    assert 0 < float(preempted["grace_left"]) <= 30
    assert (final["step"], final["outcome"]) == (str(stopped), "committed")
    seconds = float(final["seconds"])
    # The line's seconds may be rounded once more than the message's: compare the numbers.
    head = f"final checkpoint of step {stopped} committed in "
    assert final["msg"].startswith(head) and final["msg"].endswith(" s")
    assert abs(float(final["msg"][len(head) : -2]) - seconds) <= 0.01
    assert leaving["code"] == "143" and "without counting a failure" in leaving["msg"]

    code, lines = _finish(_start(script, url))
    assert code == 0
    resumed, *_, done, completed = _lines(lines)
    assert resumed["msg"].startswith(
        f"resumed from the final checkpoint of step {stopped}, from the bucket in "
    )
    assert done["msg"] == "training completed at step 60"
    assert completed["msg"] == "exit 0: training completed"


def test_periodic_saves_are_said_at_most_once_a_minute(script: Path, tmp_path: Path) -> None:
    env = {"CHECKPOINT_INTERVAL": "1"}  # sixty saves in a few seconds
    code, lines = _finish(_start(script, f"file://{tmp_path}/ckpt", **env))
    assert code == 0
    periodic = [s for s in _lines(lines) if s.get("kind") == "periodic"]
    assert len(periodic) == 1 and periodic[0]["saves"] == "1"


def test_json_lines_are_asked_for_with_spotproof_log(script: Path, tmp_path: Path) -> None:
    code, lines = _finish(_start(script, f"file://{tmp_path}/ckpt", SPOTPROOF_LOG="json"))
    assert code == 0
    said = [json.loads(line.removeprefix("stderr: ")) for line in lines if "stderr: {" in line]
    assert [s["event"] for s in said][-2:] == ["done", "exit"]
    assert said[-1] == {"event": "exit", "code": 0, "msg": "exit 0: training completed"}


def test_a_store_whose_driver_is_missing_names_the_extra_to_install(tmp_path: Path) -> None:
    """As in an image with spotproof[train] but not spotproof[gcs]."""
    without_gcsfs = (
        "import sys; sys.modules['gcsfs'] = None; import runpy; "
        f"runpy.run_path({str(tmp_path / 'train.py')!r}, run_name='__main__')"
    )
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-c", without_gcsfs],
        capture_output=True,
        text=True,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "CHECKPOINT_URL": "gs://bucket/run",
            "CHECKPOINT_INTERVAL": "10",
            "TOTAL": "5",
        },
    )
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1
    assert "install spotproof[gcs] in the image" in done.stderr


def test_no_line_carries_a_credential(capsys: pytest.CaptureFixture[str]) -> None:
    events = Events({})
    events.emit("exit", code=2, reason="az://acct/c?sv=2024&sig=SECRETSIG: refused")
    err = capsys.readouterr().err
    assert "SECRETSIG" not in err and "sig=***" in err and err.count("\n") == 1


@pytest.mark.parametrize("log", ["text", "json"])
def test_every_line_the_runtime_writes_reads_back_as_its_event(
    log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log that mixes the trainer's own output and the runtime's lines (``kubectl logs``)
    reads as the events it holds, whichever format the lines were written in."""
    events = Events({"SPOTPROOF_LOG": log})
    events.emit("preempted", step=17, signal="SIGTERM", grace_left=29.5)
    events.emit("final_save", step=17, outcome="committed", seconds=0.25, grace_left=29.2)
    lines = ["epoch 3 loss 0.25", *capsys.readouterr().err.splitlines()]
    read = [e for e in map(parse, lines) if e is not None]
    assert [(e["event"], e["step"]) for e in read] == [("preempted", 17), ("final_save", 17)]
    assert read[0]["grace_left"] == 29.5 and read[1]["seconds"] == 0.25
