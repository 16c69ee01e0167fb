"""The drill's verdict on a timeline, and its comparison with the plan's preemption path.

Timelines here are written mark by mark, as ``drill.watch`` records a cluster's and
``smoke.reports.drill_verdict`` a rehearsal's; the paths compared with are the plan's own, from the
stacks' offline plans."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spotproof.drill.compare import compare
from spotproof.drill.judge import Expectation, judge
from spotproof.drill.timeline import Mark, Timeline
from spotproof.plan import PlanResult
from spotproof.plan.model import Ending, PreemptionPath
from spotproof.smoke.reports.drill_verdict import drill_verdict, timeline_of
from spotproof.smoke.reports.records import Attempt, Interruption, SmokeConfig, SmokeReport

REFERENCE = "a" * 64
OLD, NEW = "trainer-abc", "trainer-def"
Edit = Callable[[Timeline], None]


def graceful(
    *,
    condition: str | None = "TerminationByKubelet",
    deleted_with: float | None = None,
    final_step: int | None = 120,
    resumed: int = 120,
    digest: str = REFERENCE,
    edit: Edit | None = None,
) -> Timeline:
    """One reclaim of pod OLD at step 120 with 30 s of grace, recovered by pod NEW."""
    timeline = Timeline(origin=1000.0)
    timeline.add(1000.0, Mark.RECLAIM, pod=OLD, node="n1", pool="gpu-spot")
    if condition:
        timeline.add(1000.5, Mark.DISRUPTION_TARGET, pod=OLD, reason=condition)
    if deleted_with is not None:
        timeline.add(1000.5, Mark.POD_DELETING, pod=OLD, grace=deleted_with)
    timeline.add(1000.6, Mark.SIGTERM, pod=OLD, step=120, grace_left=30)
    if final_step is not None:
        timeline.add(
            1002.0, Mark.CHECKPOINT, pod=OLD, step=final_step, kind="final", since_signal=1.4
        )
    timeline.add(1002.5, Mark.POD_ENDED, pod=OLD, phase="Failed", exit_code=143)
    timeline.add(1030.0, Mark.NODE_GONE, node="n1")
    timeline.add(1031.0, Mark.POD_CREATED, pod=NEW)
    timeline.add(1090.0, Mark.POD_SCHEDULED, pod=NEW, node="n2", pool="gpu-spot", pending=59.0)
    timeline.add(1120.0, Mark.RESUMED, pod=NEW, step=resumed)
    if edit is not None:
        edit(timeline)
    timeline.add(1300.0, Mark.DONE, pod=NEW, step=2000, digest=digest)
    return timeline


EXPECTED = Expectation(declared_grace=30, reference_digest=REFERENCE)


def test_a_graceful_reclaim_that_resumes_from_its_final_checkpoint_passes() -> None:
    verdict = judge(graceful(), EXPECTED)

    assert verdict.passed, verdict.failures
    [reclaim] = verdict.reclaims
    assert (reclaim.sigterm_after, reclaim.final_step, reclaim.resumed_from) == (0.6, 120, 120)
    assert (reclaim.steps_lost, reclaim.pool, reclaim.pending_seconds) == (0, "gpu-spot", 59.0)
    assert (reclaim.node_gone_after, reclaim.exit_code) == (30.0, 143)


def test_resuming_before_the_final_checkpoint_loses_steps_and_fails() -> None:
    verdict = judge(graceful(resumed=100), EXPECTED)

    assert (
        "reclaim 1: step 120 was committed but the replacement resumed from 100" in verdict.failures
    )
    assert any("20 steps lost" in f for f in verdict.failures)


def test_a_reclaim_that_never_reaches_the_trainer_fails() -> None:
    def hard(timeline: Timeline) -> None:
        timeline.events[:] = [e for e in timeline.events if e.mark is not Mark.SIGTERM]

    verdict = judge(graceful(condition="DeletionByPodGC", final_step=None, edit=hard), EXPECTED)

    assert verdict.failures == [
        "reclaim 1: SIGTERM never reached the trainer: the node was gone first"
    ]


def test_a_deletion_with_less_grace_than_declared_fails() -> None:
    verdict = judge(graceful(condition=None, deleted_with=5), EXPECTED)

    assert any("deleted with 5 s of grace, less than the 30 s" in f for f in verdict.failures)


def test_a_final_checkpoint_the_store_does_not_hold_was_not_committed() -> None:
    def store_saw(timeline: Timeline) -> None:
        timeline.add(1001.0, Mark.CHECKPOINT, step=100, source="store")

    verdict = judge(graceful(edit=store_saw), EXPECTED)

    assert any(
        "reported step 120 committed, but the store has no manifest" in f for f in verdict.failures
    )


def test_a_final_checkpoint_the_store_holds_passes() -> None:
    def store_saw(timeline: Timeline) -> None:
        timeline.add(1002.1, Mark.CHECKPOINT, step=120, source="store")

    assert judge(graceful(edit=store_saw), EXPECTED).passed


def test_a_failure_counted_against_backoff_limit_fails_the_drill() -> None:
    def counted(timeline: Timeline) -> None:
        timeline.add(1003.0, Mark.COUNTED, failed=1)

    verdict = judge(graceful(edit=counted), EXPECTED)

    assert any("counted 1 failure(s) against its budget" in f for f in verdict.failures)


def test_a_different_digest_fails_and_an_unknown_reference_is_not_judged() -> None:
    other = graceful(digest="b" * 64)

    assert any("differs from the reference" in f for f in judge(other, EXPECTED).failures)
    assert judge(other, Expectation(declared_grace=30)).passed


def test_a_run_that_never_completes_fails() -> None:
    timeline = graceful()
    timeline.events[:] = [e for e in timeline.events if e.mark is not Mark.DONE]

    assert "the run did not complete" in judge(timeline, EXPECTED).failures


def test_each_reclaim_is_judged_apart() -> None:
    def second(timeline: Timeline) -> None:
        timeline.add(1200.0, Mark.RECLAIM, pod=NEW, node="n2", pool="gpu-spot")
        timeline.add(1200.2, Mark.SIGTERM, pod=NEW, step=160, grace_left=30)
        timeline.add(1201.0, Mark.CHECKPOINT, pod=NEW, step=160, kind="final", since_signal=0.8)
        timeline.add(1201.5, Mark.POD_ENDED, pod=NEW, phase="Failed", exit_code=143)
        timeline.add(1260.0, Mark.RESUMED, pod="trainer-ghi", step=150)

    verdict = judge(graceful(edit=second), EXPECTED)

    assert [r.resumed_from for r in verdict.reclaims] == [120, 150]
    assert [f.split(":")[0] for f in verdict.failures] == ["reclaim 2", "reclaim 2"]


# --- the plan's path against the cluster ------------------------------------------------


def smoke_path(plan: PlanResult) -> PreemptionPath:
    [outcome] = [o for o in plan.outcomes if o.workload.name == "spotproof-smoke"]
    return outcome.paths[0]


def test_a_reclaim_as_the_gke_plan_predicts_shows_no_difference(gke_dev: PlanResult) -> None:
    path = smoke_path(gke_dev)
    assert path.ending is Ending.KUBELET_SHUTDOWN

    [reclaim] = judge(graceful(), EXPECTED).reclaims

    assert compare(path, reclaim) == []


def test_a_plain_delete_where_the_plan_predicted_an_eviction_is_a_difference(
    aks_dev: PlanResult,
) -> None:
    path = smoke_path(aks_dev)  # AKS node auto-drain evicts
    assert path.ending is Ending.EVICTION
    [reclaim] = judge(graceful(condition=None, deleted_with=90), EXPECTED).reclaims

    [difference] = [d for d in compare(path, reclaim) if d.structural]

    assert "the pod ended by plain delete, not EvictionByEvictionAPI" in difference.text
    assert "plan: SIGTERM at 0 s with 30 s grace, EvictionByEvictionAPI" in difference.text
    assert "cluster: SIGTERM at 0.6 s, pod deleted without DisruptionTarget with 90 s grace" in (
        difference.text
    )


def test_an_eviction_where_the_plan_predicted_karpenters_plain_delete_is_a_difference(
    eks_dev: PlanResult,
) -> None:
    path = smoke_path(eks_dev)  # the smoke Job's PDB holds the eviction until TGP deletes
    assert path.ending is Ending.DELETE
    [reclaim] = judge(graceful(condition="EvictionByEvictionAPI"), EXPECTED).reclaims

    structural = [d.text for d in compare(path, reclaim) if d.structural]

    assert any("ended by EvictionByEvictionAPI, not plain delete" in d for d in structural)


def test_sigterm_far_later_than_planned_is_a_timing_difference(eks_dev: PlanResult) -> None:
    path = smoke_path(eks_dev)

    def late(timeline: Timeline) -> None:
        [sigterm] = [e for e in timeline.events if e.mark is Mark.SIGTERM]
        timeline.events.remove(sigterm)
        timeline.add(1088.0, Mark.SIGTERM, pod=OLD, step=120)

    timeline = graceful(condition=None, deleted_with=90, edit=late)
    [reclaim] = judge(timeline, Expectation(declared_grace=90)).reclaims
    differences = compare(path, reclaim)

    assert [d.structural for d in differences] == [False, False]
    assert "SIGTERM 88 s after the notice, not 30 s" in differences[0].text
    assert "node gone 30 s after the notice, not 120 s" in differences[1].text


# --- a rehearsal read as a drill ----------------------------------------------------------


def rehearsed(*, sigterm_after: float | None, final_save: float | None) -> SmokeReport:
    config = SmokeConfig(grace_seconds=15)
    report = SmokeReport(config, reference_digest=REFERENCE, digest=REFERENCE)
    report.interruptions = [
        Interruption(
            "preemption",
            attempt=0,
            at=5.0,
            at_step=40,
            exit_code=143,
            resumed_from=40,
            final_save_seconds=final_save,
            grace_seconds=15,
            sigterm_after=sigterm_after,
        )
    ]
    report.attempts = [
        Attempt(0, started=0.0, ended=5.5, resumed_from=0, exit_code=143),
        Attempt(1, started=5.6, ended=9.0, resumed_from=40, exit_code=0, steps=[(6.0, 40)]),
    ]
    report.interrupted_seconds = 9.0
    return report


def test_a_rehearsed_graceful_preemption_reads_as_a_passing_drill() -> None:
    report = rehearsed(sigterm_after=0.0, final_save=0.2)

    marks = [e.mark for e in timeline_of(report).ordered()]
    verdict = drill_verdict(report)

    assert marks == [
        Mark.RECLAIM,
        Mark.SIGTERM,
        Mark.CHECKPOINT,
        Mark.POD_ENDED,
        Mark.POD_CREATED,
        Mark.RESUMED,
        Mark.DONE,
    ]
    assert verdict is not None and verdict.passed, verdict.failures


@pytest.mark.parametrize(
    ("sigterm_after", "final_save", "failure"),
    [
        (None, None, "SIGTERM never reached the trainer"),
        (0.0, None, "no final checkpoint committed after SIGTERM"),
        (0.0, 20.0, "the final checkpoint took 20 s, past the 15 s grace"),
    ],
)
def test_a_rehearsed_preemption_that_did_not_recover_fails_the_drills_judge(
    sigterm_after: float | None, final_save: float | None, failure: str
) -> None:
    verdict = drill_verdict(rehearsed(sigterm_after=sigterm_after, final_save=final_save))

    assert verdict is not None
    assert any(failure in f for f in verdict.failures), verdict.failures


def test_a_replacement_that_resumed_early_from_before_a_committed_step_fails() -> None:
    def early(timeline: Timeline) -> None:
        timeline.events[:] = [e for e in timeline.events if e.mark is not Mark.RESUMED]
        timeline.add(1000.2, Mark.CHECKPOINT, pod=OLD, step=110, kind="periodic")
        timeline.add(1001.0, Mark.RESUMED, pod=NEW, step=0)  # before OLD ended, from scratch

    [reclaim] = judge(graceful(edit=early), EXPECTED).reclaims

    assert reclaim.overlapped
    assert reclaim.problems == [
        "step 110 was committed before the replacement resumed, but it resumed from 0"
    ]


def test_a_replacement_created_while_the_old_pod_saved_may_resume_from_before_its_final_save() -> (
    None
):
    """Created before the old pod ended, the replacement may have read the store before the
    final commit: resuming from the step committed when it was created is no loss of
    committed work, even when its resume is reported after the old pod ended."""

    def overlapped(timeline: Timeline) -> None:
        timeline.events[:] = [e for e in timeline.events if e.mark is not Mark.POD_CREATED]
        timeline.add(1000.1, Mark.CHECKPOINT, pod=OLD, step=100, kind="periodic")
        timeline.add(1000.7, Mark.POD_CREATED, pod=NEW)

    [reclaim] = judge(graceful(resumed=100, edit=overlapped), EXPECTED).reclaims

    assert reclaim.overlapped
    assert reclaim.problems == []


def test_an_overlapped_replacement_resuming_before_what_its_creation_found_fails() -> None:
    def overlapped(timeline: Timeline) -> None:
        timeline.events[:] = [e for e in timeline.events if e.mark is not Mark.POD_CREATED]
        timeline.add(1000.1, Mark.CHECKPOINT, pod=OLD, step=100, kind="periodic")
        timeline.add(1000.7, Mark.POD_CREATED, pod=NEW)

    [reclaim] = judge(graceful(resumed=80, edit=overlapped), EXPECTED).reclaims

    assert reclaim.problems == [
        "step 100 was committed before the replacement resumed, but it resumed from 80"
    ]


def test_a_gang_rank_reclaimed_with_the_rest_that_never_got_sigterm_fails() -> None:
    timeline = graceful()
    [reclaim] = timeline.of(Mark.RECLAIM)
    timeline.events.remove(reclaim)
    timeline.add(1000.0, Mark.RECLAIM, pod=OLD, node="n1", pods=[OLD, "rank-1"])

    verdict = judge(timeline, EXPECTED)

    assert verdict.failures == ["reclaim 1: SIGTERM never reached the trainer in rank-1"]


def test_another_ranks_marks_are_not_the_reclaimed_pods() -> None:
    def other_rank(timeline: Timeline) -> None:
        timeline.add(1000.1, Mark.POD_DELETING, pod="rank-1", grace=5)

    assert judge(graceful(edit=other_rank), EXPECTED).passed


def test_a_drill_that_does_not_wait_for_the_end_does_not_require_it() -> None:
    timeline = graceful()
    timeline.events[:] = [e for e in timeline.events if e.mark is not Mark.DONE]

    assert judge(timeline, Expectation(declared_grace=30, require_done=False)).passed
