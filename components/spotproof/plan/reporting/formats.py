"""A plan's findings in the four forms ``spotproof plan --format`` offers.

- ``text``: the preview-like tree and per-workload lines, for a terminal;
- ``json``: the machine-readable report (``resources``, ``violations``, ``scheduling``,
  ``scale_up``, ``preemption``), the same object ``--json FILE`` writes;
- ``markdown``: tables for a pull-request comment or ``$GITHUB_STEP_SUMMARY``;
- ``github``: workflow commands that annotate the stack file's line each finding came
  from. Syntax and escaping: https://docs.github.com/en/actions/reference/workflows-and-actions/workflow-commands
  ("Setting an error message": ``::error file={name},line={line},title={title}::{message}``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotproof.plan.config.sources import ConfigSources, Location
from spotproof.plan.recording import tree
from spotproof.plan.recording.recorder import Secret
from spotproof.plan.reporting import checkpointing
from spotproof.scheduling import work_matrix

if TYPE_CHECKING:
    from spotproof.plan.result import PlanResult


def protection(protect: bool | None) -> str:
    """Whether ``pulumi destroy`` may take the stack's cluster and bucket."""
    if protect is None:
        return "as each component says (its protect argument: on by default)"
    if protect:
        return "protected (cluster and bucket refuse deletion)"
    return (
        "DISPOSABLE (spotproof:disposable: true): pulumi destroy deletes the cluster "
        "and the bucket with every checkpoint in it"
    )


def text(result: PlanResult) -> str:
    recording = result.recording
    lines = [
        f"Previewing stack {result.facts.stack} offline (no cloud calls)",
        "",
        tree.render(recording),
        "",
        f"Resources: {len(recording.resources) + 1} to create",
        f"Protection: {protection(result.facts.protect)}",
        "",
        "Scheduling:",
    ]
    for workload, pools in result.placements().items():
        lines.append(f"  {workload}: fits {', '.join(pools) or 'NO POOL'}")
    lines += ["", "Scale-up (would a node be created for it?):"]
    for outcome in result.outcomes:
        first, *rest = outcome.scaling()
        lines.append(f"  {outcome.workload.label}: {first}")
        lines += [f"    {line}" for line in rest]
    laddered = [o for o in result.outcomes if o.ladder]
    if laddered:
        lines += ["", "Compute class (GKE's order of pools, and what each does):"]
        for outcome in laddered:
            lines.append(f"  {outcome.workload.label}:")
            lines += [f"    {line}" for line in outcome.ladder]
    advised = _advice_lines(result)
    if advised:
        lines += ["", "Capacity by kind of work (decision matrix):"]
        lines += [f"  {label}: {text}" for label, text in advised]
    lines += ["", "Preemption path (reclaim notice to node gone):"]
    paths = _path_lines(result)
    lines += [f"  {label} on {line}" for label, line in paths]
    if not paths:
        lines.append("  no workload runs on reclaimable capacity")
    lines += checkpointing.text(result.intervals)
    return "\n".join(lines)


def verdict(result: PlanResult) -> str:
    """The closing lines: checks skipped, warnings, then every violation or the checks
    that passed."""
    skipped = [f"skipped: {reason}" for reason in result.skipped]
    warned = [f"warning: {w.key}: {w.message}" for w in result.warnings]
    return "\n".join([*skipped, *warned, _violations(result)])


def _violations(result: PlanResult) -> str:
    if result.violations:
        lines = [f"{len(result.violations)} violation(s):"]
        lines += [f"  [{v.policy}] {v.resource}: {v.message}" for v in result.violations]
        return "\n".join(lines)
    if result.skipped:
        return f"0 violations in the checks that ran ({len(result.skipped)} skipped, above)"
    return (
        "0 violations: schemas, policies, scheduling, scale-up, preemption paths and "
        "bucket lifecycles all pass"
    )


def as_json(result: PlanResult) -> dict[str, Any]:
    """``parent`` is the parent's name (the stack's for top-level resources); names repeat
    across types, so ``urn`` and ``parent_urn`` identify resources exactly. Secret values
    are written as ``[secret]`` (see :func:`redact`)."""
    recording = result.recording
    names = {r.urn: r.name for r in recording.resources}
    stack_name = f"{recording.project}-{recording.stack}"
    return {
        "stack": result.facts.stack,
        "disposable": result.facts.protect is False,
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "parent": names.get(r.parent or "", stack_name),
                "inputs": r.inputs,
                "urn": r.urn,
                "parent_urn": r.parent,
            }
            for r in recording.resources
        ],
        "violations": [asdict(v) for v in result.violations],
        "skipped": result.skipped,
        "warnings": [asdict(w) for w in result.warnings],
        "scheduling": result.placements(),
        "scale_up": {
            outcome.workload.label: [asdict(verdict) for verdict in outcome.verdicts]
            for outcome in result.outcomes
        },
        "preemption": {
            outcome.workload.label: [
                {**asdict(path), "line": path.line(), "problems": path.problems}
                for path in outcome.paths
            ]
            for outcome in result.outcomes
            if outcome.paths
        },
        "capacity_advice": dict(_advice_lines(result)),
        "compute_classes": {o.workload.label: list(o.ladder) for o in result.outcomes if o.ladder},
        "intervals": {a.workload: checkpointing.as_json(a) for a in result.intervals},
    }


def redact(value: Any) -> str:
    """``json.dumps`` default: secrets never leave the plan as their value."""
    if isinstance(value, Secret):
        return "[secret]"
    raise TypeError(f"cannot serialise {type(value).__name__}")


def markdown(result: PlanResult) -> str:
    recording = result.recording
    count = len(result.violations)
    status = "✅ 0 violations" if not count else f"❌ {count} violation(s)"
    lines = [
        f"### `{result.facts.stack}`: {status}",
        "",
        f"Protection: {protection(result.facts.protect)}",
        "",
    ]
    lines += [f"> ⚠️ skipped: {cell(reason)}" for reason in result.skipped]
    lines += [f"> ⚠️ warning: `{w.key}`: {cell(w.message)}" for w in result.warnings]
    lines += [""] if result.skipped or result.warnings else []
    if result.violations:
        lines += _table(
            ("Rule", "Resource", "Finding"),
            ((v.policy, f"`{v.resource}`", v.message) for v in result.violations),
        )
    types = Counter(r.type for r in recording.resources)
    lines += [
        f"<details><summary>{len(recording.resources) + 1} resources to create</summary>",
        "",
        *_table(("Type", "Count"), ((f"`{t}`", str(n)) for t, n in sorted(types.items()))),
        "</details>",
        "",
        "**Scheduling**: which pools each workload fits",
        "",
    ]
    placements = result.placements()
    lines += _table(
        ("Workload", "Fits"),
        ((w, ", ".join(pools) or "**no pool**") for w, pools in placements.items()),
    )
    lines += ["**Scale-up**: would a node be created for it?", ""]
    lines += _table(
        ("Workload", "Pool", "Scales", "How, or why not"),
        (
            (o.workload.label, v.pool, "yes" if v.scales else "**no**", v.reason())
            for o in result.outcomes
            for v in o.verdicts
        ),
    )
    laddered = [o for o in result.outcomes if o.ladder]
    if laddered:
        lines += ["**Compute class**: GKE's order of pools, and what each does", ""]
        lines += _table(
            ("Workload", "Compute class"),
            ((o.workload.label, "<br>".join(o.ladder)) for o in laddered),
        )
    lines += ["**Preemption path**: reclaim notice to node gone", ""]
    lines += _table(
        ("Workload", "Capacity", "SIGTERM at", "Grace", "Node gone", "Steps"),
        (
            (
                o.workload.label,
                f"{p.capacity} ({', '.join(p.pools)})",
                "**never**" if p.sigterm_at is None else f"{p.sigterm_at:g} s",
                f"{p.usable_grace:g} s of {p.declared_grace} s",
                f"{p.notice_seconds} s",
                "; ".join(p.steps),
            )
            for o in result.outcomes
            for p in o.paths
        ),
    )
    if result.intervals:
        lines += ["**Checkpoint interval** (goodput model)", ""]
        lines += _table(
            checkpointing.MARKDOWN_HEADER, checkpointing.markdown_rows(result.intervals)
        )
    return "\n".join(lines)


def markdown_bad_input(stack: str, error: str) -> str:
    return f"### `{stack}`: ⛔ bad input\n\n> {cell(error)}\n"


def markdown_summary(sections: list[tuple[str, int, str]]) -> str:
    """All stacks' sections under one heading: (stack, exit code, its markdown)."""
    failed = [stack for stack, code, _ in sections if code]
    verdict = f"{len(failed)} failing ({', '.join(failed)})" if failed else "all pass"
    return "\n".join(
        [f"## spotproof plan: {len(sections)} stack(s), {verdict}", "", *(m for *_, m in sections)]
    )


def annotations(result: PlanResult, sources: ConfigSources, root: Path) -> list[str]:
    """One ``::error`` per violation, at the line of the config the resource came from,
    and one ``::warning`` per warning, at its key's line."""
    warned = [
        command(
            "warning",
            f"{w.key}: {w.message}",
            sources.locate(w.key),
            root,
            title=f"spotproof plan {result.facts.stack}: warning",
        )
        for w in result.warnings
    ]
    return warned + [
        command(
            "error",
            f"[{v.policy}] {v.resource}: {v.message}",
            sources.locate_resource(v.resource),
            root,
            title=f"spotproof plan {result.facts.stack}: {v.policy}",
        )
        for v in result.violations
    ]


def command(kind: str, message: str, where: Location, root: Path, title: str) -> str:
    """A GitHub workflow command (``error``, ``warning``, ``notice``) for one finding."""
    try:
        name = where.path.resolve().relative_to(root.resolve())
    except ValueError:
        name = where.path
    properties = ",".join(
        f"{key}={_escape_property(str(value))}"
        for key, value in (("file", name.as_posix()), ("line", where.line), ("title", title))
    )
    return f"::{kind} {properties}::{_escape_data(message)}"


def github_root() -> Path:
    """Paths in annotations are relative to the checkout (``$GITHUB_WORKSPACE``)."""
    return Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd())


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _advice_lines(result: PlanResult) -> list[tuple[str, str]]:
    found = []
    for outcome in result.outcomes:
        workload = outcome.workload
        targets = workload.targets
        text = work_matrix.advice(
            workload.pod_labels.get(work_matrix.WORK_LABEL), targets[0] if targets else None
        )
        if text:
            found.append((workload.label, text))
    return found


def _path_lines(result: PlanResult) -> list[tuple[str, str]]:
    return [
        (outcome.workload.label, line)
        for outcome in result.outcomes
        for line in [*(path.line() for path in outcome.paths), *outcome.bounds]
    ]


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    body = [f"| {' | '.join(cell(c) for c in row)} |" for row in rows]
    if not body:
        return ["_none_", ""]
    return [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *body, ""]


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
