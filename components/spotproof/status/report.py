"""``spotproof status`` as text (a compact table per workload) and as JSON.

The JSON is the same facts as the text, with times as RFC 3339 strings on the API server's
clock and durations in whole seconds, for scripts and dashboards' annotations.

Nearly everything shown comes from the cluster (names, reasons, a scheduler's or Kueue's
message), so every cell and line of the text goes through ``terminal.printable``: a
control character or a newline in a message is shown escaped, never obeyed by the
terminal or read as a line of the report. The JSON escapes them itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from spotproof.status.checkpoints import LastCheckpoint
from spotproof.status.pods import PodStatus
from spotproof.status.queueing import Queued
from spotproof.status.workloads import Workload
from spotproof.terminal import printable

COLUMNS = ("POD", "PHASE", "NODE", "POOL", "CAPACITY", "RESTARTS", "")


@dataclass(frozen=True)
class StatusReport:
    now: float
    """The API server's time when it was read."""
    server: str
    workloads: tuple[Workload, ...]
    stack: str | None = None


def stamp(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h07m``, ``2d04h``: two units at most, as a glance needs."""
    whole = int(seconds)
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{minutes}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{hours}h{minutes % 60:02d}m"
    return f"{days}d{hours % 24:02d}h"


# --- text --------------------------------------------------------------------------------


def _note(pod: PodStatus) -> str:
    if pod.reclaim is not None:
        said = [pod.reclaim.reason or "no DisruptionTarget"]
        if pod.reclaim.exit_code is not None:
            said.append(f"exit {pod.reclaim.exit_code}")
        return f"reclaimed: {', '.join(said)}"
    if pod.waiting is not None:
        why = ": ".join(s for s in (pod.waiting.reason, pod.waiting.message) if s)
        return f"waiting {duration(pod.waiting.seconds)}" + (f": {why}" if why else "")
    return ""


def _row(pod: PodStatus) -> tuple[str, ...]:
    where = pod.placement
    cells = (
        pod.name,
        pod.phase,
        where.node if where else "-",
        (where.pool or "-") if where else "-",
        where.capacity if where else "-",
        str(pod.restarts),
        _note(pod),
    )
    return tuple(printable(cell) for cell in cells)  # before their widths are measured


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
        for r in rows
    ]


def _checkpoint_line(found: LastCheckpoint) -> str:
    if found.error:
        return f"  checkpoint  not read: {found.error} ({found.url})"
    if found.step is None or found.age_seconds is None:
        return f"  checkpoint  none committed yet ({found.url})"
    return (
        f"  checkpoint  step {found.step}, committed {duration(found.age_seconds)} ago "
        f"({found.url})"
    )


def _queue_line(queue: Queued) -> str:
    said = [
        f"  queue       {queue.queue}" + (", suspended until admitted" if queue.suspended else "")
    ]
    for c in queue.conditions:
        why = ": ".join(s for s in (c.reason, c.message) if s)
        said.append(f"{c.type}={c.status}" + (f" ({why})" if why else ""))
    for check in queue.checks:
        said.append(
            f"check {check.name} {check.state}" + (f" ({check.message})" if check.message else "")
        )
    return "; ".join(said)


def _heading(workload: Workload) -> str:
    said = [f"{workload.kind} {workload.namespace}/{workload.name}"]
    if workload.target_class:
        said.append(f"target {workload.target_class}")
    said.append(workload.state)
    said.append(f"reclaims seen {workload.reclaims}")
    if workload.budget is not None:
        budget = workload.budget
        limit = "unset" if budget.limit is None else str(budget.limit)
        counted, allowed = budget.field.rsplit(".", 1)[-1], budget.limit_field.rsplit(".", 1)[-1]
        if budget.restarts is not None:
            said.append(f"restarts {budget.restarts}")
        said.append(f"{counted} {budget.counted} of {allowed} {limit}")
    return "  ".join(said)


def text(report: StatusReport) -> str:
    where = f"stack {report.stack}" if report.stack else report.server
    lines = [f"{where} at {stamp(report.now)}: {len(report.workloads)} workload(s)"]
    if not report.workloads:
        lines.append("  nothing labelled app.kubernetes.io/managed-by=spotproof runs here")
    for workload in report.workloads:
        lines += ["", _heading(workload)]
        if workload.queue is not None:
            lines.append(_queue_line(workload.queue))
        if workload.checkpoint is not None:
            lines.append(_checkpoint_line(workload.checkpoint))
        if workload.pods:
            lines += _table([COLUMNS, *(_row(p) for p in workload.pods)])
        else:
            lines.append("  no pods")
    return "\n".join(printable(line).rstrip() for line in lines) + "\n"


# --- json --------------------------------------------------------------------------------


def _pod_json(pod: PodStatus) -> dict[str, Any]:
    found = asdict(pod)
    found["created"] = stamp(pod.created)
    if pod.waiting is not None:
        found["waiting"]["seconds"] = int(pod.waiting.seconds)
    if pod.reclaim is not None:
        found["reclaim"]["at"] = stamp(pod.reclaim.at)
    return found


def _workload_json(workload: Workload) -> dict[str, Any]:
    found = asdict(workload)
    found["pods"] = [_pod_json(p) for p in workload.pods]
    found["reclaims"] = workload.reclaims
    if workload.checkpoint is not None:
        point = found["checkpoint"]
        point["committed_at"] = stamp(workload.checkpoint.committed_at)
        if workload.checkpoint.age_seconds is not None:
            point["age_seconds"] = int(workload.checkpoint.age_seconds)
    return found


def to_json(report: StatusReport) -> dict[str, Any]:
    return {
        "stack": report.stack,
        "server": report.server,
        "now": stamp(report.now),
        "workloads": [_workload_json(w) for w in report.workloads],
    }
