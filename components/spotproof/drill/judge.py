"""Did the workload recover from each reclaim? The verdict on a timeline, drill or rehearsal.

Each reclaim (the marks from one ``RECLAIM`` to the next) must show, in this order:

1. SIGTERM reached the trainer (its ``preempted`` line), with the grace the pod declares:
   a deletion that gives less (``POD_DELETING``'s ``grace``) cuts the final save short;
2. the final checkpoint committed after SIGTERM and before the pod ended or the node went,
   within that grace;
3. the replacement resumed from it: from the newest step committed when the old pod ended,
   so nothing committed is lost, and for a graceful reclaim from the very step SIGTERM
   found, so no step is lost;
4. the Job counted nothing against ``backoffLimit`` (a reclaim is not a failure of the
   workload; ``COUNTED`` marks say otherwise).

At the end the run completed, and with the reference digest where there is one: the same
weights, bit for bit, as a run that was never interrupted.

A replacement that started while the old pod was still saving (the rehearsal does this on
purpose, to race two writers) cannot have seen the final checkpoint; it is held only to
step 3's first half, as ``spotproof smoke`` holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spotproof.drill.timeline import Event, Mark, Timeline

GRACE_TOLERANCE_SECONDS = 1.0
"""Slack on grace comparisons: API times have whole seconds, and the kubelet counts the
grace from its own start of the kill."""


@dataclass(frozen=True)
class Expectation:
    declared_grace: float
    """The pod's ``terminationGracePeriodSeconds``."""
    reference_digest: str | None = None
    """The digest of the same run never interrupted; None to judge no digest."""
    require_done: bool = True
    """Whether the run must have completed (a drill told not to wait for it does not)."""


@dataclass
class ReclaimOutcome:
    """What one reclaim came to, read off its marks; times are seconds after the request."""

    index: int
    requested_at: float
    node: str = ""
    reclaimed_pool: str = ""
    """The pool of the node reclaimed (the replacement's is ``pool``)."""
    notice_after: float | None = None
    condition: str | None = None
    """The ``DisruptionTarget`` reason, None when the pod got none."""
    deleted_with_grace: float | None = None
    sigterm_after: float | None = None
    sigterm_step: int | None = None
    final_step: int | None = None
    final_save_seconds: float | None = None
    ended_after: float | None = None
    exit_code: int | None = None
    node_gone_after: float | None = None
    pool: str = ""
    pending_seconds: float | None = None
    resumed_from: int | None = None
    steps_lost: int | None = None
    overlapped: bool = False
    committed_at_resume: int | None = None
    """The newest step committed when the replacement resumed."""
    unsignalled: list[str] = field(default_factory=list)
    """Reclaimed pods (a gang's other ranks) whose trainer never reported SIGTERM."""
    problems: list[str] = field(default_factory=list)

    @property
    def ending(self) -> str:
        """How the pod ended, named as ``plan.simulation.preemption.Ending`` names it."""
        if self.condition:
            return self.condition
        return "plain delete" if self.deleted_with_grace is not None else "unknown"


@dataclass
class Verdict:
    reclaims: list[ReclaimOutcome]
    digest: str | None
    reference_digest: str | None
    failures: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


def _first(events: list[Event], mark: Mark, after: float = float("-inf")) -> Event | None:
    return next((e for e in events if e.mark is mark and e.at >= after), None)


def _outcome(index: int, events: list[Event]) -> ReclaimOutcome:
    """The marks of one reclaim, read. The ``RECLAIM`` mark names the pod it hit (and, for a
    gang's round, every reclaimed pod and node); the replacement is the first other pod to
    resume. Marks of other pods (a gang's ranks the JobSet restarts) are not this pod's."""
    start = events[0]
    pods = set(start.detail.get("pods") or [start.pod])
    nodes = set(start.detail.get("nodes_reclaimed") or [start.node]) - {""}
    own = [
        e
        for e in events
        if e.pod == start.pod
        or (e.node and e.node in nodes and e.mark in (Mark.NODE_NOTICE, Mark.NODE_GONE))
        or e.detail.get("source") == "store"
    ]
    found = ReclaimOutcome(
        index, start.at, node=start.node, reclaimed_pool=str(start.detail.get("pool", ""))
    )
    signalled = {e.pod for e in events if e.mark is Mark.SIGTERM}
    found.unsignalled = sorted(p for p in pods - signalled if p != start.pod)
    replacement = [e for e in events if e.pod not in pods]

    def since(event: Event | None) -> float | None:
        return None if event is None else round(event.at - start.at, 3)

    found.notice_after = since(_first(own, Mark.NODE_NOTICE))
    condition = _first(own, Mark.DISRUPTION_TARGET)
    found.condition = None if condition is None else str(condition.detail.get("reason"))
    deleting = _first(own, Mark.POD_DELETING)
    if deleting is not None:
        found.deleted_with_grace = _number(deleting.detail.get("grace"))
    sigterm = _first(own, Mark.SIGTERM)
    if sigterm is not None:
        found.sigterm_after = since(sigterm)
        found.sigterm_step = _integer(sigterm.detail.get("step"))
    ended = _first(own, Mark.POD_ENDED)
    gone = _first(own, Mark.NODE_GONE)
    found.ended_after, found.node_gone_after = since(ended), since(gone)
    if ended is not None:
        found.exit_code = _integer(ended.detail.get("exit_code"))
    finals = [
        e
        for e in own
        if e.mark is Mark.CHECKPOINT
        and e.detail.get("kind") == "final"
        and e.detail.get("source") != "store"
        and (sigterm is None or e.at >= sigterm.at)
    ]
    if finals:
        found.final_step = _integer(finals[0].detail.get("step"))
        found.final_save_seconds = _number(
            finals[0].detail.get("since_signal", finals[0].detail.get("seconds"))
        )
    resumed = _first(replacement, Mark.RESUMED)
    if resumed is not None:
        found.resumed_from = _integer(resumed.detail.get("step"))
        # Overlapped: the replacement existed, and could read the store, before the old pod
        # ended; its resume can then come after the old pod's final commit and still be
        # from an older step (a rehearsal's deliberately overlapped restart does this).
        created = _first(replacement, Mark.POD_CREATED)
        began = resumed if created is None or resumed.at < created.at else created
        found.overlapped = ended is not None and began.at < ended.at
        steps = [
            _integer(e.detail.get("step"))
            for e in own
            if e.mark is Mark.CHECKPOINT and e.at <= began.at
        ]
        found.committed_at_resume = max((s for s in steps if s is not None), default=None)
        if found.sigterm_step is not None and found.resumed_from is not None:
            found.steps_lost = max(0, found.sigterm_step - found.resumed_from)
    scheduled = _first(replacement, Mark.POD_SCHEDULED)
    if scheduled is not None:
        found.pool = str(scheduled.detail.get("pool", ""))
        found.pending_seconds = _number(scheduled.detail.get("pending"))
    return found


def _problems(
    found: ReclaimOutcome, expected: Expectation, committed: int | None, stored: set[int] | None
) -> list[str]:
    """Which of the four steps of a recovery this reclaim missed, each in one line.
    ``stored``: the steps the checkpoint store showed committed, None where nobody looked."""
    problems = []
    if found.sigterm_after is None:
        how = "the node was gone" if found.node_gone_after is not None else "the pod ended"
        problems.append(f"SIGTERM never reached the trainer: {how} first")
        return problems
    granted = found.deleted_with_grace
    if granted is not None and granted + GRACE_TOLERANCE_SECONDS < expected.declared_grace:
        problems.append(
            f"the pod was deleted with {granted:g} s of grace, less than the "
            f"{expected.declared_grace:g} s it declares"
        )
    grace = min(expected.declared_grace, granted if granted is not None else float("inf"))
    if found.final_step is None:
        problems.append("no final checkpoint committed after SIGTERM")
    elif stored is not None and found.final_step not in stored:
        problems.append(
            f"the trainer reported step {found.final_step} committed, but the store has no "
            "manifest for it"
        )
    elif (
        found.final_save_seconds is not None
        and found.final_save_seconds > grace + GRACE_TOLERANCE_SECONDS
    ):
        problems.append(
            f"the final checkpoint took {found.final_save_seconds:g} s, past the {grace:g} s grace"
        )
    if found.unsignalled:
        problems.append(f"SIGTERM never reached the trainer in {', '.join(found.unsignalled)}")
    if found.resumed_from is None:
        problems.append("no replacement resumed")
        return problems
    early = found.committed_at_resume
    if found.overlapped and early is not None and found.resumed_from < early:
        problems.append(
            f"step {early} was committed before the replacement resumed, but it resumed from "
            f"{found.resumed_from}"
        )
    if not found.overlapped and committed is not None and found.resumed_from < committed:
        problems.append(
            f"step {committed} was committed but the replacement resumed from {found.resumed_from}"
        )
    if not found.overlapped and found.steps_lost:
        problems.append(
            f"{found.steps_lost} steps lost (SIGTERM at step {found.sigterm_step}, resumed "
            f"from {found.resumed_from}); a graceful reclaim loses none"
        )
    return problems


def judge(timeline: Timeline, expected: Expectation) -> Verdict:
    """The verdict on every reclaim in ``timeline`` and on the run's end."""
    outcomes: list[ReclaimOutcome] = []
    failures: list[str] = []
    from_store = [e for e in timeline.of(Mark.CHECKPOINT) if e.detail.get("source") == "store"]
    stored = {int(e.detail["step"]) for e in from_store} if from_store else None
    for index, events in enumerate(timeline.reclaims(), start=1):
        found = _outcome(index, events)
        ends = [found.ended_after, found.node_gone_after]
        ended = min((found.requested_at + s for s in ends if s is not None), default=None)
        committed = [
            _integer(e.detail.get("step"))
            for e in events
            if e.mark is Mark.CHECKPOINT and (ended is None or e.at <= ended)
        ]
        newest = max((s for s in committed if s is not None), default=None)
        found.problems = _problems(found, expected, newest, stored)
        failures += [f"reclaim {index}: {problem}" for problem in found.problems]
        outcomes.append(found)
    counted = timeline.of(Mark.COUNTED)
    if counted:
        failures.append(
            f"the workload counted {counted[-1].detail.get('failed', len(counted))} failure(s) "
            "against its budget (a Job's backoffLimit, a JobSet's maxRestarts): a reclaim must "
            "not be a failure of the workload"
        )
    done = timeline.of(Mark.DONE)
    digest = str(done[-1].detail.get("digest")) if done else None
    if digest is None and expected.require_done:
        failures.append("the run did not complete")
    elif expected.reference_digest is not None and digest != expected.reference_digest:
        failures.append(f"digest {digest} differs from the reference {expected.reference_digest}")
    if not outcomes:
        failures.append("no reclaim was recorded")
    return Verdict(outcomes, digest, expected.reference_digest, failures)


def _integer(value: Any) -> int | None:
    return None if value is None else int(value)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)
