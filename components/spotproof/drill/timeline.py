"""What happened during a reclaim, as timed marks: the one record a drill and a rehearsal share.

A real drill writes it from the Kubernetes API's watches, the trainer's log and the checkpoint
store (``drill.watch``); a local rehearsal from its harness's records (``drill.rehearsed``).
``drill.judge`` and ``drill.compare`` read only this, so one judgment serves both.

Times are seconds since the timeline's ``origin`` (a ``time.time()``), so a real drill's
marks, which come from clocks on several machines, are read on one scale: the API server's
timestamps for Kubernetes objects, the trainer's own lines for what it reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Mark(StrEnum):
    """What a timeline records, in the order a graceful reclaim passes through them."""

    RECLAIM = "reclaim requested"
    """The cloud accepted the drill's request (a rehearsal: the notice)."""
    NODE_NOTICE = "node notified"
    """The node shows the reclaim: a taint, ``spec.unschedulable``, a shutdown condition.
    ``detail``: ``how``."""
    DISRUPTION_TARGET = "DisruptionTarget"
    """The pod's ``DisruptionTarget`` condition became True. ``detail``: ``reason``."""
    POD_DELETING = "pod deleting"
    """The pod got a ``deletionTimestamp``. ``detail``: ``grace`` (seconds it was given)."""
    SIGTERM = "SIGTERM"
    """The trainer reported the signal. ``detail``: ``step``, ``grace_left``."""
    CHECKPOINT = "checkpoint committed"
    """A step's manifest exists. ``detail``: ``step``, ``kind`` (``final`` or ``periodic``),
    ``seconds`` (the save), ``since_signal`` (final saves)."""
    POD_ENDED = "pod ended"
    """The pod is Failed or Succeeded. ``detail``: ``phase``, ``exit_code`` (None when the
    node vanished first), ``conditions`` (the pod's condition types)."""
    NODE_GONE = "node gone"
    """The Node object was deleted (or the rehearsal's SIGKILL at the end of the notice)."""
    POD_CREATED = "replacement created"
    """A new pod of the workload exists (Pending)."""
    POD_SCHEDULED = "replacement scheduled"
    """``detail``: ``node``, ``pool`` (the node's pool label), ``pending`` (seconds)."""
    RESUMED = "resumed"
    """The trainer reported where it resumed. ``detail``: ``step``."""
    COUNTED = "failure counted"
    """The Job counted a failed pod against ``backoffLimit``. ``detail``: ``failed``."""
    DONE = "done"
    """The trainer completed. ``detail``: ``step``, ``digest``."""


@dataclass(frozen=True)
class Event:
    at: float
    """Seconds since the timeline's origin."""
    mark: Mark
    pod: str = ""
    node: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        where = " ".join(
            part
            for part in (self.pod and f"pod {self.pod}", self.node and f"node {self.node}")
            if part
        )
        shown = ", ".join(f"{k}={v}" for k, v in self.detail.items())
        return f"{self.at:8.2f} s  {self.mark.value:<22} {where}{'  ' + shown if shown else ''}"


@dataclass
class Timeline:
    origin: float
    """``time.time()`` that ``at`` counts from."""
    events: list[Event] = field(default_factory=list)

    def add(self, at: float, mark: Mark, *, pod: str = "", node: str = "", **detail: Any) -> Event:
        """Records ``mark`` at wall time ``at`` (a ``time.time()``)."""
        event = Event(at - self.origin, mark, pod, node, detail)
        self.events.append(event)
        return event

    def ordered(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.at)

    def of(self, mark: Mark) -> list[Event]:
        return [e for e in self.ordered() if e.mark is mark]

    def reclaims(self) -> Iterator[list[Event]]:
        """The events from each reclaim request up to the next one (or the end)."""
        current: list[Event] | None = None
        for event in self.ordered():
            if event.mark is Mark.RECLAIM:
                if current is not None:
                    yield current
                current = [event]
            elif current is not None:
                current.append(event)
        if current is not None:
            yield current

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"at": round(e.at, 3), "mark": e.mark.value, "pod": e.pod, "node": e.node, **e.detail}
            for e in self.ordered()
        ]
