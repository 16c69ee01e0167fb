"""The local preemption harness behind ``spotproof smoke``.

It plays kubelet and the Job controller against real trainer processes and a real (emulated)
bucket:

1. a **reference** run trains uninterrupted and reports its digest;
2. the **interrupted** run is preempted ``preemptions`` times and hard-killed
   ``hard_kills`` times (SIGKILL with no warning), at random steps. A preemption plays a
   preemption path (``spotproof.plan.simulation.preemption``): the notice, SIGTERM when the path
   delivers it (at once on GKE; after Karpenter's drain on EKS; never on a broken path or
   on AKS node auto-provisioning, whose reclaims reach no pod),
   the grace it leaves, SIGKILL when the node is gone, then a replacement. Hard kills aim
   at a checkpoint upload until one lands inside one; the first preemption starts its
   replacement *while the old process is still saving*, so two writers race on the same
   bucket;
3. the run passes only if it ends with the reference digest, graceful preemptions lose no
   step, no hard kill loses more than the async guarantee (one interval, plus the steps
   trained while the newest checkpoint was uploading), and every final save commits within
   the grace period; a preemption on a path without SIGTERM by design may lose what a
   hard kill does (two intervals: it can land in an upload at any moment). With a Job's
   ``podFailurePolicy`` and ``backoffLimit``, every pod failure is also judged as the Job
   controller would, and the run fails if the Job would have given up;
4. the graceful preemptions, read as the timeline a cluster would have shown, must also
   pass the judge of ``spotproof drill`` (``smoke.reports.drill_verdict``): one judgment for
   rehearsals and real drills.

Trainers are forked warm from a zygote (``smoke.processes.warm``), and the aimed kill holds a
commit back at a relay in front of the emulator (``smoke.processes.aimed_kill``): neither
depends on how busy the machine is.

Given a metrics registry, the interrupted run's trainers' events are recorded as the
trainer's own metrics (``runtime.metrics``), one recorder per process as each pod has its
own, and each interruption's lost steps as the harness measured them: a kill with no
notice leaves no process to count its loss, and the harness sees it anyway.
"""

from __future__ import annotations

import random
import signal
import time

from spotproof.runtime import exit_codes
from spotproof.runtime.checkpointer.layout import manifest_key, step_prefix
from spotproof.runtime.metrics import Registry
from spotproof.smoke.emulation.job_controller import DISRUPTION_TARGET, JobController
from spotproof.smoke.emulation.object_stores import Bucket, emulated
from spotproof.smoke.processes.aimed_kill import ManifestGate, freeze_inside_an_upload, gated
from spotproof.smoke.processes.lineage import Lineage
from spotproof.smoke.processes.trainer_process import Event, TrainerProcess, container_exit_code
from spotproof.smoke.processes.warm import Zygote, warm_trainers
from spotproof.smoke.reports.drill_verdict import drill_verdict
from spotproof.smoke.reports.records import (
    Interruption,
    Progress,
    SmokeConfig,
    SmokeReport,
    describe,
    judge_recovery,
    last_words,
)


def completed(process: TrainerProcess, report: SmokeReport) -> Event | None:
    """The ``done`` event of a process that trains to the end and exits 0; None otherwise,
    with why in ``report``."""
    done = process.wait_for(lambda e: e["event"] == "done", timeout=600)
    code = process.finish(timeout=60)
    if done is None or code != exit_codes.COMPLETED:
        report.failures.append(
            f"trainer {process.index} did not complete (exit {code}): {last_words(process)}"
        )
        return None
    return done


def run_to_completion(run: Lineage, process: TrainerProcess, report: SmokeReport) -> str | None:
    done = completed(process, report)
    return None if done is None else str(done["digest"])


def preempt(
    run: Lineage, process: TrainerProcess, record: Interruption, overlap: bool
) -> TrainerProcess:
    """A reclaim along the configured path: notice, SIGTERM when the path sends it, SIGKILL
    when its grace ends or the node is gone. With ``overlap`` the replacement starts as
    soon as SIGTERM is sent, as the Job controller's would."""
    config = run.config
    record.sigterm_after = config.sigterm_after
    noticed = process.now()
    if config.sigterm_after is None:
        time.sleep(config.gone_after or 0)  # the trainer works on, unaware, until the end
        process.send(signal.SIGKILL)
        record.exit_code = process.finish()
        record.at_step = process.last_step
        record.grace_seconds = 0
        record.sigkilled_after_grace = True
        record.waited_seconds = round(process.now() - noticed, 3)
        return run.start()
    if config.sigterm_after:
        time.sleep(config.sigterm_after)
    grace = config.grace_seconds
    if config.gone_after is not None:
        grace = min(grace, config.gone_after - config.sigterm_after)
    process.send(signal.SIGTERM)
    signalled = process.now()
    replacement = run.start() if overlap else None
    code = process.finish(timeout=grace)
    if code is None:
        record.last_seen.append(process.last_seen(since=signalled))
        process.send(signal.SIGKILL)
        code = process.finish()
        record.sigkilled_after_grace = True
    record.exit_code = code
    record.grace_seconds = grace
    record.waited_seconds = round(process.now() - noticed, 3)
    record.replacement_overlapped = overlap
    preempted = process.first("preempted")
    if preempted is not None:
        record.at_step = int(preempted["step"])
    final = [e for e in process.of("checkpoint") if e.get("kind") == "final"]
    if final:
        record.final_save_seconds = float(final[-1].get("since_signal", final[-1]["seconds"]))
    return replacement or run.start()


def hard_kill(
    run: Lineage, process: TrainerProcess, record: Interruption, aim: bool
) -> TrainerProcess:
    """SIGKILL, like a node that vanishes. With ``aim``, the kill lands while an upload's
    payload is in the bucket and its manifest is not: the moment between payload writes
    and the commit (``smoke.processes.aimed_kill``)."""
    aimed = _aim(run, process) if aim else None
    process.send(signal.SIGKILL)
    record.exit_code = process.finish()
    record.at_step = process.last_step
    if run.gate is not None:
        run.gate.disarm()
    saves = process.of("saving")
    newest = aimed if aimed is not None else int(saves[-1]["step"]) if saves else None
    if newest is not None:
        committed = run.observer.exists(manifest_key(newest))
        written = bool(run.observer.list(step_prefix(newest)))
        record.upload_step = newest
        record.kill_point = (
            "after-commit" if committed else "in-upload" if written else "before-upload"
        )
    return run.start()


def arm(run: Lineage, report: SmokeReport, target: int) -> bool:
    """Whether the hard kill after ``target`` is aimed (none has landed inside an upload
    yet). The gate is armed now, before the step is seen: events may be read late."""
    if any(i.landed_in_upload for i in report.interruptions):
        return False
    if run.gate is not None:
        run.gate.arm(from_step=target)
    return True


def _aim(run: Lineage, process: TrainerProcess, timeout: float = 120) -> int | None:
    """The step whose commit the trainer is stopped short of, or None if it ended first."""
    if run.gate is None:
        writer = str((process.first("resumed") or {}).get("writer"))
        return freeze_inside_an_upload(run.observer, process, writer, timeout)
    return run.gate.held(process, timeout)


def run_smoke(
    config: SmokeConfig, progress: Progress = print, metrics: Registry | None = None
) -> SmokeReport:
    report = SmokeReport(config)
    with emulated(config.store) as bucket, warm_trainers() as zygote:
        progress(f"store: {config.store} ({bucket.url})")

        progress("reference run (never interrupted)")
        reference = Lineage(config, bucket, "reference", progress, zygote=zygote)
        process = reference.start()
        reference.announce(process, reference.resumed(process))
        progress(f"  training to step {config.total_steps}")
        report.reference_digest = run_to_completion(reference, process, report)
        report.reference_seconds = time.monotonic() - reference.origin
        report.reference = reference.attempts()[0]
        progress(f"  done in {report.reference_seconds:.1f} s, digest {report.reference_digest}")

        with gated(bucket) as gate:
            _interrupted_run(config, bucket, report, progress, metrics, gate=gate, zygote=zygote)

    if config.hard_kills and not any(i.landed_in_upload for i in report.interruptions):
        report.failures.append("no hard kill landed inside a checkpoint upload")
    if report.digest is not None and report.digest != report.reference_digest:
        report.failures.append(
            f"digest {report.digest} differs from reference {report.reference_digest}"
        )
    verdict = drill_verdict(report)
    if verdict is not None:
        report.drill_failures = verdict.failures
    return report


def _interrupted_run(
    config: SmokeConfig,
    bucket: Bucket,
    report: SmokeReport,
    progress: Progress,
    metrics: Registry | None,
    *,
    gate: ManifestGate | None,
    zygote: Zygote,
) -> None:
    schedule = random.Random(config.schedule_seed)
    kinds = ["preemption"] * config.preemptions + ["hard-kill"] * config.hard_kills
    schedule.shuffle(kinds)
    progress(f"interrupted run: {' -> '.join(kinds) or 'no interruptions'}")
    if config.preemptions:
        progress(f"preemption path: {config.path}")
    run = Lineage(config, bucket, "interrupted", progress, metrics, gate=gate, zygote=zygote)
    job = JobController(config.job) if config.job else None
    process = run.start()
    resumed = run.resumed(process)
    run.announce(process, resumed)
    run.observer  # noqa: B018 - connect now, not when a kill is being aimed
    overlapped = False
    for index, kind in enumerate(kinds):
        aiming = "hard-kill" in kinds[index:] and not any(
            i.landed_in_upload for i in report.interruptions
        )
        target = place(schedule, config, resumed, remaining=len(kinds) - index, aiming=aiming)
        if target is None:
            report.failures.append(
                f"TOTAL_STEPS={config.total_steps} leaves no room for the {kind} after step "
                f"{resumed} ({len(kinds) - index} interruptions to place)"
            )
            break
        progress(f"  training to step {target}, then a {kind}")
        aim = kind == "hard-kill" and arm(run, report, target)
        if process.wait_for(lambda e, t=target: e["event"] == "step" and e["step"] >= t) is None:
            report.failures.append(
                f"trainer {process.index} ended before step {target}: {last_words(process)}"
            )
            break
        record = Interruption(kind, process.index, round(process.now(), 3), target)
        if kind == "preemption":
            process = preempt(run, process, record, overlap=not overlapped)
            overlapped = True
        else:
            process = hard_kill(run, process, record, aim=aim)
        record.newest_committed = run.newest_committed()
        if job is not None:
            # A preempted, evicted or vanished node's pod carries DisruptionTarget; a pod
            # whose node vanished has no exit code at all.
            code = container_exit_code(record.exit_code) if kind == "preemption" else None
            job.pod_failed(code, {DISRUPTION_TARGET}, f"{kind} (exit {code})")
        resumed = run.resumed(process)
        record.resumed_from = resumed
        record.steps_lost = max(0, record.at_step - resumed)
        run.lost(record.steps_lost)
        judge_interruption(record, config, report)
        report.interruptions.append(record)
        progress("  " + describe(record))
        run.announce(process, resumed)
    progress(f"  training to step {config.total_steps}")
    report.digest = run_to_completion(run, process, report)
    report.interrupted_seconds = time.monotonic() - run.origin
    report.attempts = run.attempts()
    if job is not None:
        report.job_verdicts = job.verdicts
        if job.failed:
            report.failures.append(f"the Job would have failed: {job.failed}")


def place(
    schedule: random.Random, config: SmokeConfig, resumed: int, remaining: int, *, aiming: bool
) -> int | None:
    """The step of the next interruption: between half an interval and two intervals after
    ``resumed``, within an equal share of the steps left for each interruption still to
    place, one interval of which is kept while a kill is still to be aimed (it waits for
    the next upload, or more than one under load). None when that share is too small."""
    kept = config.interval if aiming else 0
    share = (config.total_steps - 1 - resumed) // remaining - kept
    latest = min(2 * config.interval, share)
    earliest = min(max(2, config.interval // 2), latest)
    if latest < 1:
        return None
    return resumed + schedule.randint(earliest, latest)


def judge_interruption(record: Interruption, config: SmokeConfig, report: SmokeReport) -> None:
    if record.kind == "preemption" and config.unannounced:
        # A path that gives no SIGTERM by design (AKS node auto-provisioning's): the node
        # is gone with the trainer in it, which loses what a hard kill does, at any moment.
        # A path the stack broke is judged as a preemption, and fails for its loss.
        record.max_steps_lost = 2 * config.interval
    elif record.kind == "preemption":
        if record.exit_code != exit_codes.PREEMPTED:
            report.failures.append(
                f"preempted trainer exited {record.exit_code}, not {exit_codes.PREEMPTED}"
            )
        if record.final_save_seconds is None or record.sigkilled_after_grace:
            report.failures.append(
                f"final checkpoint at step {record.at_step} did not commit within the grace period"
                + "".join(f"; {seen}" for seen in record.last_seen)
            )
        # An overlapped replacement resumes from what was committed when it started; the
        # final save still commits, and the replacement redoes those steps bit-exactly.
        record.max_steps_lost = None if record.replacement_overlapped else 0
    else:
        in_flight = (
            record.upload_step if record.kill_point in ("in-upload", "before-upload") else None
        )
        record.max_steps_lost = config.interval + (
            record.at_step - in_flight if in_flight is not None else 0
        )
    judge_recovery(record.kind, record, report, "the replacement")
