"""CrossGuard wrappers around ``spotproof.policy``: one Pulumi policy per spotproof rule.

Kept apart from the pack's ``__main__.py`` because constructing a ``PolicyPack`` starts
serving it. Needs ``pulumi-policy`` (the ``policy`` extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from spotproof import policy


@dataclass
class _Planned:
    """A CrossGuard resource in the shape spotproof's rules read."""

    type: str
    name: str
    urn: str
    parent: str | None
    inputs: dict[str, Any]
    dependencies: tuple[str, ...]
    ignore_changes: tuple[str, ...]


def _resource_policy(rule: policy.ResourceRule) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if args.resource_type == rule.resource_type:
            for message in rule.check(dict(args.props)):
                report(message, args.urn)

    return ResourceValidationPolicy(rule.name, rule.description, validate)


def _stack_policy(rule: policy.StackRule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        planned = [
            _Planned(
                r.resource_type,
                r.name,
                r.urn,
                r.parent.urn if r.parent is not None else None,
                dict(r.props),
                tuple(d.urn for d in r.dependencies),
                tuple(r.opts.ignore_changes or ()) if r.opts is not None else (),
            )
            for r in args.resources
        ]
        urns = {r.name: r.urn for r in args.resources}
        for name, message in rule.check(planned):
            report(message, urns.get(name))

    return StackValidationPolicy(rule.name, rule.description, validate)


def policies() -> list[ResourceValidationPolicy | StackValidationPolicy]:
    return [
        *(_resource_policy(rule) for rule in policy.RESOURCE_RULES),
        *(_stack_policy(rule) for rule in policy.STACK_RULES),
    ]


ENFORCEMENT = EnforcementLevel.MANDATORY
