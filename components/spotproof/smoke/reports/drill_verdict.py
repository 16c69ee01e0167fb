"""A rehearsal judged as a drill: the harness's records as a ``drill.timeline.Timeline``.

``spotproof drill`` judges a reclaim on a real cluster from the marks it watched
(``drill.judge``). Here the local harness stands in for the cluster: each graceful
preemption it played becomes the marks a cluster would have shown (the notice, SIGTERM,
the final checkpoint, the pod's end, the node gone when the grace ran out, the
replacement's resume), and the drill's judge gives its verdict on them. A rehearsal passes
only if the harness's own checks and the drill's judge agree, so the code that judges real
drills is exercised by every rehearsal.

Hard kills are not reclaims (nothing sends SIGTERM), nor are the reclaims of a path that
sends none by the platform's design (``SmokeConfig.unannounced``); the harness alone judges
them.
"""

from __future__ import annotations

from spotproof.drill.judge import Expectation, Verdict, judge
from spotproof.drill.timeline import Mark, Timeline
from spotproof.smoke.processes.trainer_process import container_exit_code
from spotproof.smoke.reports.records import Interruption, SmokeReport

COUNTED_ACTIONS = (": Count", ": FailJob")
"""A Job verdict (``smoke.emulation.job_controller.JobController.verdicts``) that spent or
ended the Job."""


def _pod(index: int) -> str:
    return f"attempt-{index}"


def _graceful(record: Interruption, report: SmokeReport) -> bool:
    """A reclaim the drill's judge would see: one meant to send SIGTERM (on a path that
    gives none by the platform's design there is nothing a drill could judge)."""
    return record.kind == "preemption" and not report.config.unannounced


def timeline_of(report: SmokeReport) -> Timeline:
    """The marks a cluster would have shown for the rehearsal's graceful preemptions; times
    are the harness's, seconds since the interrupted run started."""
    timeline = Timeline(origin=0.0)
    attempts = {a.index: a for a in report.attempts}
    for record in report.interruptions:
        if not _graceful(record, report):
            continue
        pod = _pod(record.attempt)
        timeline.add(record.at, Mark.RECLAIM, pod=pod)
        signalled = None
        if record.sigterm_after is not None:
            signalled = record.at + record.sigterm_after
            timeline.add(
                signalled,
                Mark.SIGTERM,
                pod=pod,
                step=record.at_step,
                grace_left=record.grace_seconds,
            )
        if signalled is not None and record.final_save_seconds is not None:
            timeline.add(
                signalled + record.final_save_seconds,
                Mark.CHECKPOINT,
                pod=pod,
                step=record.at_step,
                kind="final",
                since_signal=record.final_save_seconds,
            )
        ended = attempts[record.attempt].ended if record.attempt in attempts else None
        end = ended if ended is not None else record.at
        timeline.add(
            end,
            Mark.POD_ENDED,
            pod=pod,
            phase="Failed",
            exit_code=container_exit_code(record.exit_code),
        )
        if record.sigkilled_after_grace:
            timeline.add(end, Mark.NODE_GONE, pod=pod)
        replacement = attempts.get(record.attempt + 1)
        if replacement is not None:
            timeline.add(replacement.started, Mark.POD_CREATED, pod=_pod(replacement.index))
            resumed_at = replacement.steps[0][0] if replacement.steps else replacement.started
            timeline.add(
                resumed_at, Mark.RESUMED, pod=_pod(replacement.index), step=replacement.resumed_from
            )
    counted = [v for v in report.job_verdicts if v.endswith(COUNTED_ACTIONS)]
    if counted:
        timeline.add(report.interrupted_seconds, Mark.COUNTED, failed=len(counted))
    if report.digest is not None:
        timeline.add(report.interrupted_seconds, Mark.DONE, digest=report.digest)
    return timeline


def drill_verdict(report: SmokeReport) -> Verdict | None:
    """The drill's judgment of the rehearsal; None when it played no graceful preemption."""
    if not any(_graceful(r, report) for r in report.interruptions):
        return None
    expected = Expectation(report.config.grace_seconds, report.reference_digest)
    return judge(timeline_of(report), expected)
