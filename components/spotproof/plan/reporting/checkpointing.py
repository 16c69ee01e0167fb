"""The plan's checkpoint-interval advice (``plan.simulation.intervals``) in words: text
lines, a Markdown table, the JSON report's numbers, and the warning for an interval far
from the recommendation. Per training workload: what it is judged on, the interval to save
at and its goodput, what a useful GPU-hour costs, and what the numbers assume."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from spotproof.fleet.advice import SpecWarning
from spotproof.plan.reporting import recovery
from spotproof.plan.simulation.intervals import IntervalAdvice, is_far

HEADING = "Checkpoint interval (goodput model):"


def _where(advice: IntervalAdvice) -> str:
    """What it is judged on, and what its grace holds."""
    state = f"{advice.state_mib:g} MiB per pod" if advice.state_mib is not None else "its state"
    gang = f" x {advice.pods} pods" if advice.pods > 1 else ""
    head = f"{state}{gang} on {advice.capacity}"
    if not advice.reclaims_per_node_hour:
        return f"{head}, not reclaimed"
    if advice.grace_seconds is None:
        return f"{head}, never gets SIGTERM: every reclaim loses the work since the last save"
    fits = f"a final save commits up to {advice.largest_state_mib:.0f} MiB"
    grace = f"grace {advice.grace_seconds:g} s"
    if advice.grace_limit:
        grace += f" ({advice.grace_limit})"
    if advice.state_mib is not None and not advice.final_save_fits:
        return (
            f"{head}; {grace}, in which {fits}: this state's does "
            "not, so every reclaim loses the work since the last save"
        )
    return f"{head}; {grace}: {fits}"


def _interval(advice: IntervalAdvice) -> str:
    best = f"save every {duration(advice.recommended_seconds)}"
    if advice.recommended_steps is not None:
        best += f", ~{advice.recommended_steps} steps"
    if advice.whole_run:
        best += " (the whole run)"
    if advice.daly_seconds is not None:
        best += f" (Daly: {duration(advice.daly_seconds)})"
    best += f": goodput {percent(advice.goodput)}"
    where = advice.settings
    if advice.configured_steps is None:
        return f"{best}; configured: none ({where.interval} unset)"
    if advice.configured_seconds is None:
        return (
            f"{best}; configured every {advice.configured_steps} steps, step time unknown "
            f"(set {where.step})"
        )
    return (
        f"{best}; configured every {advice.configured_steps} steps "
        f"(~{duration(advice.configured_seconds)}): {percent(advice.configured_goodput)}"
    )


def _costs(advice: IntervalAdvice) -> str:
    """A useful GPU-hour, in on-demand GPU-hours' price (and USD where known)."""

    def priced(multiple: float) -> str:
        usd = advice.on_demand_gpu_hour_usd
        return f"{multiple:.2f}x" + (f" (${multiple * usd:.2f})" if usd else "")

    parts = []
    if advice.spot_cost is not None:
        parts.append(f"spot {priced(advice.spot_cost)}")
    if advice.on_demand_cost is not None:
        parts.append(f"on-demand {priced(advice.on_demand_cost)}")
    return f"per useful GPU-hour: {' vs '.join(parts)} the on-demand price"


def _assumes(advice: IntervalAdvice) -> str:
    costs = advice.costs
    assert costs is not None
    if advice.reclaims_per_node_hour:
        saved = (
            f"{advice.unannounced_share:.0%} unannounced"
            if advice.graceful_share
            else "none with a final save"
        )
        reclaims = (
            f"{advice.reclaims_per_node_hour:.3g} reclaims/node-hour ({advice.rate_source}), "
            f"{saved}"
        )
    else:
        reclaims = f"no reclaims ({advice.rate_source})"
    node, image = advice.node_ready_seconds, advice.image_pull_seconds
    return (
        f"assumes {reclaims}; restart {duration(costs.restart)} (node {duration(node)}, "
        f"image {duration(image)}, restore {duration(costs.restart - node - image)})"
    )


def lines(advice: IntervalAdvice) -> list[str]:
    """Two to four lines: the first names the workload, the rest are indented under it."""
    first = f"{advice.workload}: {_where(advice)}"
    if advice.missing:
        return [f"{first}", f"  {advice.missing}"]
    return [
        first,
        f"  {_interval(advice)}",
        f"  {_costs(advice)}",
        f"  {_assumes(advice)}",
        *recovery.lines(advice, duration, percent),
    ]


def text(found: Iterable[IntervalAdvice]) -> list[str]:
    """The text report's section; empty without a training workload."""
    found = list(found)
    if not found:
        return []
    return ["", HEADING, *(f"  {line}" for advice in found for line in lines(advice))]


def markdown_rows(found: Iterable[IntervalAdvice]) -> list[tuple[str, ...]]:
    """Rows of the Markdown table under :data:`MARKDOWN_HEADER`."""
    rows = []
    for advice in found:
        if advice.missing:
            rows.append((advice.workload, _where(advice), advice.missing, "", "", ""))
            continue
        configured = (
            f"{advice.configured_steps} steps" if advice.configured_steps is not None else "none"
        )
        if advice.configured_goodput is not None:
            configured += (
                f" (~{duration(advice.configured_seconds)}): {percent(advice.configured_goodput)}"
            )
        recommended = duration(advice.recommended_seconds)
        if advice.recommended_steps is not None:
            recommended += f" (~{advice.recommended_steps} steps)"
        rows.append(
            (
                advice.workload,
                _where(advice),
                f"{recommended}: {percent(advice.goodput)}",
                configured,
                _costs(advice).removeprefix("per useful GPU-hour: "),
                _assumes(advice).removeprefix("assumes "),
            )
        )
    return rows


MARKDOWN_HEADER = (
    "Workload",
    "Judged on",
    "Save every: goodput",
    "Configured",
    "Per useful GPU-hour",
    "Assumes",
)


def warnings(found: list[IntervalAdvice]) -> list[SpecWarning]:
    """A warning per training workload whose configured interval :func:`is_far` from the
    recommendation: both intervals, both goodputs, and what to set."""
    return [
        SpecWarning(advice.settings.key, _far_message(advice)) for advice in found if is_far(advice)
    ]


def _far_message(advice: IntervalAdvice) -> str:
    assert advice.configured_seconds is not None and advice.recommended_steps is not None
    where = advice.settings
    steps = advice.recommended_steps
    setting = (
        f"{where.interval}: {steps}"
        if where.interval.startswith("spotproof:")
        else f"{where.interval}={steps}"
    )
    subject = "saves" if where.key == advice.workload else f"{advice.workload} saves"
    return (
        f"{subject} every {advice.configured_steps} steps "
        f"(~{duration(advice.configured_seconds)}), {percent(advice.configured_goodput)} "
        f"goodput on {advice.capacity}; every {steps} steps "
        f"(~{duration(advice.recommended_seconds)}) gives {percent(advice.goodput)}: "
        f"set {setting}"
    )


def duration(seconds: float | None) -> str:
    """Seconds in the unit a reader takes in: s, min or h."""
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def percent(share: float | None) -> str:
    """A share as a percentage with two decimals, or as many more as it takes (up to five)
    to tell it from 100%."""
    if share is None:
        return "unknown"
    digits = 2
    while digits < 5 and f"{100 * share:.{digits}f}" == f"{100:.{digits}f}" and share < 1:
        digits += 1
    return f"{100 * share:.{digits}f}%"


def as_json(advice: IntervalAdvice) -> Mapping[str, Any]:
    """The advice's numbers, for the JSON report."""
    costs = advice.costs
    return {
        "capacity": advice.capacity,
        "pods": advice.pods,
        "state_mib": advice.state_mib,
        "step_seconds": advice.step_seconds,
        "missing": advice.missing or None,
        "recommended_seconds": advice.recommended_seconds,
        "recommended_steps": advice.recommended_steps,
        "whole_run": advice.whole_run,
        "daly_seconds": advice.daly_seconds,
        "goodput": advice.goodput,
        "configured_steps": advice.configured_steps,
        "configured_seconds": advice.configured_seconds,
        "configured_goodput": advice.configured_goodput,
        "spot_cost": advice.spot_cost,
        "on_demand_cost": advice.on_demand_cost,
        "on_demand_gpu_hour_usd": advice.on_demand_gpu_hour_usd,
        "grace_seconds": advice.grace_seconds,
        "grace_limit": advice.grace_limit or None,
        "largest_state_mib": advice.largest_state_mib,
        "final_save_fits": advice.final_save_fits,
        "reclaims_per_node_hour": advice.reclaims_per_node_hour,
        "rate_source": advice.rate_source,
        "unannounced_share": advice.unannounced_share,
        "graceful_share": advice.graceful_share,
        "stall_seconds": costs.stall if costs else None,
        "commit_seconds": costs.commit if costs else None,
        "final_save_seconds": costs.final_save if costs else None,
        "restart_seconds": costs.restart if costs else None,
        "warns": is_far(advice),
        "recovery": recovery.as_json(advice),
    }
