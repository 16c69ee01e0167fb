"""GCS's lifecycle rules as the bucket applies them, for the lifecycle replay.

GCS (https://cloud.google.com/storage/docs/lifecycle):

- a rule's conditions must all hold (AND); any matching rule acts (OR);
- ``age`` counts days since creation; ``daysSinceNoncurrentTime`` days since the version
  became noncurrent; ``isLive``/``withState`` pick live or noncurrent versions;
  ``numNewerVersions`` counts every newer version *including the live one*;
- ``Delete`` on a live version of a versioned bucket makes it noncurrent; on a noncurrent
  one removes it; there are no delete markers;
- actions run asynchronously, typically within a day of the condition being met.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.lifecycle.versions import (
    Bucket,
    Case,
    Rules,
    Version,
)

GCS_BUCKET = "gcp:storage/bucket:Bucket"


_GCS_CONDITIONS = frozenset(
    {
        "age",
        "daysSinceNoncurrentTime",
        "numNewerVersions",
        "withState",
        "isLive",
        "matchesPrefixes",
        "matchesSuffixes",
        "sendAgeIfZero",
        "sendDaysSinceNoncurrentTimeIfZero",
        "sendNumNewerVersionsIfZero",
    }
)
"""Conditions modelled; a rule with any other (dates, storage classes, sizes) is taken as
never matching (docs/plan.md, step 6)."""


def _number(condition: Mapping[str, Any], name: str) -> int | None:
    """A whole-number condition; the provider drops a 0 unless ``send<Name>IfZero`` is set."""
    value = condition.get(name)
    if value is None:
        return None
    send_zero = condition.get(f"send{name[0].upper()}{name[1:]}IfZero")
    return None if int(value) == 0 and not send_zero else int(value)


def _gcs_holds(condition: Mapping[str, Any], version: Version, newer: int, day: int) -> bool:
    if not set(condition) <= _GCS_CONDITIONS:
        return False
    state = condition.get("withState")
    if state is None and "isLive" in condition:
        state = "LIVE" if condition["isLive"] else "ARCHIVED"
    live = version.noncurrent_since is None
    age = _number(condition, "age")
    newer_wanted = _number(condition, "numNewerVersions")
    noncurrent_days = _number(condition, "daysSinceNoncurrentTime")
    prefixes, suffixes = condition.get("matchesPrefixes"), condition.get("matchesSuffixes")
    return (
        (state in (None, "ANY") or (state == "LIVE") == live)
        and (age is None or day >= version.created + age)
        and (newer_wanted is None or newer >= newer_wanted)
        and (
            noncurrent_days is None
            or (not live and day >= (version.noncurrent_since or 0) + noncurrent_days)
        )
        and (not prefixes or version.key.startswith(tuple(prefixes)))
        and (not suffixes or version.key.endswith(tuple(suffixes)))
    )


def gcs_rules(rules: list[Mapping[str, Any]]) -> Rules:
    deleting = [r for r in rules if (r.get("action") or {}).get("type") == "Delete"]

    def run(bucket: Bucket, day: int) -> None:
        for versions in bucket.versions.values():
            stored = sorted(
                (v for v in versions if v.removed is None), key=lambda v: v.created, reverse=True
            )
            doomed = []
            for newer, version in enumerate(stored):
                if any(_gcs_holds(r.get("condition") or {}, version, newer, day) for r in deleting):
                    doomed.append(version)
            for version in doomed:
                if version.noncurrent_since is None:
                    version.noncurrent_since = day
                else:
                    version.removed = day

    return run


def gcs_delete(bucket: Bucket, key: str, day: int) -> None:
    """Deleting the live version of a versioned GCS object makes it noncurrent."""
    for version in bucket.stored(key):
        if version.noncurrent_since is None:
            version.noncurrent_since = day


def cases(recording: Recording) -> list[Case]:
    """Each GCS bucket of the plan, under its own lifecycle rules."""
    return [
        Case(bucket, bucket.name, gcs_rules(bucket.inputs.get("lifecycleRules") or []), gcs_delete)
        for bucket in recording.of_type(GCS_BUCKET)
    ]
