"""What a rule is and what it reports; the rule modules build on these."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from spotproof import scheduling


@dataclass(frozen=True)
class Violation:
    policy: str
    resource: str
    message: str


class PlannedResource(Protocol):
    type: str
    name: str
    urn: str
    parent: str | None
    inputs: dict[str, Any]
    dependencies: tuple[str, ...] | None
    """URNs Pulumi creates first; None for an object applied outside the program."""
    ignore_changes: tuple[str, ...]
    """Input paths Pulumi sets at creation only and leaves to others afterwards."""


@dataclass(frozen=True)
class ResourceRule:
    name: str
    description: str
    resource_type: str
    check: Callable[[Mapping[str, Any]], Iterable[str]]


@dataclass(frozen=True)
class StackRule:
    name: str
    description: str
    check: Callable[[list[PlannedResource]], Iterable[tuple[str, str]]]
    """Yields (resource name, message) pairs."""
    at_version: Callable[[list[PlannedResource], str], Iterable[tuple[str, str]]] | None = None
    """The check of a rule whose verdict depends on the cluster's Kubernetes minor, for a
    caller that knows it (``1.33``, from the stack); ``check`` judges without it."""


def as_cloud_taint(taint: scheduling.Taint) -> tuple[str, str, str]:
    """A taint as GCP and AWS inputs spell it, for comparing against rendered taints."""
    return (taint.key, taint.value, scheduling.cloud_effect(taint.effect))
