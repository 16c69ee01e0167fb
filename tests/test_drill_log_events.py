"""A drill reads a trainer's log as ``kubectl logs`` gives it: the trainer's own output, the
runtime's lines for people on stderr, and, where the pod prints them, the JSON events,
marked once each."""

from __future__ import annotations

import pytest

from spotproof.drill.log_events import read
from spotproof.drill.timeline import Mark
from spotproof.runtime.events import Events


def _said(capsys: pytest.CaptureFixture[str], log: str) -> list[str]:
    """The lines ``training()`` writes on stderr for a reclaimed rank, in format ``log``."""
    events = Events({"SPOTPROOF_LOG": log})
    events.emit("resumed", step=40, checkpoint="final", tier="bucket", restore_seconds=0.5)
    events.emit("preempted", step=57, signal="SIGTERM", grace_left=29.5)
    events.emit("final_save", step=57, outcome="committed", seconds=1.25, grace_left=28.2)
    events.emit("exit", code=143)
    return ["epoch 3: loss 0.25", *capsys.readouterr().err.splitlines()]


@pytest.mark.parametrize("log", ["text", "json"])
def test_a_users_trainer_is_read_from_its_lines_on_stderr(
    capsys: pytest.CaptureFixture[str], log: str
) -> None:
    found = [e for e in map(read, _said(capsys, log)) if e is not None]
    assert [(e.mark, e.detail.get("step")) for e in found] == [
        (Mark.RESUMED, 40),
        (Mark.SIGTERM, 57),
        (Mark.CHECKPOINT, 57),
    ]
    final = found[-1].detail
    assert (final["kind"], final["since_signal"], final["seconds"]) == ("final", 1.25, 1.25)
    assert found[1].detail["grace_left"] == 29.5


def test_a_pod_that_prints_json_events_is_read_from_those_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The smoke trainer prints its events on stdout and its lines on stderr: the final save
    is marked once, from the JSON event."""
    json_final = '{"event": "checkpoint", "step": 57, "kind": "final", "seconds": 1.2}'
    lines = [json_final, *_said(capsys, "text")]
    first = read(lines[0])
    assert first is not None and first.from_json
    rest = [read(line, json_only=True) for line in lines[1:]]
    assert rest == [None] * len(rest)


def test_a_line_too_long_or_too_deep_is_no_event() -> None:
    assert read("spotproof event=done step=1 msg=" + "x" * 70_000) is None
    assert read('{"event": "done", "a": ' + "[" * 20 + "]" * 20 + "}") is None
    assert read("not an event") is None
