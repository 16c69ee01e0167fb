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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

from spotproof.kube.smoke import JOB_NAME
from spotproof.plan import PlanResult
from spotproof.plan.simulation.preemption import PreemptionPath
from spotproof.runtime import settings
from spotproof.runtime.storage import SCHEMES
from spotproof.smoke.job import JobPolicy
from spotproof.smoke.records import SmokeConfig

JOB = "kubernetes:batch/v1:Job"
_EMULATOR_OF_PROTOCOL = {"file": "file", "s3": "s3", "gcs": "gcs", "abfs": "azure"}
EMULATED_STORE = {scheme: _EMULATOR_OF_PROTOCOL[protocol] for scheme, protocol in SCHEMES.items()}
"""The emulator (:data:`spotproof.smoke.emulators.STORES`) for each checkpoint URL scheme
the runtime opens (``spotproof.runtime.storage.SCHEMES``)."""


class RehearsalError(ValueError):
    """The plan has nothing to rehearse (no smoke Job): bad input, exit 2."""


@dataclass(frozen=True)
class Rehearsal:
    config: SmokeConfig
    path: PreemptionPath | None
    """None when the Job runs on capacity that is not reclaimed (hard kills only)."""
    job_env: Mapping[str, str]
    """The trainer environment the Job renders, for the report."""

    def describe(self) -> list[str]:
        def shown(setting: settings.Setting) -> str:
            return f"{setting.name}={self.job_env.get(setting.name)}"

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
    if path is None:
        config = replace(config, preemptions=0)
    else:
        config = replace(
            config,
            sigterm_after=None if path.sigterm_at is None else path.sigterm_at * time_scale,
            gone_after=path.notice_seconds * time_scale,
            unannounced=bool(path.unannounced),
            path=path.line() + (f" (times x{time_scale:g})" if time_scale != 1 else ""),
        )
    return Rehearsal(config, path, env)
