"""What a trainer's log says, as the marks of a drill's timeline.

``kubectl logs`` of a trainer's pod mixes three kinds of line: the trainer's own output,
the runtime's lines for people on stderr (``spotproof event=... msg=...``, or JSON with
``SPOTPROOF_LOG=json``), and, where ``SPOTPROOF_EVENTS=stdout`` asks (the smoke trainer
does), every event as a JSON line. A drill reads the events out of either, with the
runtime's own reader (``runtime.events.parse``) and within bounds: a line of the log is
someone's output, not a document to trust.

The two streams say a final save differently: the JSON events as a ``checkpoint`` of kind
``final``, the lines for people as ``final_save`` (they leave the ``checkpoint`` line to it).
A pod whose log has JSON events is read from those alone, so nothing is marked twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof import bounded_json
from spotproof.drill.timeline import Mark
from spotproof.runtime.events import parse

LOG_MARKS = dict(
    preempted=Mark.SIGTERM, checkpoint=Mark.CHECKPOINT, resumed=Mark.RESUMED, done=Mark.DONE
)
LOG_FIELDS = ("step", "grace_left", "signal", "seconds", "kind", "since_signal", "digest")
"""The fields of the trainer's events a mark keeps (``runtime.events``)."""
LOG_LINE = bounded_json.Limits(bytes=64 * 1024, depth=8)
"""A trainer's event is one flat JSON object on a line; anything larger or deeper is not."""


@dataclass(frozen=True)
class LogEvent:
    """One event read off a log line: the mark it makes and what the mark keeps."""

    mark: Mark
    detail: dict[str, Any]
    from_json: bool
    """Read from the JSON events (``SPOTPROOF_EVENTS``), not from a line for people."""


def read(text: str, *, json_only: bool = False) -> LogEvent | None:
    """The event ``text`` holds, if it is one a drill marks; with ``json_only``, only from
    a JSON event line (the pod's log has them: see the module)."""
    if text.lstrip().startswith("{"):
        try:
            record = bounded_json.loads(text, "a log line", LOG_LINE)
        except ValueError:  # not an event of the trainer's (JsonLimitError included)
            return None
        from_json = isinstance(record, dict) and "msg" not in record
    elif json_only or len(text) > LOG_LINE.bytes:
        return None
    else:
        record, from_json = parse(text), False
    if not isinstance(record, dict) or (json_only and not from_json):
        return None
    return _marked(record, from_json)


def _marked(record: Mapping[str, Any], from_json: bool) -> LogEvent | None:
    event = record.get("event")
    if event == "final_save" and not from_json:
        if record.get("outcome") != "committed":
            return None
        seconds = record.get("seconds")
        detail = {"step": record.get("step"), "kind": "final"}
        if seconds is not None:
            detail.update(seconds=seconds, since_signal=seconds)
        return LogEvent(Mark.CHECKPOINT, detail, from_json)
    mark = LOG_MARKS.get(str(event))
    if mark is None:
        return None
    detail = {k: record[k] for k in LOG_FIELDS if k in record}
    if mark is Mark.CHECKPOINT:
        detail.setdefault("kind", "periodic")
    return LogEvent(mark, detail, from_json)
