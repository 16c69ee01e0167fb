"""``spotproof smoke --stack NAME``: rehearse what a stack would really do to its smoke Job.

The stack is planned offline; from the plan come the rendered Job (its trainer's
environment, ``terminationGracePeriodSeconds``, ``podFailurePolicy`` and ``backoffLimit``)
and the preemption path of the capacity it targets (``spotproof.plan.simulation.preemption``): when
SIGTERM arrives after the notice, how much grace is left, when the node is gone. The
harness then plays exactly that against the local trainer. A path that delivers no
SIGTERM makes every graceful preemption lose steps, so the rehearsal fails with it.

Sizes are the one thing not taken from the Job: a real run's ``TOTAL_STEPS`` of a
``MODEL_MB`` model is hours of CPU, so the rehearsal trains fewer steps of a smaller model
(say which with ``--steps`` and ``--model-mb``) at the Job's checkpoint interval, each step
stretched so that the time from notice to SIGTERM spans about half an interval, as it
would for a real model. Times can be compressed with a time scale, which shrinks notice, drain
and grace alike.

The bucket is the emulator of the store the Job writes to (its ``CHECKPOINT_URL`` scheme:
``az://`` is rehearsed against Azurite, ``gs://`` against fake-gcs-server, ``s3://`` against
moto), unless the caller names another.

A user's own trainer (``spotproof smoke --command``, :func:`command_rehearsal`) is rehearsed
on the path of the stack's own training workloads (a Job or JobSet whose pod checkpoints,
``plan.simulation.intervals``), or of the smoke Job where that is all the stack runs, at
that workload's checkpoint interval; its steps are the user's own, not stretched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

from spotproof.kube.smoke import JOB_NAME
from spotproof.plan import PlanResult
from spotproof.plan.model import PreemptionPath
from spotproof.plan.simulation.intervals import TRAINING_KINDS
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.plan.simulation.preemption import pod_grace
from spotproof.runtime import settings
from spotproof.runtime.storage.backends import SCHEMES
from spotproof.scheduling.run_profile import RunProfile
from spotproof.smoke.emulation.job_controller import JobPolicy
from spotproof.smoke.reports.records import SmokeConfig

JOB = "kubernetes:batch/v1:Job"
EMULATED_STORE = {scheme: backend.name for scheme, backend in SCHEMES.items()}
"""The emulator (:data:`spotproof.smoke.emulation.object_stores.STORES`) for each checkpoint
URL scheme the runtime opens (``spotproof.runtime.storage.backends.SCHEMES``)."""


class RehearsalError(ValueError):
    """The plan has nothing to rehearse (no smoke Job): bad input, exit 2."""


@dataclass(frozen=True)
class Rehearsal:
    config: SmokeConfig
    path: PreemptionPath | None
    """None when the Job runs on capacity that is not reclaimed (hard kills only)."""
    job_env: Mapping[str, str]
    """The trainer environment the Job renders, for the report."""
    workload: str = ""
    """The training workload whose path a user's command is rehearsed on; empty for the
    smoke Job's own rehearsal."""

    def describe(self) -> list[str]:
        def shown(setting: settings.Setting) -> str:
            return f"{setting.name}={self.job_env.get(setting.name)}"

        if self.workload:
            lines = [
                f"{self.workload}: {shown(settings.CHECKPOINT_INTERVAL)}, grace "
                f"{self.config.grace_seconds:g} s as rehearsed; your command is run on its path"
            ]
        else:
            lines = [
                f"Job {JOB_NAME}: {shown(settings.CHECKPOINT_INTERVAL)} {shown(settings.SEED)} "
                f"{shown(settings.GRACE_SECONDS)}; it trains {shown(settings.TOTAL_STEPS)} of "
                f"{shown(settings.MODEL_MB)}, rehearsed as {self.config.total_steps} steps of "
                f"{self.config.model_mb:g} MiB",
            ]
        if self.path is None:
            lines.append("no reclaimable capacity: rehearsing hard kills (node failures) only")
        else:
            lines.append(f"preemption path: {self.path.line()}")
        return lines


def _job(result: PlanResult) -> tuple[dict[str, Any], str]:
    jobs = [
        r
        for r in result.recording.of_type(JOB)
        if (r.inputs.get("metadata") or {}).get("name") == JOB_NAME
    ]
    if not jobs:
        raise RehearsalError(
            f"stack {result.facts.stack} renders no Job {JOB_NAME}; allowed: a stack whose "
            "spotproof:smokeTest is enabled"
        )
    return jobs[0].inputs.get("spec") or {}, jobs[0].name


def emulated_store(checkpoint_url: str) -> str:
    """The emulator standing in for the bucket at ``checkpoint_url``; ``file`` for any other."""
    return EMULATED_STORE.get(urlparse(checkpoint_url).scheme, "file")


def rehearsal(
    result: PlanResult,
    base: SmokeConfig,
    *,
    total_steps: int | None,
    time_scale: float,
    store: str | None = None,
) -> Rehearsal:
    """The harness configuration that plays the plan's smoke Job and its preemption path,
    against ``store``, or by default the emulator of the store the Job writes to."""
    spec, resource = _job(result)
    pod = (spec.get("template") or {}).get("spec") or {}
    container = (pod.get("containers") or [{}])[0]
    env = {e.get("name"): str(e.get("value")) for e in container.get("env") or []}
    interval = int(env.get(settings.CHECKPOINT_INTERVAL.name) or base.interval)
    outcome = next(o for o in result.outcomes if o.workload.resource == resource)
    path = outcome.paths[0] if outcome.paths else None
    declared = float(pod.get("terminationGracePeriodSeconds", 30))
    grace = path.grace_seconds if path is not None and path.sigterm_at is not None else declared
    # The trainer keeps training while the notice travels: stretch its steps so that this
    # wait spans half a checkpoint interval, as it does for a real model whose steps take
    # seconds, instead of the whole tiny run.
    wait = 0.0
    if path is not None:
        wait = (path.notice_seconds if path.sigterm_at is None else path.sigterm_at) * time_scale
    interruptions = base.preemptions + base.hard_kills
    config = replace(
        base,
        store=store or emulated_store(env.get(settings.CHECKPOINT_URL.name, "")),
        interval=interval,
        total_steps=total_steps or max(base.total_steps, 3 * (interruptions + 1) * interval),
        step_seconds=max(base.step_seconds, wait / (2 * interval)),
        seed=int(env.get(settings.SEED.name) or base.seed),
        grace_seconds=grace * time_scale,
        job=JobPolicy.of(spec),
    )
    return Rehearsal(_on_path(config, path, time_scale), path, env)


def _on_path(config: SmokeConfig, path: PreemptionPath | None, time_scale: float) -> SmokeConfig:
    """``config`` playing ``path``'s notice, SIGTERM and end of the node (none: no
    preemptions, the capacity is not reclaimed)."""
    if path is None:
        return replace(config, preemptions=0)
    return replace(
        config,
        sigterm_after=None if path.sigterm_at is None else path.sigterm_at * time_scale,
        gone_after=path.notice_seconds * time_scale,
        unannounced=bool(path.unannounced),
        path=path.line() + (f" (times x{time_scale:g})" if time_scale != 1 else ""),
    )


def _trains(outcome: Outcome) -> bool:
    workload = outcome.workload
    profile = RunProfile.of_pod(workload.pod_annotations, workload.pod_spec)
    return not outcome.system and workload.kind in TRAINING_KINDS and profile.trains


def _trainer_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The literal environment of a pod's trainer: the container that sets
    ``CHECKPOINT_INTERVAL``, else its first."""
    containers = pod.get("containers") or [{}]
    named = settings.CHECKPOINT_INTERVAL.name
    trainer = next(
        (c for c in containers if any(v.get("name") == named for v in c.get("env") or [])),
        containers[0],
    )
    return {e.get("name"): str(e.get("value")) for e in trainer.get("env") or [] if "value" in e}


def command_rehearsal(
    result: PlanResult, base: SmokeConfig, *, time_scale: float, store: str | None = None
) -> Rehearsal:
    """The configuration that plays, against a user's command, the preemption path of the
    stack's own training workload (the first that is not the smoke Job; else the smoke
    Job): its worst path (the least grace a trainer can use; none without SIGTERM), its
    grace and checkpoint interval, against ``store`` or the emulator of its bucket."""
    training = [o for o in result.outcomes if _trains(o)]
    own = [o for o in training if o.workload.name.split("/")[0] != JOB_NAME]
    chosen = (own or training or [None])[0]
    if chosen is None:
        raise RehearsalError(
            f"stack {result.facts.stack} renders no training workload; allowed: a stack "
            "with a TrainingJob, or whose spotproof:smokeTest is enabled"
        )
    pod = chosen.workload.pod_spec
    env = _trainer_env(pod)
    paths = chosen.paths
    path = (
        min(paths, key=lambda p: -1.0 if p.sigterm_at is None else p.usable_grace)
        if paths
        else None
    )
    grace = path.usable_grace if path is not None and path.sigterm_at is not None else None
    interval = RunProfile.of_pod(chosen.workload.pod_annotations, pod).interval_steps
    config = replace(
        base,
        store=store or emulated_store(env.get(settings.CHECKPOINT_URL.name, "")),
        interval=interval or base.interval,
        grace_seconds=(grace if grace is not None else pod_grace(pod)) * time_scale,
        job=None,
    )
    return Rehearsal(_on_path(config, path, time_scale), path, env, chosen.workload.label)
