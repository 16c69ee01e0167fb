"""Bucket lifecycle rules, simulated against what the checkpoint runtime does to the bucket.

The runtime writes every checkpoint under new keys (one manifest, its parts) and deletes
committed steps beyond the newest ``keep``. In a versioned bucket a delete keeps the data
as a noncurrent version (S3 also leaves a delete marker), so only the lifecycle rules ever
free it. Two things must hold for any rule set a stack renders:

1. a deleted checkpoint's data stays recoverable for the bucket's ``noncurrentDays`` and
   is gone soon after (within the day the lifecycle run may take), delete markers
   included;
2. the newest ``keep`` committed checkpoints are never expired, however long training
   pauses (a Job queued for weeks must still resume).

This module replays that history day by day under each cloud's documented semantics and
reports where either fails.

Each store's documented semantics live in its own module (``s3``, ``gcs``, ``azure``),
with their sources, named by the store's record in ``runtime.storage.backends``
(``lifecycle``); ``versions`` is the bucket they act on.
"""

from __future__ import annotations

from typing import Any

from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.plan.simulation.lifecycle.versions import (
    RUN_LATENESS_DAYS,
    Bucket,
    Delete,
    Finding,
    Rules,
)
from spotproof.policy import Violation
from spotproof.runtime.checkpointer.layout import manifest_key, part_key
from spotproof.runtime.storage.backends import STORE_BACKENDS, load

TRAINING_DAYS = 8
"""Days the simulated run commits a checkpoint (one a day), before it pauses."""
PAUSE_DAYS = 400
"""Days the simulated run then waits, queued, before resuming."""
LIFECYCLE_POLICY = "bucket-lifecycle"


def store_modules() -> list[Any]:
    """Each store's module of lifecycle semantics, with ``cases``, the buckets of a plan it
    judges: those the stores' records name (``runtime.storage.backends``)."""
    return [load(backend.lifecycle) for backend in STORE_BACKENDS if backend.lifecycle]


def simulate(
    rules: Rules,
    delete: Delete,
    *,
    prefix: str,
    keep: int,
    retention_days: int,
    late_fix: str = "expire noncurrent versions {days} days after they become noncurrent",
) -> list[Finding]:
    """Replay a run that commits one checkpoint a day for :data:`TRAINING_DAYS` days,
    keeping the newest ``keep``, then pauses for :data:`PAUSE_DAYS`; report what the
    rules get wrong."""
    bucket = Bucket()
    committed: list[int] = []
    deleted_on: dict[str, int] = {}
    findings: list[Finding] = []

    def keys(step: int) -> list[str]:
        return [f"{prefix}{manifest_key(step)}", f"{prefix}{part_key(step, 'w', 'state', 0)}"]

    for day in range(TRAINING_DAYS + PAUSE_DAYS):
        if day < TRAINING_DAYS:
            committed.append(day)
            for key in keys(day):
                bucket.put(key, day)
            for step in committed[:-keep]:
                for key in keys(step):
                    delete(bucket, key, day)
                    deleted_on[key] = day
            committed = committed[-keep:]
        rules(bucket, day)
        for step in committed:
            for key in keys(step):
                if not any(v.live and not v.delete_marker for v in bucket.stored(key)):
                    findings.append(
                        Finding(
                            f"the lifecycle expires kept checkpoint {key} on day {day}, "
                            f"{day - step} days after it was written",
                            "do not expire current versions under the checkpoint prefix",
                        )
                    )
                    return findings

    for key, day in sorted(deleted_on.items()):
        left = bucket.stored(key)
        freed = max((v.removed or 0 for v in bucket.versions[key]), default=day)
        if left:
            what = "the delete marker" if all(v.delete_marker for v in left) else "the data"
            return [
                *findings,
                Finding(
                    f"{what} of deleted checkpoint {key} is never purged",
                    _purge_fix(what),
                ),
            ]
        if freed - day < retention_days:
            return [
                *findings,
                Finding(
                    f"deleted checkpoint {key} is purged after {freed - day} days, before "
                    f"noncurrentDays ({retention_days}) have passed",
                    f"keep deleted data recoverable for {retention_days} days",
                ),
            ]
        if freed - day > retention_days + RUN_LATENESS_DAYS:
            return [
                *findings,
                Finding(
                    f"deleted checkpoint {key} is purged after {freed - day} days, "
                    f"not within noncurrentDays ({retention_days})",
                    late_fix.format(days=retention_days),
                ),
            ]
    return findings


def _purge_fix(what: str) -> str:
    if what == "the delete marker":
        return "add Expiration.ExpiredObjectDeleteMarker so markers without data are removed"
    return (
        "expire noncurrent versions by days alone: a checkpoint key is written once, so "
        "its one noncurrent version never has newer ones (drop NewerNoncurrentVersions / "
        "numNewerVersions from that rule)"
    )


def check(recording: Recording, *, prefix: str, keep: int, retention_days: int) -> list[Violation]:
    """Simulate every checkpoint bucket of the plan under the rules rendered for it.

    ``prefix`` is where the runtime writes (``checkpoints/``), ``keep`` how many committed
    checkpoints it keeps, ``retention_days`` the bucket's ``noncurrentDays``: for a bucket
    whose ``CheckpointBucket`` component records its own (``BucketSpec.recorded``), those.
    """
    violations = []
    cases = [case for store in store_modules() for case in store.cases(recording)]
    for case in cases:
        fix = {"late_fix": case.late_fix} if case.late_fix else {}
        own = _component_settings(recording, case.holder)
        bucket_prefix = f"{own['prefix']}/" if "prefix" in own else prefix
        days = int(own.get("noncurrentDays", retention_days))
        for finding in simulate(
            case.rules, case.delete, prefix=bucket_prefix, keep=keep, retention_days=days, **fix
        ):
            violations.append(
                Violation(LIFECYCLE_POLICY, case.name, f"{finding.problem}; fix: {finding.fix}")
            )
    return violations


def _component_settings(recording: Recording, resource: Resource) -> dict[str, Any]:
    """The inputs of the ``CheckpointBucket`` component ``resource`` belongs to, if any."""
    by_urn = {r.urn: r for r in recording.resources}
    parent = by_urn.get(resource.parent or "")
    while parent is not None:
        if parent.type.endswith(":CheckpointBucket"):
            return dict(parent.inputs or {})
        parent = by_urn.get(parent.parent or "")
    return {}
