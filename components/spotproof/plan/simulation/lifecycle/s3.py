"""S3's lifecycle rules as the bucket applies them, for the lifecycle replay.

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

S3_BUCKET = "aws:s3/bucket:Bucket"
S3_LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"


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


def cases(recording: Recording) -> list[Case]:
    """Each S3 bucket of the plan, under the lifecycle configurations naming it."""
    found = []
    for bucket in recording.of_type(S3_BUCKET):
        name = bucket.inputs.get("bucket")
        rules = [
            rule
            for config in recording.of_type(S3_LIFECYCLE)
            if config.inputs.get("bucket") == name
            for rule in config.inputs.get("rules") or []
        ]
        found.append(Case(bucket, bucket.name, s3_rules(rules), s3_delete))
    return found
