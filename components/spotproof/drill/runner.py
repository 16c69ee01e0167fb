"""One drill, start to end: the stages of ``spotproof.drill`` in order, each bounded.

The runner owns the order and the clean-up; every platform fact lives in the stage's module.
Before anything touches the cloud it refuses a protected cluster without ``--yes`` and
checks that the kubeconfig's user may send every Kubernetes request the drill will
(``drill.access``); while it waits on the cluster it asks the reclaimer whether the cloud
still carries the reclaim out (``Reclaimer.check``).
Whatever happens (a refusal, a stage that times out, Ctrl-C), ``reclaimer.undo()`` and the
watches' ``stop()`` run before it returns or raises, so a drill leaves nothing behind for
the user to clean up: a tag the cloud has not used is removed, no thread keeps watching.
A stage that times out after the first reclaim is part of the verdict, not an error: the
report shows the timeline up to that point and fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotproof.drill import reference as local_reference
from spotproof.drill.access import check_access
from spotproof.drill.compare import compare
from spotproof.drill.errors import DrillError, DrillRefused, StageTimedOut
from spotproof.drill.instances import instance_of
from spotproof.drill.judge import Expectation, judge
from spotproof.drill.reclaim import Reclaimer
from spotproof.drill.report import DrillReport
from spotproof.drill.subject import Subject
from spotproof.drill.target import DEFAULT_GRACE_SECONDS, find_target
from spotproof.drill.timeline import Mark, Timeline
from spotproof.drill.watch import ClusterWatch
from spotproof.runtime import settings

Progress = Callable[[str], None]
RANKS = ("one", "all")


@dataclass(frozen=True)
class DrillOptions:
    count: int = 1
    """Reclaims, one after the other, each once the previous one's replacement resumed;
    1 to :data:`MAX_COUNT`."""
    ranks: str = "one"
    """For a gang: reclaim one rank's node, or every node of the gang at once."""
    yes: bool = False
    """Drill a stack marked protected."""
    target_seconds: float = 900
    """Until a pod of the workload runs on a spot node (a node may be provisioning)."""
    signal_seconds: float = 600
    """From the reclaim request until the pod ends (AWS's notice alone is two minutes)."""
    resume_seconds: float = 1800
    """From the pod's end until its replacement resumes: a new node, the image, the restore."""
    finish_seconds: float = 3600
    """From the last resume until the run completes; 0 to not wait for it."""
    reference: bool = True
    """Compute the smoke Job's reference digest locally."""


MAX_COUNT = 10
CHECK_SECONDS = 5.0
"""While it waits on the cluster, the drill asks the reclaimer this often whether the cloud
still carries out its reclaims (``Reclaimer.check``): a failed one ends the wait in a line
of the cloud's own, not at the stage's timeout."""


def _resumed_by_another(known: set[str]) -> Callable[[Timeline], bool]:
    """True once a pod not in ``known`` (the pods that had resumed before the reclaim, the
    reclaimed one among them) resumed. By pod, not by time: the trainer's lines carry the
    node's clock, which need not agree with this machine's."""
    return lambda timeline: any(
        e.mark is Mark.RESUMED and e.pod not in known for e in timeline.events
    )


def _done(timeline: Timeline) -> bool:
    return any(e.mark is Mark.DONE for e in timeline.events)


def _refuse_protected(subject: Subject, options: DrillOptions) -> None:
    if subject.protected and not options.yes:
        what = (
            f"stack {subject.stack} is protected (it does not say spotproof:disposable: true)"
            if subject.stack
            else f"the cluster of {subject} is not known to be disposable (its --outputs do "
            'not say "disposable": true)'
        )
        raise DrillRefused(
            f"{what}, and a drill reclaims real nodes under real work; allowed: --yes to "
            "drill it anyway, or a disposable cluster"
        )
    if not 1 <= options.count <= MAX_COUNT:
        raise DrillRefused(f"--count {options.count}; allowed: 1 to {MAX_COUNT}")
    if options.ranks not in RANKS:
        raise DrillRefused(f"--ranks {options.ranks!r}; allowed: {', '.join(RANKS)}")


class _Reference:
    """The local reference run, in a thread while the cluster trains."""

    def __init__(self, env: dict[str, str], timeout: float) -> None:
        self.digest: str | None = None
        self.why_not: str | None = local_reference.unavailable(env)
        self._thread: threading.Thread | None = None
        if self.why_not is None:
            self._thread = threading.Thread(
                target=self._run, args=(env, timeout), name="drill-reference", daemon=True
            )
            self._thread.start()

    def _run(self, env: dict[str, str], timeout: float) -> None:
        try:
            self.digest = local_reference.reference_digest(env, timeout=timeout)
        except DrillError as error:
            self.why_not = str(error)

    def result(self, timeout: float) -> tuple[str | None, str | None]:
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return None, "the local reference run was still training when the drill ended"
        return self.digest, self.why_not


class _Drill:
    """The state of one drill while it runs: what was asked, what is being watched."""

    def __init__(
        self,
        subject: Subject,
        api: Any,
        reclaimer: Reclaimer,
        options: DrillOptions,
        *,
        store_watch: Callable[[str, Timeline], Any] | None,
        progress: Progress,
        clock: Callable[[], float],
    ) -> None:
        self.subject, self.api, self.reclaimer = subject, api, reclaimer
        self.options, self.store_watch, self.progress = options, store_watch, progress
        self.clock = clock
        self.timeline = Timeline(origin=clock())
        self.watch = ClusterWatch(
            api, self.timeline, subject.namespace, subject.kind, subject.name, clock=clock
        )
        self.requests: list[str] = []
        self.grace: float | None = None
        """The target pod's ``terminationGracePeriodSeconds``: what the judge holds the
        reclaim to, as the kubelet does."""
        self.checkpoints: Any = None
        self.reference: _Reference | None = None

    def round(self, number: int) -> None:
        """One reclaim: target, verify, reclaim, then wait for the pod's end and its
        replacement's resume."""
        options, subject = self.options, self.subject
        self.progress(f"reclaim {number}/{options.count}: waiting for a pod on a spot node")
        target = find_target(
            self.api,
            subject.namespace,
            subject.kind,
            subject.name,
            ranks=options.ranks,
            timeout=options.target_seconds,
        )
        instances = [instance_of(node.provider_id, subject.cloud) for node in target.nodes]
        if self.grace is None:
            self.grace = float(target.grace_seconds)
        for instance, node in zip(instances, target.nodes, strict=True):
            how = self.reclaimer.verify(instance)
            self.progress(f"  pod {node.pod} on node {node.node} ({instance}): {how}")
        if number == 1:
            self._start_watching(target.env)
        # One mark per round, however many nodes a gang's round reclaims: the judge reads a
        # round as one reclaim. It is when the first request left, on the watch's clock:
        # nothing the cloud does to a node can come before it.
        asked = self.clock()
        resumed_before = {e.pod for e in self.timeline.of(Mark.RESUMED)} | {target.pod}
        for instance, node in zip(instances, target.nodes, strict=True):
            sent = time.time()
            reclaimed = self.reclaimer.reclaim(instance)
            self.requests.append(
                f"reclaim {number}: {reclaimed.how} on {instance} ({reclaimed.reference}), "
                f"accepted in {reclaimed.requested_at - sent:.1f} s"
            )
            self.progress(f"  {reclaimed.how}: accepted")
            if node is target.nodes[0]:
                self.timeline.add(
                    asked,
                    Mark.RECLAIM,
                    pod=target.pod,
                    node=node.node,
                    instance=str(instance),
                    pool=node.pool,
                    pods=[n.pod for n in target.nodes],
                    nodes_reclaimed=[n.node for n in target.nodes],
                )
        pod = target.pod
        # The reclaimed pod was running when chosen: any end of it is the reclaim's.
        self.until(
            lambda t: any(
                e.mark in (Mark.POD_ENDED, Mark.NODE_GONE) and e.pod == pod for e in t.events
            ),
            options.signal_seconds,
            f"reclaim {number}: the pod {pod} to end",
        )
        self.progress("  the pod ended; waiting for its replacement to resume")
        self.until(
            _resumed_by_another(resumed_before),
            options.resume_seconds,
            f"reclaim {number}: a replacement of {pod} to resume",
        )

    def until(self, predicate: Callable[[Timeline], bool], seconds: float, stage: str) -> None:
        """``watch.until``, asking the reclaimer every :data:`CHECK_SECONDS` whether its
        reclaims still run (``Reclaimer.check``, which raises the cloud's reason if not)."""
        deadline = time.monotonic() + seconds
        while True:
            self.reclaimer.check()
            left = deadline - time.monotonic()
            try:
                self.watch.until(predicate, max(0.0, min(left, CHECK_SECONDS)), stage)
            except StageTimedOut:
                if left <= CHECK_SECONDS:
                    raise StageTimedOut(f"{stage}: not within {seconds:g} s") from None
            else:
                return

    def _start_watching(self, env: dict[str, str]) -> None:
        self.watch.start()
        url = env.get(settings.CHECKPOINT_URL.name)
        if url and self.store_watch is not None:
            self.checkpoints = self.store_watch(url, self.timeline)
        if self.subject.smoke and self.options.reference:
            self.reference = _Reference(dict(env), self.options.finish_seconds or 3600)

    def stop(self) -> None:
        """Undoes the reclaim's setup and ends every watch, each whatever the others do."""
        try:
            self.reclaimer.undo()
        finally:
            try:
                self.watch.stop()
            finally:
                if self.checkpoints is not None:
                    self.checkpoints.stop()

    def reference_digest(self, stopped_early: bool) -> tuple[str | None, str | None]:
        """The reference digest, or why there is none."""
        subject = self.subject
        if self.reference is not None:
            return self.reference.result(0 if stopped_early else self.options.finish_seconds)
        if not subject.smoke:
            return None, f"{subject} is not the smoke Job: no reference digest to compare with"
        if not self.options.reference:
            return None, "--no-reference: the digest was not compared"
        return None, None

    def report(self, stopped_by: str | None) -> DrillReport:
        """The verdict, and the plan's differences, of what was watched."""
        digest, why_not = self.reference_digest(stopped_by is not None)
        notes = [why_not] if why_not else []
        if self.checkpoints is not None and self.checkpoints.errors:
            notes.append(f"the checkpoint store could not be read: {self.checkpoints.errors[-1]}")
        planned, grace = self.subject.declared_grace, self.grace
        if grace is None:  # no pod was ever targeted (a library caller's own report)
            grace = planned if planned is not None else DEFAULT_GRACE_SECONDS
        elif planned is not None and planned != grace:
            notes.append(
                f"the plan declares {planned:g} s of grace and the pod {grace:g} s: judged "
                "by the pod's, which the kubelet gives"
            )
        expected = Expectation(grace, digest, require_done=self.options.finish_seconds > 0)
        verdict = judge(self.timeline, expected)
        if stopped_by:
            verdict.failures.insert(0, stopped_by)
        differences = []
        for outcome in verdict.reclaims:
            path = self.subject.path_for(outcome.reclaimed_pool)
            if path is not None:
                differences += compare(path, outcome)
            elif self.subject.paths:
                notes.append(
                    f"reclaim {outcome.index}: no planned path for pool {outcome.reclaimed_pool!r}"
                )
        if not self.subject.paths:
            notes.append("no plan to compare with (a cluster drilled from --kubeconfig alone)")
        return DrillReport(
            str(self.subject), self.timeline, verdict, differences, self.requests, notes
        )


def run_drill(
    subject: Subject,
    api: Any,
    reclaimer: Reclaimer,
    options: DrillOptions,
    *,
    store_watch: Callable[[str, Timeline], Any] | None = None,
    progress: Progress = print,
    clock: Callable[[], float] | None = None,
) -> DrillReport:
    """Drills ``subject`` through the cluster's ``api`` (a ``kubernetes`` ApiClient) and the
    cloud's ``reclaimer``. ``store_watch(checkpoint_url, timeline)`` starts a watch of the
    trainer's checkpoints (``drill.store_watch``) and returns it, or None where the store
    cannot be read from here. ``clock`` is the drill's time, on the API server's scale
    (default ``time.time``)."""
    _refuse_protected(subject, options)
    # Before any cloud call: a permission missing now would show only after the reclaim.
    check_access(api, subject.namespace, subject.kind)
    drill = _Drill(
        subject,
        api,
        reclaimer,
        options,
        store_watch=store_watch,
        progress=progress,
        clock=clock or time.time,
    )
    stopped_by: str | None = None
    try:
        for number in range(1, options.count + 1):
            drill.round(number)
        if options.finish_seconds:
            progress("waiting for the run to complete")
            drill.until(_done, options.finish_seconds, "the run to complete")
    except DrillError as error:
        # Once a node was reclaimed, whatever stops the drill is part of the verdict.
        if not drill.timeline.of(Mark.RECLAIM):
            raise
        stopped_by = str(error)
    finally:
        drill.stop()
    return drill.report(stopped_by)
