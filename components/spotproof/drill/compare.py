"""What the cluster did against what ``spotproof plan`` predicted: the check that keeps the
offline model honest.

The plan predicts, for each workload on each kind of reclaimable capacity, a preemption
path (``plan.simulation.preemption.PreemptionPath``): whether SIGTERM arrives and when after
the notice, with how much grace, how the pod ends (the ``DisruptionTarget`` reason, a plain
delete, or the node gone first) and when the node is gone. A drill observes the same things
(``judge.ReclaimOutcome``). Every disagreement is printed:

- **how** the pod ended, or whether SIGTERM came at all, differing is a wrong model: the
  Job's failure policy and the trainer's final save were planned for another path, so the
  drill fails;
- **when** differing beyond :data:`TIMING_TOLERANCE` is reported, not failed on: notices
  are best effort (AWS says so of its two minutes) and the drill's clock starts when the
  cloud accepted the request, not when the cloud sent the notice.

Times on both sides count from the notice: the plan's from the cloud's notice, the drill's
from when its request was sent. On AWS the request is the notice (FIS sends the interruption
warning at once); on GCE and Azure the simulated event is delivered within seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spotproof.drill.judge import ReclaimOutcome

if TYPE_CHECKING:  # the plan (and Pulumi) is not needed to compare: a rehearsal has no plan
    from spotproof.plan.model import PreemptionPath

TIMING_TOLERANCE = (10.0, 0.25)
"""(seconds, fraction of the predicted time): the larger is allowed either way."""


@dataclass(frozen=True)
class Difference:
    structural: bool
    """True when the path itself differs (fails the drill); False for timing."""
    text: str

    def __str__(self) -> str:
        return self.text


def _close(observed: float, predicted: float) -> bool:
    seconds, fraction = TIMING_TOLERANCE
    return abs(observed - predicted) <= max(seconds, fraction * predicted)


def predicted_line(path: PreemptionPath) -> str:
    if path.sigterm_at is None:
        return f"no SIGTERM, {path.ending.value}, node gone at {path.notice_seconds} s"
    return (
        f"SIGTERM at {path.sigterm_at:g} s with {path.grace_seconds:g} s grace, "
        f"{path.ending.value}, node gone at {path.notice_seconds} s"
    )


def observed_line(found: ReclaimOutcome) -> str:
    parts = []
    if found.sigterm_after is None:
        parts.append("no SIGTERM")
    else:
        parts.append(f"SIGTERM at {found.sigterm_after:g} s")
    if found.condition:
        parts.append(f"DisruptionTarget {found.condition}")
    elif found.deleted_with_grace is not None:
        parts.append(
            f"pod deleted without DisruptionTarget with {found.deleted_with_grace:g} s grace"
        )
    else:
        parts.append("no DisruptionTarget")
    if found.node_gone_after is not None:
        parts.append(f"node gone at {found.node_gone_after:g} s")
    return ", ".join(parts)


def compare(path: PreemptionPath, found: ReclaimOutcome) -> list[Difference]:
    """Every way reclaim ``found`` differs from the predicted ``path``."""
    plan, cluster = predicted_line(path), observed_line(found)
    differences = []

    def differ(structural: bool, what: str) -> None:
        differences.append(
            Difference(
                structural, f"reclaim {found.index}: {what} (plan: {plan}; cluster: {cluster})"
            )
        )

    if (path.sigterm_at is None) != (found.sigterm_after is None):
        differ(
            True,
            "SIGTERM arrived though the plan said it never would"
            if path.sigterm_at is None
            else "SIGTERM never arrived though the plan said it would",
        )
    if found.ending not in ("unknown", path.ending.value):
        differ(True, f"the pod ended by {found.ending}, not {path.ending.value}")
    if path.sigterm_at is not None and found.sigterm_after is not None:
        if not _close(found.sigterm_after, path.sigterm_at):
            differ(
                False,
                f"SIGTERM {found.sigterm_after:g} s after the notice, not {path.sigterm_at:g} s",
            )
        if found.deleted_with_grace is not None and not _close(
            found.deleted_with_grace, path.grace_seconds
        ):
            differ(False, f"{found.deleted_with_grace:g} s of grace, not {path.grace_seconds:g} s")
    if found.node_gone_after is not None and not _close(found.node_gone_after, path.notice_seconds):
        differ(
            False,
            f"node gone {found.node_gone_after:g} s after the notice, not {path.notice_seconds} s",
        )
    return differences
