"""What every cloud's monitoring is built from: rule groups, in Prometheus's own terms.

The rules are written once (``observability.rules``) as :class:`RuleGroup` values; each
cloud's component renders the same groups into its managed Prometheus (GKE's ``Rules``
resource, an Amazon Managed Service for Prometheus rule groups namespace, Azure Monitor
prometheus rule groups), and ``promtool`` checks and unit-tests the very file
:func:`rule_file` writes. Field names follow the rule file format
(https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_DURATION = re.compile(
    r"(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?"
    r"(?:([0-9]+)ms)?"
)
_UNIT_SECONDS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1)
"""Seconds in each unit but ``ms``, in the order a duration writes them."""


def duration_seconds(text: str) -> float:
    """A Prometheus duration (``90s``, ``1h30m``, ``1500ms``) in seconds, as Prometheus reads
    ``for``, ``interval`` and a range: units ``y w d h m s ms`` in that order, each at most
    once, a year 365 days; ``0`` alone needs no unit
    (https://prometheus.io/docs/prometheus/latest/configuration/configuration/#duration;
    prometheus/common ``model.ParseDuration``)."""
    if text == "0":
        return 0.0
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if not text or match is None:
        raise ValueError(
            f"duration {text!r} is not a Prometheus duration; allowed: units y, w, d, h, m, "
            "s, ms in that order, each at most once, e.g. 90s, 1h30m"
        )
    *counts, milliseconds = match.groups()
    whole = sum(int(n) * unit for n, unit in zip(counts, _UNIT_SECONDS, strict=True) if n)
    return whole + int(milliseconds or 0) / 1000


@dataclass(frozen=True)
class Rule:
    """One alerting rule (``alert`` set) or recording rule (``record`` set)."""

    expr: str
    """The PromQL expression."""
    alert: str = ""
    """The alert's name (CamelCase); empty for a recording rule."""
    record: str = ""
    """The recorded series' name (``level:metric:operations``); empty for an alert."""
    for_: str = ""
    """How long ``expr`` must hold before the alert fires (``10m``); empty: at once."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """An alert's ``summary`` and ``description``."""

    def __post_init__(self) -> None:
        if bool(self.alert) == bool(self.record):
            raise ValueError(f"a rule is an alert or a record, not both or neither: {self}")

    def to_dict(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.alert} if self.alert else {"record": self.record}
        rule["expr"] = self.expr
        if self.for_:
            rule["for"] = self.for_
        if self.labels:
            rule["labels"] = dict(self.labels)
        if self.annotations:
            rule["annotations"] = dict(self.annotations)
        return rule


@dataclass(frozen=True)
class RuleGroup:
    name: str
    interval: str
    """How often the group is evaluated (``1m``)."""
    rules: tuple[Rule, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "interval": self.interval,
            "rules": [rule.to_dict() for rule in self.rules],
        }

    @property
    def alerts(self) -> tuple[Rule, ...]:
        return tuple(rule for rule in self.rules if rule.alert)


def rule_file(groups: Iterable[RuleGroup]) -> dict[str, Any]:
    """A Prometheus rule file's content: ``{"groups": [...]}``."""
    return {"groups": [group.to_dict() for group in groups]}
