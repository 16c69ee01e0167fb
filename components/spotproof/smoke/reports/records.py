"""What a rehearsal is given and what it records, shared by the single-trainer harness
(``spotproof.smoke.runs.solo``) and the gang harness (``spotproof.smoke.runs.gang``): the
configuration, one record per interruption and per trainer process, the report, and the
judgment both make of a recovery."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from spotproof.runtime import settings
from spotproof.smoke.emulation.job_controller import JobPolicy
from spotproof.smoke.emulation.object_stores import Bucket
from spotproof.smoke.processes.trainer_process import TrainerProcess


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
    unannounced: bool = False
    """The path gives no SIGTERM by the platform's design, not by a stack's mistake (AKS
    node auto-provisioning's, ``PreemptionPath.unannounced``): its reclaims are kills, not
    graceful preemptions for the drill's judge."""
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
    waited_seconds: float | None = None
    """From the notice to the process gone: the notice, then the final save or the whole
    grace, as the rehearsal waited them out."""
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
    resumed_tiers: list[str] = field(default_factory=list)
    """With ``--tiers``: where each rank read its shard of the step resumed from
    (``memory``, ``peer`` or ``bucket``)."""
    replaced: list[int] = field(default_factory=list)
    """With ``--tiers``: the places in the gang whose pods were replaced; every other pod
    kept running through the interruption (all of them, when the gang was restarted)."""
    stall_seconds: float | None = None
    """With ``--tiers``: from the loss (or the notice) to the gang's next step, seconds."""
    kill_point: str | None = None
    """Where a hard kill hit the newest checkpoint: ``before-upload`` (no part written),
    ``in-upload`` (parts written, no manifest) or ``after-commit``; where a kill during a
    restore hit it: ``in-restore`` (a read of it held), ``at-restore`` (as the restore
    began) or ``after-restore``."""

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
    drill_failures: list[str] | None = None
    """What ``spotproof drill``'s judge found wrong with the graceful preemptions, read as a
    drill's timeline (``smoke.reports.drill_verdict``); None when none was played."""

    @property
    def passed(self) -> bool:
        return (
            not self.failures
            and not self.drill_failures
            and self.digest is not None
            and self.digest == self.reference_digest
        )


Progress = Callable[[str], None]


def trainer_env(config: SmokeConfig, bucket: Bucket, name: str) -> dict[str, str]:
    """The environment of a trainer writing under ``name`` in ``bucket``."""
    return {
        **bucket.env,
        settings.CHECKPOINT_URL.name: bucket.prefix(name),
        settings.CHECKPOINT_INTERVAL.name: str(config.interval),
        settings.TOTAL_STEPS.name: str(config.total_steps),
        settings.SEED.name: str(config.seed),
        settings.MODEL_MB.name: str(config.model_mb),
        settings.GRACE_SECONDS.name: str(config.grace_seconds),
        settings.STEP_SECONDS.name: str(config.step_seconds),
        settings.CHECKPOINT_PART_KB.name: str(config.part_kb),
        settings.EMIT_STEPS.name: "1",
    }


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
    elif record.kind == RESTORE_KILL:
        text += "; " + _restore_point(record)
    elif record.kill_point:
        text += f"; killed {record.kill_point.replace('-', ' ')} of step {record.upload_step}"
    return text


RESTORE_KILL = "restore-kill"
"""The kind of an interruption that kills a replacement while it restores."""


def _restore_point(record: Interruption) -> str:
    """Where a kill during a restore landed, in words."""
    step = record.upload_step
    if record.kill_point == "in-restore":
        return f"killed while it read the checkpoint of step {step}"
    if record.kill_point == "at-restore":
        return "killed as it began to restore, before it read anything"
    return "killed only once it had restored (the restore was too quick to catch)"
