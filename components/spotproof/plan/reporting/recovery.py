"""The plan's stall prediction for a gang whose ranks are replaced one at a time
(``plan.simulation.recovery``) in words, under the gang's checkpoint advice: each path
with which pods restart, where the ranks restore from and how long until the next step,
then goodput and the cost of a useful GPU-hour with 0 to a few warm spares, against the
same gang restarted whole on every reclaim."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from spotproof.plan.simulation.intervals import IntervalAdvice
from spotproof.plan.simulation.recovery import Prediction, recommended


def lines(
    advice: IntervalAdvice,
    duration: Callable[[float | None], str],
    percent: Callable[[float | None], str],
) -> list[str]:
    """Indented lines under the gang's advice; none for any other workload. ``duration``
    and ``percent`` are the report's own formatters."""
    if not advice.recovery:
        return []
    bare = advice.recovery[0]
    workers = advice.pods - 1
    out = [f"  replace-rank gang of {advice.pods} pods (a leader, {workers} workers):"]
    for path in bare.paths:
        redone = (
            f", ~{duration(path.redone_seconds)} of training redone" if path.redone_seconds else ""
        )
        out.append(
            f"    {path.reclaim} ({path.share:.0%} of reclaims): {path.restarted} restarts, "
            f"restoring from {path.restores_from}; next step after ~"
            f"{duration(path.stall_seconds)}{redone}"
        )
    out.append(
        f"    goodput {percent(bare.goodput)} (restarting the whole gang on every reclaim: "
        f"{percent(advice.whole_gang_goodput)})"
    )
    best = recommended(list(advice.recovery))
    options = "; ".join(f"{p.spares}: {percent(p.goodput)} at {_cost(p)}" for p in advice.recovery)
    kept = (
        f"; the stack keeps {advice.warm_spares} where it runs"
        if advice.warm_spares
        else "; the stack keeps none where it runs"
    )
    out.append(
        f"    with warm spares (goodput, a useful GPU-hour in the on-demand price): {options}; "
        f"recommended: {_spares(best)}{kept}"
    )
    return out


def _cost(prediction: Prediction) -> str:
    return f"{prediction.cost:.3f}x" if math.isfinite(prediction.cost) else "no useful hours"


def _spares(prediction: Prediction) -> str:
    if prediction.spares == 0:
        return "none (a spare costs more than the stall it saves)"
    return (
        f"{prediction.spares} (kube.spares.WarmSpares; all busy for "
        f"{prediction.spare_busy:.1%} of reclaims)"
    )


def as_json(advice: IntervalAdvice) -> Mapping[str, Any] | None:
    """The prediction's numbers for the JSON report; None for any other workload."""
    if not advice.recovery:
        return None
    return {
        "whole_gang_goodput": advice.whole_gang_goodput,
        "warm_spares": advice.warm_spares,
        "recommended_spares": recommended(list(advice.recovery)).spares,
        "spares": [
            {
                "spares": p.spares,
                "goodput": p.goodput,
                "cost": p.cost if math.isfinite(p.cost) else None,
                "spare_busy": p.spare_busy,
                "paths": [
                    {
                        "reclaim": path.reclaim,
                        "share": path.share,
                        "restarted": path.restarted,
                        "restores_from": path.restores_from,
                        "stall_seconds": path.stall_seconds,
                        "redone_seconds": path.redone_seconds,
                    }
                    for path in p.paths
                ],
            }
            for p in advice.recovery
        ],
    }
