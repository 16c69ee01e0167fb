"""What a training process tells, and to whom: one stream of events, three readers.

Every moment that matters is one *event*, a name and its fields (``resumed``,
``checkpoint``, ``preempted``, ``final_save``, ``exit``...). :class:`Events` hands each one
to:

- **the process's metrics** (``runtime.metrics``), where ``METRICS_PORT`` serves them;
- **people**, on stderr, where ``kubectl logs --previous`` shows them after a reclaim: one
  line for each event worth reading (where the run resumed from and how long that took,
  SIGTERM and the grace left, the final save committed in T s or abandoned and why, the
  exit code and what it means), periodic saves at most once a minute (the line counts the
  saves since the last), never a step. ``key=value`` by default (``msg`` says it in
  words), one JSON object a line with ``SPOTPROOF_LOG=json``, nothing with ``off``. Every
  value is redacted (no URL credentials, keys or signatures: ``runtime.messages``) and
  bounded, so a line cannot carry a secret or flood a log;
- **programs**, where ``SPOTPROOF_EVENTS`` names a destination: every event, steps
  included, as one JSON line, written whole with one ``write`` so that lines of two
  threads (the upload's and the loop's) never interleave.

One lock orders the three, so a reader of the JSON lines and the metrics see the same
sequence.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.messages import redacted

PREFIX = "spotproof"
"""What every line on stderr starts with."""
PERIODIC_LINE_SECONDS = 60.0
"""The least time between two lines about periodic saves: a save every few steps must not
bury the lines that matter."""
MAX_VALUE = 300
"""Characters of one field's value on stderr, after redaction."""
EXIT_MEANINGS = {
    exit_codes.COMPLETED: "training completed",
    exit_codes.PREEMPTED: "stopped by SIGTERM after its final save; the Job runs it again "
    "without counting a failure",
    exit_codes.BAD_CONFIG: "bad configuration; the Job fails at once, a retry cannot help",
    exit_codes.STORAGE_UNAVAILABLE: "the checkpoint store could not be reached; a retry may",
    exit_codes.PEER_LOST: "a rank of the gang was lost; the gang restarts from its newest "
    "checkpoint",
}
"""What each exit code of ``runtime.exit_codes`` means, as the ``exit`` line says it."""


class Events:
    """The events of one process (``rank`` of its gang), to the readers ``env`` asks for;
    ``observe`` receives every event (the metrics recorder)."""

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        rank: int = 0,
        observe: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.rank = rank
        self.log = settings.SPOTPROOF_LOG.read(env)
        self.observe = observe
        destination = settings.SPOTPROOF_EVENTS.read(env)
        self._lock = threading.Lock()
        self._stream: TextIO | None = None
        self._descriptor: int | None = None
        if destination == "stdout":
            self._stream = sys.stdout
        elif destination:
            try:
                self._descriptor = os.open(
                    destination, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
                )
            except OSError as error:
                raise settings.ConfigError(
                    f"{settings.SPOTPROOF_EVENTS.name}={destination!r:.80}: cannot append to "
                    f"it ({error.strerror}); allowed: stdout, or a file this process may write"
                ) from None
        self._periodic_since_line = 0
        self._last_periodic_line = -PERIODIC_LINE_SECONDS

    @property
    def to_program(self) -> bool:
        """Whether a program reads every event (and so wants the ``done`` digest)."""
        return self._stream is not None or self._descriptor is not None

    def emit(self, event: str, *, printed: bool = True, **fields: Any) -> None:
        """One event to every reader; ``printed=False`` keeps it from the JSON lines (a
        step nobody asked to see)."""
        record = {"event": event, **fields}
        with self._lock:
            if self.observe is not None:
                self.observe(record)
            if printed:
                self._to_program(record)
            line = self._line(record)
            if line is not None and self.log != "off":
                print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def _to_program(self, record: Mapping[str, Any]) -> None:
        text = json.dumps(record, default=str) + "\n"
        if self._stream is not None:
            self._stream.write(text)
            self._stream.flush()
        elif self._descriptor is not None:
            os.write(self._descriptor, text.encode())

    def _line(self, record: Mapping[str, Any]) -> str | None:
        """The line on stderr for ``record``, or None where it is not worth one."""
        said = _said(record)
        if said is None:
            return None
        event = record["event"]
        if event in ("checkpoint", "checkpoint_held") and record.get("kind") != "final":
            self._periodic_since_line += 1
            now = time.monotonic()
            if now - self._last_periodic_line < PERIODIC_LINE_SECONDS:
                return None
            self._last_periodic_line = now
            said = {**said, "saves": self._periodic_since_line}
            self._periodic_since_line = 0
        fields = {"event": event, **({"rank": self.rank} if self.rank else {}), **said}
        if self.log == "json":
            return json.dumps({key: _bounded(value) for key, value in fields.items()})
        return f"{PREFIX} " + " ".join(f"{key}={_quoted(value)}" for key, value in fields.items())


def _said(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fields of ``record`` worth a line, ending in ``msg``, its meaning in words; None
    for an event no one reads in a log."""
    event, step = record["event"], record.get("step")
    if event == "resumed":
        if not step:
            return {"step": 0, "msg": "no checkpoint to resume: training from step 0"}
        kind, tier = record.get("checkpoint", "periodic"), record.get("tier") or "bucket"
        seconds = record.get("restore_seconds")
        took = f" in {seconds:.2f} s" if isinstance(seconds, int | float) else ""
        return {
            "step": step,
            "kind": kind,
            "tier": tier,
            "seconds": seconds,
            "msg": f"resumed from the {kind} checkpoint of step {step}, from the {tier}{took}",
        }
    if event in ("checkpoint", "checkpoint_held"):
        kind = record.get("kind", "periodic")
        if kind == "final":  # said by final_save on a reclaim, by done at the end
            return None
        where = "held in memory and on a peer" if event == "checkpoint_held" else "committed"
        seconds = record.get("since_signal", record.get("seconds"))
        took = f" in {seconds:.2f} s" if isinstance(seconds, int | float) else ""
        return {
            "step": step,
            "kind": kind,
            "seconds": seconds,
            "msg": f"{kind} checkpoint of step {step} {where}{took}",
        }
    if event == "checkpoint_refused":
        reason = record.get("reason") or "another writer committed that step first"
        return {"step": step, "reason": reason, "msg": f"checkpoint of step {step} not saved"}
    if event == "preempted":
        signal, left = record.get("signal", "SIGTERM"), record.get("grace_left")
        grace = f" with {left:.1f} s of grace left" if isinstance(left, int | float) else ""
        who = "stopped by a peer's notice" if signal == "a peer's" else f"{signal} received"
        return {
            "step": step,
            "signal": signal,
            "grace_left": left,
            "msg": f"{who}: stopping at step {step}{grace}",
        }
    if event == "final_save":
        outcome, seconds = record.get("outcome"), record.get("seconds")
        took = f" in {seconds:.2f} s" if isinstance(seconds, int | float) else ""
        words = {
            "committed": f"final checkpoint of step {step} committed{took}",
            "late": f"final checkpoint of step {step} abandoned: the grace would run out first; "
            "the newest committed checkpoint stands",
            "refused": f"final checkpoint of step {step} not committed",
            "unknown": f"final checkpoint of step {step}: commit unconfirmed; the next start "
            "reads what the store holds",
        }
        said = {
            "step": step,
            "outcome": outcome,
            "seconds": seconds,
            "reason": record.get("reason"),
        }
        kept = {key: value for key, value in said.items() if value is not None}
        return {**kept, "msg": words.get(str(outcome), str(outcome))}
    if event == "exit":
        code = record.get("code")
        meaning = EXIT_MEANINGS.get(code, "a crash") if isinstance(code, int) else "unknown"
        reason = {"reason": record["reason"]} if record.get("reason") else {}
        return {"code": code, **reason, "msg": f"exit {code}: {meaning}"}
    if event == "done":
        return {"step": step, "msg": f"training completed at step {step}"}
    if event in ("peer_lost", "skipped", "retention_failed", "awaiting_teardown"):
        words = {
            "peer_lost": "a rank of the gang is gone",
            "skipped": f"checkpoint of step {step} skipped",
            "retention_failed": f"old checkpoint of step {step} not deleted",
            "awaiting_teardown": "stopped with the gang; waiting to be torn down",
        }
        kept = {k: v for k, v in record.items() if k in ("step", "reason", "seconds")}
        return {**kept, "msg": words[event]}
    return None


def parse(line: str) -> dict[str, Any] | None:
    """An event read back from a line a process wrote: one of ``SPOTPROOF_EVENTS``'s JSON
    lines, or one of the lines on stderr, ``key=value`` or JSON (numbers read as numbers);
    None for any other line (the trainer's own output). One reader for every format, so a
    log that mixes them (``kubectl logs`` of a pod) reads as the events it holds."""
    text = line.strip()
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except ValueError:
            return None
        return found if isinstance(found, dict) and isinstance(found.get("event"), str) else None
    if not text.startswith(f"{PREFIX} event="):
        return None
    try:
        words = shlex.split(text.removeprefix(f"{PREFIX} "))
    except ValueError:
        return None
    found = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            return None
        found[key] = _typed(value)
    return found


def _typed(value: str) -> Any:
    """A ``key=value`` line's value as what it was written from: a number, or the text."""
    try:
        return (
            json.loads(value) if value[:1] in "-0123456789" or value in ("true", "false") else value
        )
    except ValueError:
        return value


def _bounded(value: Any) -> Any:
    if isinstance(value, bool | int | float) or value is None:
        return round(value, 3) if isinstance(value, float) else value
    text = redacted(str(value)).replace("\n", " ")
    return text if len(text) <= MAX_VALUE else f"{text[: MAX_VALUE - 3]}..."


def _quoted(value: Any) -> str:
    bounded = _bounded(value)
    if not isinstance(bounded, str):
        return json.dumps(bounded)
    if bounded and all(c.isalnum() or c in "-_./:@" for c in bounded):
        return bounded
    return json.dumps(bounded)
