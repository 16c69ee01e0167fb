"""The bucket a lifecycle replay acts on: every key's versions, as the runtime's writes and
deletes and a store's lifecycle rules leave them, day by day."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotproof.plan.recording.recorder import Resource

KEPT_FOREVER = 10_000
"""Days beyond which a version counts as never freed."""
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
Delete = Callable[[Bucket, str, int], None]
"""What the runtime's delete of one key does to the bucket on a given day."""


@dataclass(frozen=True)
class Case:
    """One bucket (or container) of a plan, as its store's rules would treat it."""

    holder: Resource
    """The resource a finding is reported on: the bucket, or the account of a container."""
    name: str
    rules: Rules
    delete: Delete
    late_fix: str | None = None
    """The fix to name when deleted data is freed late, where the store's differs."""
