"""Azure Blob Storage's lifecycle management as the account applies it, for the lifecycle
replay.

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

from collections.abc import Mapping
from typing import Any

from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.plan.simulation.lifecycle.gcs import gcs_delete
from spotproof.plan.simulation.lifecycle.versions import (
    Bucket,
    Case,
    Rules,
    Version,
)

AZURE_ACCOUNT = "azure-native:storage:StorageAccount"
AZURE_LIFECYCLE = "azure-native:storage:ManagementPolicy"
AZURE_BLOB_SERVICE = "azure-native:storage:BlobServiceProperties"
AZURE_CONTAINER = "azure-native:storage:BlobContainer"
AZURE_LATE_FIX = (
    "a previous version's age counts from its first write, so delete previous versions at "
    "the first run (version.delete.daysAfterCreationGreaterThan 0) and keep them "
    "recoverable with blob soft delete (deleteRetentionPolicy) for {days} days"
)


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


def cases(recording: Recording) -> list[Case]:
    """Each container of every storage account of the plan, under the account's lifecycle
    policy and blob soft delete."""
    return [
        case
        for account in recording.of_type(AZURE_ACCOUNT)
        for case in _account_cases(recording, account)
    ]


def _account_cases(recording: Recording, account: Resource) -> list[Case]:
    """One case per container of ``account``, under its lifecycle policy and soft delete."""
    name = account.inputs.get("accountName")

    def of(type_: str) -> list[Any]:
        return [r for r in recording.of_type(type_) if r.inputs.get("accountName") == name]

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
        Case(
            account,
            container.name,
            azure_rules(rules, str(container.inputs.get("containerName")), soft_delete),
            azure_delete,
            AZURE_LATE_FIX,
        )
        for container in of(AZURE_CONTAINER)
    ]
