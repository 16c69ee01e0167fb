"""The local preemption harness behind ``spotproof smoke``.

It plays kubelet and the Job controller against real trainer processes and a real (emulated)
bucket:

1. a **reference** run trains uninterrupted and reports its digest;
2. the **interrupted** run is preempted ``preemptions`` times and hard-killed
   ``hard_kills`` times (SIGKILL with no warning), at random steps. A preemption plays a
   preemption path (``spotproof.plan.preemption``): the notice, SIGTERM when the path
   delivers it (at once on GKE; after Karpenter's drain on EKS; never on a broken path),
   the grace it leaves, SIGKILL when the node is gone, then a replacement. Hard kills aim
   at a checkpoint upload until one lands inside one; the first preemption starts its
   replacement *while the old process is still saving*, so two writers race on the same
   bucket;
3. the run passes only if it ends with the reference digest, graceful preemptions lose no
   step, no hard kill loses more than the async guarantee (one interval, plus the steps
   trained while the newest checkpoint was uploading), and every final save commits within
   the grace period. With a Job's ``podFailurePolicy`` and ``backoffLimit``, every pod
   failure is also judged as the Job controller would, and the run fails if the Job would
   have given up.
"""

from __future__ import annotations

import functools
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spotproof.runtime import exit_codes
from spotproof.runtime.checkpoint import CheckpointStore, manifest_key, step_prefix
from spotproof.runtime.storage import ObjectStore, open_store
from spotproof.smoke.emulators import Bucket, emulated
from spotproof.smoke.job import DISRUPTION_TARGET, JobController, JobPolicy
from spotproof.smoke.process import TrainerProcess


@dataclass(frozen=True)
class SmokeConfig:
    store: str = "file"
    preemptions: int = 2
    hard_kills: int = 2
    total_steps: int = 240
    interval: int = 20
    model_mb: float = 4
    seed: int = 0
    grace_seconds: float = 15
    step_seconds: float = 0.005
    part_kb: int = 256
    """Small parts make an upload many objects, so a kill can land between them."""
    schedule_seed: int = 1
    sigterm_after: float | None = 0.0
    """Seconds from the reclaim notice to SIGTERM; None when the path never sends it."""
    gone_after: float | None = None
    """Seconds from the notice to the node being gone (SIGKILL); None: when grace ends."""
    path: str = "SIGTERM at once, SIGKILL when the grace period ends"
    """The preemption path rehearsed, in words."""
    job: JobPolicy | None = None
    """The Job's failure policy; None to skip the Job controller's verdict."""


@dataclass
class Interruption:
    kind: str
    """``preemption`` (SIGTERM, grace, SIGKILL) or ``hard-kill`` (SIGKILL)."""
    attempt: int
    at: float
    """Seconds since the interrupted run started."""
    at_step: int
    """The step the process had reached."""
    exit_code: int | None = None
    resumed_from: int | None = None
    steps_lost: int | None = None
    max_steps_lost: int | None = None
    final_save_seconds: float | None = None
    """SIGTERM to committed final checkpoint."""
    grace_seconds: float | None = None
    sigterm_after: float | None = None
    """Seconds from the notice to SIGTERM; None when none was sent."""
    sigkilled_after_grace: bool = False
    last_seen: list[str] = field(default_factory=list)
    """What each process SIGKILLed at the end of its grace last reported, and when: where
    the grace period went."""
    replacement_overlapped: bool = False
    newest_committed: int | None = None
    """Newest step with a manifest once the process was gone: a replacement that starts
    afterwards must resume from it (nothing committed is ever lost)."""
    upload_step: int | None = None
    peers_not_waiting: list[int] = field(default_factory=list)
    """Gang ranks stopped by a peer that were not waiting to be torn down when the gang
    was: exited on their own, or still busy after the time they are given."""
    kill_point: str | None = None
    """Where a hard kill hit the newest checkpoint: ``before-upload`` (no part written),
    ``in-upload`` (parts written, no manifest) or ``after-commit``."""

    @property
    def landed_in_upload(self) -> bool:
        return self.kill_point == "in-upload"


@dataclass
class Attempt:
    index: int
    started: float
    ended: float | None
    resumed_from: int
    exit_code: int | None
    steps: list[tuple[float, int]] = field(default_factory=list)


@dataclass
class SmokeReport:
    config: SmokeConfig
    reference_digest: str | None = None
    digest: str | None = None
    reference_seconds: float = 0.0
    interrupted_seconds: float = 0.0
    interruptions: list[Interruption] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    reference: Attempt | None = None
    failures: list[str] = field(default_factory=list)
    job_verdicts: list[str] = field(default_factory=list)
    """The Job controller's action on each failed pod (``preemption (exit 143): Ignore``)."""

    @property
    def passed(self) -> bool:
        return (
            not self.failures and self.digest is not None and self.digest == self.reference_digest
        )


Progress = Callable[[str], None]


def trainer_env(config: SmokeConfig, bucket: Bucket, name: str) -> dict[str, str]:
    """The environment of a trainer writing under ``name`` in ``bucket``."""
    return {
        **bucket.env,
        "CHECKPOINT_URL": bucket.prefix(name),
        "CHECKPOINT_INTERVAL": str(config.interval),
        "TOTAL_STEPS": str(config.total_steps),
        "SEED": str(config.seed),
        "MODEL_MB": str(config.model_mb),
        "GRACE_SECONDS": str(config.grace_seconds),
        "STEP_SECONDS": str(config.step_seconds),
        "CHECKPOINT_PART_KB": str(config.part_kb),
        "EMIT_STEPS": "1",
    }


class _Run:
    """One trainer lineage writing to one checkpoint prefix."""

    def __init__(self, config: SmokeConfig, bucket: Bucket, name: str, progress: Progress):
        self.config, self.progress = config, progress
        self.url = bucket.prefix(name)
        self.bucket = bucket
        self.origin = time.monotonic()
        self.processes: list[TrainerProcess] = []
        self.env = trainer_env(config, bucket, name)

    def start(self) -> TrainerProcess:
        process = TrainerProcess(self.env, self.origin, index=len(self.processes))
        self.processes.append(process)
        return process

    def resumed(self, process: TrainerProcess) -> int:
        event = process.wait_for(lambda e: e["event"] == "resumed")
        if event is None:
            raise RuntimeError(
                f"trainer {process.index} exited before resuming: {last_words(process)}"
            )
        self.progress(f"  attempt {process.index}: resumed at step {event['step']}")
        return int(event["step"])

    @functools.cached_property
    def observer(self) -> ObjectStore:
        """A client of the run's bucket, ready before it is needed: aimed kills poll it."""
        with self.bucket.apply():
            return open_store(self.url)

    def newest_committed(self) -> int | None:
        steps = CheckpointStore(self.url, store=self.observer).committed_steps()
        return steps[-1] if steps else None

    def attempts(self) -> list[Attempt]:
        return [attempt_of(p) for p in self.processes]


def attempt_of(process: TrainerProcess) -> Attempt:
    """What the report and the timeline show of one trainer process."""
    return Attempt(
        process.index,
        process.started,
        process.ended,
        int((process.first("resumed") or {}).get("step", 0)),
        process.popen.returncode,
        [(t, int(e["step"])) for t, e in process.events if e["event"] in ("step", "resumed")],
    )


def last_words(process: TrainerProcess) -> str:
    """The process's last line on stderr, or its exit code: why it stopped, in one line."""
    return process.stderr[-1] if process.stderr else f"exit code {process.popen.returncode}"


def _run_to_completion(run: _Run, process: TrainerProcess, report: SmokeReport) -> str | None:
    done = process.wait_for(lambda e: e["event"] == "done", timeout=600)
    code = process.finish(timeout=60)
    if done is None or code != exit_codes.COMPLETED:
        report.failures.append(
            f"trainer {process.index} did not complete (exit {code}): {last_words(process)}"
        )
        return None
    return str(done["digest"])


def _preempt(
    run: _Run, process: TrainerProcess, record: Interruption, overlap: bool
) -> TrainerProcess:
    """A reclaim along the configured path: notice, SIGTERM when the path sends it, SIGKILL
    when its grace ends or the node is gone. With ``overlap`` the replacement starts as
    soon as SIGTERM is sent, as the Job controller's would."""
    config = run.config
    record.sigterm_after = config.sigterm_after
    if config.sigterm_after is None:
        time.sleep(config.gone_after or 0)  # the trainer works on, unaware, until the end
        process.send(signal.SIGKILL)
        record.exit_code = process.finish()
        record.at_step = process.last_step
        record.grace_seconds = 0
        record.sigkilled_after_grace = True
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
    record.replacement_overlapped = overlap
    preempted = process.first("preempted")
    if preempted is not None:
        record.at_step = int(preempted["step"])
    final = [e for e in process.of("checkpoint") if e.get("kind") == "final"]
    if final:
        record.final_save_seconds = float(final[-1].get("since_signal", final[-1]["seconds"]))
    return replacement or run.start()


def _hard_kill(
    run: _Run, process: TrainerProcess, record: Interruption, aim: bool
) -> TrainerProcess:
    """SIGKILL, like a node that vanishes. With ``aim``, the kill lands while part of an
    upload's payload is in the bucket and its manifest is not: the moment between payload
    writes and the commit."""
    if aim:
        _freeze_inside_an_upload(run, process)
    process.send(signal.SIGKILL)
    record.exit_code = process.finish()
    record.at_step = process.last_step
    saves = process.of("saving")
    if saves:
        newest = int(saves[-1]["step"])
        committed = run.observer.exists(manifest_key(newest))
        written = bool(run.observer.list(step_prefix(newest)))
        record.upload_step = newest
        record.kill_point = (
            "after-commit" if committed else "in-upload" if written else "before-upload"
        )
    return run.start()


AIM_SLICE_SECONDS = 0.002
"""How long the aimed trainer runs between two looks while no upload of it is in flight;
once one is, it is only let run for the moment between SIGCONT and SIGSTOP."""
SETTLE_SECONDS = 0.02
"""Time for requests the trainer sent before it was stopped to land in the bucket."""


def _freeze_inside_an_upload(run: _Run, process: TrainerProcess, timeout: float = 120) -> None:
    """Run the trainer in slices (SIGCONT, SIGSTOP) and look at the bucket while it is
    stopped, until its newest upload has payload and no manifest; return with it stopped.

    Polling a running trainer raced it: a slow listing (Azurite) let an upload, or the whole
    run, finish between two looks. Frozen, the trainer cannot send anything new while it is
    looked at; requests it sent just before are given :data:`SETTLE_SECONDS` to land, so a
    manifest already on its way is seen and the aim moves on to the next upload."""
    writer = (process.first("resumed") or {}).get("writer")
    committed: set[int] = set()
    deadline = time.monotonic() + timeout
    while process.popen.poll() is None and time.monotonic() < deadline:
        process.send(signal.SIGSTOP)
        saves = process.of("saving")
        step = int(saves[-1]["step"]) if saves else None
        in_flight = step is not None and step not in committed
        if in_flight and run.observer.exists(manifest_key(step)):
            committed.add(step)
            in_flight = False
        if in_flight and run.observer.list(f"{step_prefix(step)}/{writer}"):
            time.sleep(SETTLE_SECONDS)
            if not run.observer.exists(manifest_key(step)):
                return
            committed.add(step)
            in_flight = False
        process.send(signal.SIGCONT)
        if not in_flight:
            time.sleep(AIM_SLICE_SECONDS)


def run_smoke(config: SmokeConfig, progress: Progress = print) -> SmokeReport:
    report = SmokeReport(config)
    with emulated(config.store) as bucket:
        progress(f"store: {config.store} ({bucket.url})")

        progress("reference run (never interrupted)")
        reference = _Run(config, bucket, "reference", progress)
        process = reference.start()
        reference.resumed(process)
        report.reference_digest = _run_to_completion(reference, process, report)
        report.reference_seconds = time.monotonic() - reference.origin
        report.reference = reference.attempts()[0]
        progress(f"  done in {report.reference_seconds:.1f} s, digest {report.reference_digest}")

        _interrupted_run(config, bucket, report, progress)

    if config.hard_kills and not any(i.landed_in_upload for i in report.interruptions):
        report.failures.append("no hard kill landed inside a checkpoint upload")
    if report.digest is not None and report.digest != report.reference_digest:
        report.failures.append(
            f"digest {report.digest} differs from reference {report.reference_digest}"
        )
    return report


def _interrupted_run(
    config: SmokeConfig, bucket: Bucket, report: SmokeReport, progress: Progress
) -> None:
    schedule = random.Random(config.schedule_seed)
    kinds = ["preemption"] * config.preemptions + ["hard-kill"] * config.hard_kills
    schedule.shuffle(kinds)
    progress(f"interrupted run: {' -> '.join(kinds) or 'no interruptions'}")
    if config.preemptions:
        progress(f"preemption path: {config.path}")
    run = _Run(config, bucket, "interrupted", progress)
    job = JobController(config.job) if config.job else None
    process = run.start()
    resumed = run.resumed(process)
    run.observer  # noqa: B018 - connect now, not when a kill is being aimed
    overlapped = False
    for index, kind in enumerate(kinds):
        aiming = "hard-kill" in kinds[index:] and not any(
            i.landed_in_upload for i in report.interruptions
        )
        target = _place(schedule, config, resumed, remaining=len(kinds) - index, aiming=aiming)
        if target is None:
            report.failures.append(
                f"TOTAL_STEPS={config.total_steps} leaves no room for the {kind} after step "
                f"{resumed} ({len(kinds) - index} interruptions to place)"
            )
            break
        if process.wait_for(lambda e, t=target: e["event"] == "step" and e["step"] >= t) is None:
            report.failures.append(
                f"trainer {process.index} ended before step {target}: {last_words(process)}"
            )
            break
        record = Interruption(kind, process.index, round(process.now(), 3), target)
        if kind == "preemption":
            process = _preempt(run, process, record, overlap=not overlapped)
            overlapped = True
        else:
            landed = any(i.landed_in_upload for i in report.interruptions)
            process = _hard_kill(run, process, record, aim=not landed)
        record.newest_committed = run.newest_committed()
        if job is not None:
            # A preempted, evicted or vanished node's pod carries DisruptionTarget; a pod
            # whose node vanished has no exit code at all.
            code = container_exit_code(record.exit_code) if kind == "preemption" else None
            job.pod_failed(code, {DISRUPTION_TARGET}, f"{kind} (exit {code})")
        resumed = run.resumed(process)
        record.resumed_from = resumed
        record.steps_lost = max(0, record.at_step - resumed)
        _judge(record, config, report)
        report.interruptions.append(record)
        progress("  " + describe(record))
    report.digest = _run_to_completion(run, process, report)
    report.interrupted_seconds = time.monotonic() - run.origin
    report.attempts = run.attempts()
    if job is not None:
        report.job_verdicts = job.verdicts
        if job.failed:
            report.failures.append(f"the Job would have failed: {job.failed}")


def _place(
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


def container_exit_code(returncode: int | None) -> int | None:
    """What the container runtime reports: 128 + N for a process killed by signal N."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


def _judge(record: Interruption, config: SmokeConfig, report: SmokeReport) -> None:
    if record.kind == "preemption":
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


def judge_recovery(label: str, record: Interruption, report: SmokeReport, resumer: str) -> None:
    """Whoever resumed (``resumer``) lost nothing committed, unless it started while the
    old process was still saving, and no more than ``record.max_steps_lost`` steps."""
    committed = record.newest_committed
    started_after_exit = not record.replacement_overlapped
    if started_after_exit and committed is not None and (record.resumed_from or 0) < committed:
        report.failures.append(
            f"{label}: step {committed} was committed but {resumer} resumed from "
            f"{record.resumed_from}"
        )
    lost = record.steps_lost or 0
    if record.max_steps_lost is not None and lost > record.max_steps_lost:
        report.failures.append(
            f"{label} at step {record.at_step} lost {lost} steps (at most {record.max_steps_lost})"
        )


def describe(record: Interruption) -> str:
    text = (
        f"{record.kind} at step {record.at_step}: "
        f"resumed from {record.resumed_from}, {record.steps_lost} steps lost"
    )
    if record.kind == "preemption":
        save = (
            f"{record.final_save_seconds:.2f} s"
            if record.final_save_seconds is not None
            else "none"
        )
        if record.sigterm_after is None:
            text += "; no SIGTERM: killed when the node was gone"
        elif record.sigterm_after:
            text += f"; SIGTERM {record.sigterm_after:g} s after the notice"
        text += f"; final checkpoint {save} of {record.grace_seconds:g} s grace"
        if record.replacement_overlapped:
            text += "; replacement started while the old process was saving"
    elif record.kill_point:
        text += f"; killed {record.kill_point.replace('-', ' ')} of step {record.upload_step}"
    return text
