"""What ``spotproof smoke`` tells a person: a table per interruption, JSON, and a timeline."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from spotproof.drill.report import save_progress_picture
from spotproof.smoke.reports.records import RESTORE_KILL, SmokeReport, describe
from spotproof.smoke.user.command import CommandReport


def to_json(report: SmokeReport) -> dict[str, Any]:
    body = asdict(report)
    body["passed"] = report.passed
    for record, interruption in zip(body["interruptions"], report.interruptions, strict=True):
        record["landed_in_upload"] = interruption.landed_in_upload
    return body


def summary(report: SmokeReport) -> str:
    lines = []
    if isinstance(report, CommandReport):
        who = "one process" if report.nodes == 1 else f"a gang of {report.nodes} ranks"
        lines.append(f"command            {report.command!r}, as {who}")
    lines += [
        f"reference digest   {report.reference_digest}",
        f"interrupted digest {report.digest}",
        f"reference run {report.reference_seconds:.1f} s, interrupted run "
        f"{report.interrupted_seconds:.1f} s over {len(report.attempts)} processes",
        "",
        f"{'#':>2}  {'kind':<12} {'step':>5} {'resumed':>7} {'lost':>5}  detail",
    ]
    for index, record in enumerate(report.interruptions, start=1):
        detail = describe(record).split("; ", 1)[1] if "; " in describe(record) else ""
        lines.append(
            f"{index:>2}  {record.kind:<12} {record.at_step:>5} {record.resumed_from!s:>7} "
            f"{record.steps_lost!s:>5}  {detail}"
        )
    lines.append("")
    if isinstance(report, CommandReport):
        if report.diagnosis:
            lines += ["what differs:", *(f"  - {line}" for line in report.diagnosis), ""]
        lines += [*time_spent_lines(report), ""]
    if report.drill_failures is not None:
        judged = "FAILED" if report.drill_failures else "PASSED"
        lines.append(f"judged as a drill (spotproof.drill.judge): {judged}")
        lines += [f"  - {failure}" for failure in report.drill_failures]
    if report.passed:
        lines.append("PASSED: the interrupted run ended with the reference digest")
    else:
        lines += ["FAILED:", *(f"  - {failure}" for failure in report.failures)]
    return "\n".join(lines)


def render_timeline(report: SmokeReport, path: Path) -> None:
    """Training progress against wall time, both runs, with interruptions and resumes marked."""
    import matplotlib  # noqa: PLC0415 - heavy, and only needed for the picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(10, 5), dpi=110)
    if report.reference and report.reference.steps:
        times, steps = zip(*report.reference.steps, strict=True)
        axes.plot(times, steps, color="0.6", linestyle="--", label="reference (uninterrupted)")
    palette = plt.get_cmap("tab10")
    for attempt in report.attempts:
        if not attempt.steps:
            continue
        times, steps = zip(*attempt.steps, strict=True)
        axes.plot(times, steps, color=palette(attempt.index % 10), linewidth=1.8)
        axes.scatter([times[0]], [steps[0]], marker="o", color="green", zorder=3)
    for record in report.interruptions:
        style = {
            "preemption": ("v", "orange"),
            "hard-kill": ("X", "red"),
            RESTORE_KILL: ("P", "purple"),
        }[record.kind]
        axes.scatter([record.at], [record.at_step], marker=style[0], color=style[1], s=80, zorder=4)
    axes.scatter([], [], marker="v", color="orange", label="preemption (SIGTERM, grace, SIGKILL)")
    axes.scatter([], [], marker="X", color="red", label="hard kill (SIGKILL)")
    if any(record.kind == RESTORE_KILL for record in report.interruptions):
        axes.scatter([], [], marker="P", color="purple", label="killed while restoring")
    axes.scatter([], [], marker="o", color="green", label="process start / resume")
    verdict = "PASSED" if report.passed else "FAILED"
    title = f"spotproof smoke on {report.config.store}: {verdict}"
    save_progress_picture(figure, title, "wall time (s)", path)


def time_spent_lines(report: CommandReport) -> list[str]:
    """Where a rehearsal of a user's command spent its time, for a person."""
    spent = report.time_spent
    if not spent:
        return []
    processes = int(spent.get("processes", 0))
    startups = spent.get("process_startups", 0.0)
    each = f", {startups / processes:.1f} s each" if processes else ""
    lines = [
        f"time spent: {spent.get('total', 0):.1f} s in all",
        f"  store emulator started   {spent.get('emulator', 0):6.1f} s",
        *(
            [f"  warm start (imports)     {spent['warm_start']:6.1f} s"]
            if "warm_start" in spent
            else []
        ),
        f"  reference run            {spent.get('reference_run', 0):6.1f} s",
        f"  interrupted run          {spent.get('interrupted_run', 0):6.1f} s",
    ]
    if "second_reference_run" in spent:
        lines.append(f"  second reference run     {spent['second_reference_run']:6.1f} s")
    return [
        *lines,
        f"  in those runs: process start-ups {startups:.1f} s ({processes} processes{each}),",
        f"  notices and graces waited out {spent.get('waiting_out_graces', 0):.1f} s",
    ]
