"""What ``spotproof drill`` tells a person: a table per reclaim, the plan's differences, the
timeline as text, JSON, markdown for a pull request, and the timeline picture."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spotproof.drill.compare import Difference
from spotproof.drill.judge import ReclaimOutcome, Verdict
from spotproof.drill.timeline import Mark, Timeline


@dataclass
class DrillReport:
    subject: str
    """``Job ml/spotproof-smoke on stack gke-dev``."""
    timeline: Timeline
    verdict: Verdict
    differences: list[Difference] = field(default_factory=list)
    reclaims: list[str] = field(default_factory=list)
    """What was asked of the cloud for each reclaim, in words."""
    notes: list[str] = field(default_factory=list)
    """What the drill could not judge, and why (no reference digest for a user's Job)."""

    @property
    def failures(self) -> list[str]:
        return [*self.verdict.failures, *(str(d) for d in self.differences if d.structural)]

    @property
    def passed(self) -> bool:
        return not self.failures


def _cell(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


COLUMNS = (
    ("#", lambda r: r.index),
    ("node", lambda r: r.node or "-"),
    ("ended by", lambda r: r.ending),
    ("SIGTERM", lambda r: _cell(r.sigterm_after, " s")),
    ("final ckpt", lambda r: _cell(r.final_step)),
    ("save", lambda r: _cell(r.final_save_seconds, " s")),
    ("node gone", lambda r: _cell(r.node_gone_after, " s")),
    ("pending", lambda r: _cell(r.pending_seconds, " s")),
    ("pool", lambda r: r.pool or "-"),
    ("resumed", lambda r: _cell(r.resumed_from)),
    ("lost", lambda r: _cell(r.steps_lost)),
)
"""The table's columns: times are seconds after the reclaim request was sent."""


def _rows(reclaims: list[ReclaimOutcome]) -> list[list[str]]:
    return [[str(get(r)) for _, get in COLUMNS] for r in reclaims]


def summary(report: DrillReport) -> str:
    headers = [name for name, _ in COLUMNS]
    rows = _rows(report.verdict.reclaims)
    widths = [max(len(c) for c in column) for column in zip(headers, *rows, strict=True)]
    lines = [f"drill of {report.subject}", *(f"  {what}" for what in report.reclaims), ""]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [headers, *rows]
    ]
    lines += ["", "timeline (seconds since the drill started):"]
    lines += [f"  {event}" for event in report.timeline.ordered()]
    lines.append("")
    if report.differences:
        lines.append("plan vs cluster:")
        lines += [
            f"  {'DIFFERS' if d.structural else 'timing '} {d.text}" for d in report.differences
        ]
    else:
        lines.append("plan vs cluster: as predicted")
    lines += [f"note: {note}" for note in report.notes]
    if report.verdict.digest:
        reference = report.verdict.reference_digest or "not computed"
        lines.append(f"digest {report.verdict.digest} (reference {reference})")
    if report.passed:
        lines.append("PASSED: every reclaim recovered as a routine event")
    else:
        lines += ["FAILED:", *(f"  - {failure}" for failure in report.failures)]
    return "\n".join(lines)


def to_json(report: DrillReport) -> dict[str, Any]:
    return {
        "subject": report.subject,
        "passed": report.passed,
        "failures": report.failures,
        "reclaims": [asdict(r) for r in report.verdict.reclaims],
        "requests": report.reclaims,
        "differences": [{"structural": d.structural, "text": d.text} for d in report.differences],
        "digest": report.verdict.digest,
        "reference_digest": report.verdict.reference_digest,
        "notes": report.notes,
        "timeline": report.timeline.to_json(),
    }


def markdown(report: DrillReport) -> str:
    """For a pull-request comment or a CI job summary."""
    verdict = "✅ passed" if report.passed else "❌ failed"
    headers = [name for name, _ in COLUMNS]
    lines = [
        f"### spotproof drill: {verdict}",
        "",
        f"Drill of {report.subject}.",
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(row) + " |" for row in _rows(report.verdict.reclaims)),
        "",
    ]
    if report.differences:
        lines += ["**Plan vs cluster**", ""]
        lines += [
            f"- {'**differs**' if d.structural else 'timing'}: {d.text}" for d in report.differences
        ]
        lines.append("")
    if report.failures:
        lines += ["**Failures**", "", *(f"- {f}" for f in report.failures), ""]
    lines += [f"_{note}_" for note in report.notes]
    return "\n".join(lines).rstrip() + "\n"


MARKERS = {
    Mark.RECLAIM: ("v", "orange", "reclaim requested"),
    Mark.SIGTERM: ("s", "purple", "SIGTERM reached the trainer"),
    Mark.NODE_GONE: ("X", "red", "node gone"),
    Mark.RESUMED: ("o", "green", "pod start / resume"),
}
STEP_MARKS = (Mark.RESUMED, Mark.CHECKPOINT, Mark.SIGTERM, Mark.DONE)


def render_timeline(report: DrillReport, path: Path) -> None:
    """Training progress against time, one line per pod, reclaims and resumes marked: the
    picture ``spotproof smoke`` draws, from a drill's marks."""
    import matplotlib  # noqa: PLC0415 - heavy, and only needed for the picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(10, 5), dpi=110)
    palette = plt.get_cmap("tab10")
    pods: dict[str, list[tuple[float, int]]] = {}
    for event in report.timeline.ordered():
        if event.mark in STEP_MARKS and event.detail.get("step") is not None:
            pods.setdefault(event.pod, []).append((event.at, int(event.detail["step"])))
    for index, points in enumerate(pods.values()):
        times, steps = zip(*points, strict=True)
        axes.plot(times, steps, color=palette(index % 10), linewidth=1.8)
    last_step = {pod: points[-1][1] for pod, points in pods.items()}
    for mark, (marker, color, label) in MARKERS.items():
        events = report.timeline.of(mark)
        times = [e.at for e in events]
        steps = [int(e.detail.get("step", last_step.get(e.pod, 0))) for e in events]
        axes.scatter(times, steps, marker=marker, color=color, s=70, zorder=4, label=label)
    verdict = "PASSED" if report.passed else "FAILED"
    title = f"spotproof drill of {report.subject}: {verdict}"
    save_progress_picture(figure, title, "seconds since the drill started", path)


def save_progress_picture(figure: Any, title: str, time_label: str, path: Path) -> None:
    """Titles, labels and writes a training-progress picture (steps against time), as
    ``spotproof smoke`` and ``spotproof drill`` both draw one."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    [axes] = figure.axes
    axes.set_title(title)
    axes.set_xlabel(time_label)
    axes.set_ylabel("training step")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
