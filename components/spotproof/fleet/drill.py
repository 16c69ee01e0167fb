"""``spotproof:drill``: who may reclaim this stack's spot nodes through ``spotproof drill``.

Off by default. On, each cloud's ``HybridCluster`` adds the least privilege a drill needs
(a custom role, or an experiment template and its roles), limited to this cluster's nodes,
and the stack exports where it is as the output ``drill`` (``spotproof.drill.grants``).
Who may use it is said in the cloud's own form (:class:`PrincipalRule`), each cloud's
config section naming its rule (``fleet.shared.CloudConfig.drill_principals``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject, config_key, setting
from spotproof.fleet.readers import boolean, items


@dataclass(frozen=True)
class PrincipalRule:
    """How one cloud's IAM names a principal that may run drills."""

    pattern: re.Pattern[str]
    allowed: str
    """What the pattern admits, in words, for the one-line error."""
    required: bool
    """A drill needs at least one: the grant is bound to the principals and to nobody else."""


GCP_MEMBER = PrincipalRule(
    # https://cloud.google.com/iam/docs/principal-identifiers: user:, group:,
    # serviceAccount: take an email address, domain: a domain, and workload or workforce
    # identities are principal:// or principalSet:// URIs. allUsers and
    # allAuthenticatedUsers are not among them: a drill is never for everyone.
    re.compile(
        r"(user|group|serviceAccount):[^@\s:]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"
        r"|domain:[A-Za-z0-9.-]+\.[A-Za-z]{2,}"
        r"|principal(Set)?://iam\.googleapis\.com/\S+"
    ),
    "IAM members like group:sre@example.com, user:EMAIL, serviceAccount:EMAIL, "
    "domain:DOMAIN or a principal:// URI",
    required=True,
)
AWS_ROLE = PrincipalRule(
    # An IAM role ARN, with its path (https://docs.aws.amazon.com/IAM/latest/UserGuide/
    # reference-arns.html); the operator policy is attached to each. None is needed: the
    # policy's ARN is exported, for whoever attaches it themselves.
    re.compile(r"arn:aws(-cn|-us-gov)?:iam::[0-9]{12}:role/([\w+=,.@-]+/)*[\w+=,.@-]{1,64}"),
    "IAM role ARNs like arn:aws:iam::123456789012:role/sre (or none: attach the exported "
    "operatorPolicyArn yourself)",
    required=False,
)
ENTRA_OBJECT_ID = PrincipalRule(
    # A role assignment's principalId is the object id of a user, group or service
    # principal, and its principalType must say which: pulumi-azure-native sends "User"
    # when none is given (``authorization.RoleAssignment``), and Azure refuses a group or a
    # service principal named so ("UnmatchedPrincipalType", as in
    # Azure/modern-web-app-pattern-dotnet#129). So each is written TYPE:OBJECT_ID.
    re.compile(r"(User|Group|ServicePrincipal):[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"),
    "Microsoft Entra object ids with their type, like Group:OBJECT_ID, User:OBJECT_ID or "
    "ServicePrincipal:OBJECT_ID",
    required=True,
)
NO_DRILL = PrincipalRule(re.compile(r"(?!)"), "nothing: this cloud has no drill", required=True)
"""For a cloud whose components grant no drill yet."""


@dataclass(frozen=True)
class DrillSpec:
    """What ``spotproof:drill`` asks for; a stack without it has none (``FleetSpec.drill``)."""

    enabled: bool = setting("enabled", boolean, False)
    """Adds the grants and the ``drill`` output. Off, nothing is granted and
    ``spotproof drill`` refuses the stack, naming this setting."""
    principals: tuple[str, ...] = setting("principals", None, ())
    """Who may run drills, in the cloud's own form (``PrincipalRule``): GCP IAM members,
    the IAM role ARNs the EKS operator policy is attached to, typed Entra object ids
    (``Group:OBJECT_ID``) on AKS."""


def read_drill(rule: PrincipalRule) -> Callable[[str, Any], DrillSpec | None]:
    """The stack's drill setting, its principals in ``rule``'s form; None when off."""

    def parse(key: str, raw: Any) -> DrillSpec | None:
        obj = ConfigObject(key, raw, fields_of=DrillSpec)
        enabled = obj.field(config_key(DrillSpec, "enabled"), boolean, False)
        principals = obj.field(config_key(DrillSpec, "principals"), _principals(rule), ())
        obj.finish()
        principals_key = f"{key}.{config_key(DrillSpec, 'principals')}"
        if principals and not enabled:
            raise SpecError(
                principals_key,
                list(principals),
                f"grants nothing while {key}.enabled is false",
                f"{key}.enabled: true, or no principals",
            )
        if enabled and rule.required and not principals:
            raise SpecError(
                principals_key,
                list(principals),
                "nobody could run a drill: the grant is bound to these principals only",
                f"one or more {rule.allowed}",
            )
        return DrillSpec(enabled=True, principals=principals) if enabled else None

    return parse


def _principals(rule: PrincipalRule) -> Callable[[str, Any], tuple[str, ...]]:
    def parse(key: str, raw: Any) -> tuple[str, ...]:
        found: dict[str, str] = {}
        for item_key, value in items(key, raw):
            if not isinstance(value, str) or not rule.pattern.fullmatch(value):
                raise SpecError(item_key, value, "not a principal of this cloud", rule.allowed)
            if value in found:
                raise SpecError(
                    item_key, value, f"duplicate principal (also {found[value]})", "each once"
                )
            found[value] = item_key
        return tuple(found)

    return parse
