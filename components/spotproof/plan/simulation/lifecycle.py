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

S3 (https://docs.aws.amazon.com/AmazonS3/latest/userguide/intro-lifecycle-rules.html,
https://docs.aws.amazon.com/AmazonS3/latest/userguide/lifecycle-configuration-examples.html):

- ``Expiration.Days`` acts on *current* versions that many days after creation; in a
  versioned bucket it adds a delete marker, making the data noncurrent;
- ``Expiration.ExpiredObjectDeleteMarker`` removes a delete marker that has no noncurrent
  versions left; it cannot share an ``Expiration`` with ``Days``, which removes such a
  marker once it is old enough (Example 7 of the configuration examples);
- ``NoncurrentVersionExpiration.NoncurrentDays`` deletes a version that many days after it
  became noncurrent; with ``NewerNoncurrentVersions`` N it does so only once N newer
  noncurrent versions exist as well: both conditions must hold. A checkpoint key is
  written once, so its single noncurrent version never has a newer one, and a rule with
  both fields keeps it forever;
- S3 rounds each due date up to the next midnight UTC, so an action may come a day late.

GCS (https://cloud.google.com/storage/docs/lifecycle):

- a rule's conditions must all hold (AND); any matching rule acts (OR);
- ``age`` counts days since creation; ``daysSinceNoncurrentTime`` days since the version
  became noncurrent; ``isLive``/``withState`` pick live or noncurrent versions;
  ``numNewerVersions`` counts every newer version *including the live one*;
- ``Delete`` on a live version of a versioned bucket makes it noncurrent; on a noncurrent
  one removes it; there are no delete markers;
- actions run asynchronously, typically within a day of the condition being met.

Azure Blob Storage (https://learn.microsoft.com/azure/storage/blobs/lifecycle-management-overview,
"Rules" and "action run conditions"; .../lifecycle-management-policy-delete;
.../storage-blob-soft-delete):

- with versioning on, deleting a blob makes its current version a previous version;
- ``baseBlob.delete`` acts on current versions (``daysAfterModificationGreaterThan`` or
  ``daysAfterCreationGreaterThan`` days), ``version.delete`` on previous versions, whose
  ``daysAfterCreationGreaterThan`` counts from the version's *creation*, which for a
  checkpoint key written once is its first write, not the day it became previous: a
  checkpoint older than N days is deleted at the first run after it is;
- a rule applies to blobs whose ``container/name`` starts with one of its ``prefixMatch``
  entries (none: all), of the ``blobTypes`` it lists;
- with blob soft delete (``deleteRetentionPolicy``), what a lifecycle rule deletes is
  soft-deleted, recoverable for the retention's days, then gone for good;
- the policy runs once a day.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.policy import Violation

KEPT_FOREVER = 10_000
"""Days beyond which a version counts as never freed."""
TRAINING_DAYS = 8
"""Days the simulated run commits a checkpoint (one a day), before it pauses."""
PAUSE_DAYS = 400
"""Days the simulated run then waits, queued, before resuming."""
RUN_LATENESS_DAYS = 1
"""S3 rounds due dates to the next midnight UTC; GCS acts within about a day."""


@dataclass
class Version:
    key: str
    created: int
    noncurrent_since: int | None = None
    delete_marker: bool = False
    removed: int | None = None
    """Day the lifecycle removed it for good (None while it exists)."""
    soft_deleted: int | None = None
    """Azure: day a rule deleted it into soft delete, where it stays recoverable until
    :attr:`removed`."""

    @property
    def live(self) -> bool:
        return self.noncurrent_since is None and self.removed is None


@dataclass(frozen=True)
class Finding:
    problem: str
    fix: str


class Bucket:
    """The versions of every key, as the runtime and the lifecycle leave them."""

    def __init__(self) -> None:
        self.versions: dict[str, list[Version]] = {}

    def put(self, key: str, day: int) -> None:
        self.versions.setdefault(key, []).append(Version(key, day))

    def stored(self, key: str) -> list[Version]:
        return [v for v in self.versions.get(key, []) if v.removed is None]


Rules = Callable[[Bucket, int], None]
"""Applies one day's lifecycle run to the bucket."""
AZURE_LATE_FIX = (
    "a previous version's age counts from its first write, so delete previous versions at "
    "the first run (version.delete.daysAfterCreationGreaterThan 0) and keep them "
    "recoverable with blob soft delete (deleteRetentionPolicy) for {days} days"
)


# --- S3 ------------------------------------------------------------------------------


def _s3_applies(rule: Mapping[str, Any], key: str) -> bool:
    """Enabled, and its filter's prefix covers ``key``; a tag filter never matches, as the
    runtime tags no object."""
    if rule.get("status") != "Enabled":
        return False
    rule_filter = rule.get("filter") or {}
    both = rule_filter.get("and") or {}
    if rule_filter.get("tag") or both.get("tags"):
        return False
    prefix = rule_filter.get("prefix", both.get("prefix", rule.get("prefix")))
    return key.startswith(prefix or "")


def s3_rules(rules: list[Mapping[str, Any]]) -> Rules:
    def run(bucket: Bucket, day: int) -> None:
        for key, versions in bucket.versions.items():
            applying = [r for r in rules if _s3_applies(r, key)]
            for rule in applying:
                _s3_expire_current(rule, bucket, key, day)
                _s3_expire_noncurrent(rule, versions, day)
            for rule in applying:
                if (rule.get("expiration") or {}).get("expiredObjectDeleteMarker"):
                    _s3_remove_lone_marker(versions, day)

    return run


def _s3_expire_current(rule: Mapping[str, Any], bucket: Bucket, key: str, day: int) -> None:
    days = (rule.get("expiration") or {}).get("days")
    current = next((v for v in bucket.stored(key) if v.noncurrent_since is None), None)
    if days is None or current is None or day < current.created + int(days):
        return
    if current.delete_marker:
        # With Days, S3 also removes a delete marker left alone once it is that old.
        if len(bucket.stored(key)) == 1:
            current.removed = day
        return
    current.noncurrent_since = day
    bucket.versions[key].append(Version(key, day, delete_marker=True))


def _s3_expire_noncurrent(rule: Mapping[str, Any], versions: list[Version], day: int) -> None:
    expiration = rule.get("noncurrentVersionExpiration") or {}
    after = expiration.get("noncurrentDays")
    if after is None:
        return
    keep_newer = expiration.get("newerNoncurrentVersions")
    noncurrent = [
        v
        for v in versions
        if v.removed is None and v.noncurrent_since is not None and not v.delete_marker
    ]
    noncurrent.sort(key=lambda v: v.noncurrent_since or 0, reverse=True)
    for newer_count, version in enumerate(noncurrent):
        old_enough = day >= (version.noncurrent_since or 0) + int(after)
        enough_newer = keep_newer is None or newer_count >= int(keep_newer)
        if old_enough and enough_newer:
            version.removed = day


def _s3_remove_lone_marker(versions: list[Version], day: int) -> None:
    stored = [v for v in versions if v.removed is None]
    if len(stored) == 1 and stored[0].delete_marker:
        stored[0].removed = day


def s3_delete(bucket: Bucket, key: str, day: int) -> None:
    """A DELETE without a version id in a versioned bucket: a delete marker on top."""
    for version in bucket.stored(key):
        if version.noncurrent_since is None:
            version.noncurrent_since = day
    bucket.versions[key].append(Version(key, day, delete_marker=True))


# --- GCS -----------------------------------------------------------------------------


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
never matching, and said so in the README."""


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


# --- Azure Blob ------------------------------------------------------------------------


def _azure_applies(rule: Mapping[str, Any], container: str, key: str) -> bool:
    """Enabled, a lifecycle rule, for block blobs, with a prefix covering ``container/key``;
    a blob index tag filter never matches, as the runtime tags no blob."""
    if not rule.get("enabled", True) or rule.get("type", "Lifecycle") != "Lifecycle":
        return False
    filters = (rule.get("definition") or {}).get("filters") or {}
    if filters.get("blobIndexMatch") or "blockBlob" not in (filters.get("blobTypes") or []):
        return False
    prefixes = filters.get("prefixMatch") or [""]
    return any(f"{container}/{key}".startswith(str(prefix)) for prefix in prefixes)


def _older_than(day: int, since: int, days: Any) -> bool:
    return days is not None and day - since > int(days)


def azure_rules(
    rules: list[Mapping[str, Any]], container: str, soft_delete_days: int | None
) -> Rules:
    """``soft_delete_days``: the blob service's delete retention; None when it is off."""

    def delete(version: Version, day: int) -> None:
        if soft_delete_days is None:
            version.removed = day
        else:
            version.soft_deleted = day
            version.removed = day + soft_delete_days

    def run(bucket: Bucket, day: int) -> None:
        for key, versions in bucket.versions.items():
            for rule in (r for r in rules if _azure_applies(r, container, key)):
                actions = (rule.get("definition") or {}).get("actions") or {}
                current = ((actions.get("baseBlob") or {}).get("delete")) or {}
                previous = ((actions.get("version") or {}).get("delete")) or {}
                for version in (v for v in versions if v.removed is None and not v.soft_deleted):
                    if version.noncurrent_since is None:
                        age = current.get("daysAfterCreationGreaterThan")
                        modified = current.get("daysAfterModificationGreaterThan")
                        if _older_than(day, version.created, age) or _older_than(
                            day, version.created, modified
                        ):
                            version.noncurrent_since = day
                    elif _older_than(
                        day, version.created, previous.get("daysAfterCreationGreaterThan")
                    ):
                        delete(version, day)

    return run


def azure_delete(bucket: Bucket, key: str, day: int) -> None:
    """Deleting a blob with versioning on makes its current version a previous one."""
    gcs_delete(bucket, key, day)


# --- the runtime's history, replayed ---------------------------------------------------


def simulate(
    rules: Rules,
    delete: Callable[[Bucket, str, int], None],
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
        return [f"{prefix}manifests/{step:012d}.json", f"{prefix}steps/{step:012d}/w/state.00000"]

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


# --- over a plan ---------------------------------------------------------------------

GCS_BUCKET = "gcp:storage/bucket:Bucket"
S3_BUCKET = "aws:s3/bucket:Bucket"
S3_LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
AZURE_ACCOUNT = "azure-native:storage:StorageAccount"
AZURE_LIFECYCLE = "azure-native:storage:ManagementPolicy"
AZURE_BLOB_SERVICE = "azure-native:storage:BlobServiceProperties"
AZURE_CONTAINER = "azure-native:storage:BlobContainer"
LIFECYCLE_POLICY = "bucket-lifecycle"


def check(recording: Recording, *, prefix: str, keep: int, retention_days: int) -> list[Violation]:
    """Simulate every checkpoint bucket of the plan under the rules rendered for it.

    ``prefix`` is where the runtime writes (``checkpoints/``), ``keep`` how many committed
    checkpoints it keeps, ``retention_days`` the bucket's ``noncurrentDays``: for a bucket
    whose ``CheckpointBucket`` component records its own (``BucketSpec.recorded``), those.
    """
    violations = []
    cases: list[tuple[Resource, str, Rules, Callable[[Bucket, str, int], None], str | None]] = []
    for bucket in recording.of_type(GCS_BUCKET):
        rules = bucket.inputs.get("lifecycleRules") or []
        cases.append((bucket, bucket.name, gcs_rules(rules), gcs_delete, None))
    for bucket in recording.of_type(S3_BUCKET):
        name = bucket.inputs.get("bucket")
        rules = [
            rule
            for config in recording.of_type(S3_LIFECYCLE)
            if config.inputs.get("bucket") == name
            for rule in config.inputs.get("rules") or []
        ]
        cases.append((bucket, bucket.name, s3_rules(rules), s3_delete, None))
    for account in recording.of_type(AZURE_ACCOUNT):
        cases += [
            (account, *case) for case in _azure_cases(recording, account.inputs.get("accountName"))
        ]
    for holder, resource, rules, delete, late_fix in cases:
        fix = {"late_fix": late_fix} if late_fix else {}
        own = _component_settings(recording, holder)
        bucket_prefix = f"{own['prefix']}/" if "prefix" in own else prefix
        days = int(own.get("noncurrentDays", retention_days))
        for finding in simulate(
            rules, delete, prefix=bucket_prefix, keep=keep, retention_days=days, **fix
        ):
            violations.append(
                Violation(LIFECYCLE_POLICY, resource, f"{finding.problem}; fix: {finding.fix}")
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


def _azure_cases(
    recording: Recording, account: Any
) -> list[tuple[str, Rules, Callable[[Bucket, str, int], None], str | None]]:
    """One case per container of ``account``, under its lifecycle policy and soft delete."""

    def of(type_: str) -> list[Any]:
        return [r for r in recording.of_type(type_) if r.inputs.get("accountName") == account]

    rules = [
        rule
        for policy in of(AZURE_LIFECYCLE)
        for rule in ((policy.inputs.get("policy") or {}).get("rules") or [])
    ]
    retention = next(
        ((service.inputs.get("deleteRetentionPolicy") or {}) for service in of(AZURE_BLOB_SERVICE)),
        {},
    )
    soft_delete = (
        int(retention["days"]) if retention.get("enabled") and retention.get("days") else None
    )
    return [
        (
            container.name,
            azure_rules(rules, str(container.inputs.get("containerName")), soft_delete),
            azure_delete,
            AZURE_LATE_FIX,
        )
        for container in of(AZURE_CONTAINER)
    ]
