"""Is a request allowed by an IAM policy? An evaluator for the policies spotproof renders.

A real account evaluates every request a pod makes against the policies of the role it
assumed; the emulators do not (moto accepts anything). So the plan evaluates the rendered
documents itself, for the requests the runtime is known to make (``runtime_requests``),
and the tests check that list against every request a real run sends.

The rules, from "Policy evaluation logic" and the condition reference
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-logic-multiple-context-keys-or-values.html):

- A statement applies when its ``Action`` (or ``NotAction``) and ``Resource`` (or
  ``NotResource``) match and every condition holds. Actions match case-insensitively,
  resources case-sensitively; ``*`` and ``?`` are wildcards in both.
- An applicable ``Deny`` wins; otherwise an applicable ``Allow`` allows; otherwise the
  request is denied implicitly.
- Within a ``Condition`` block every operator, and every key under it, must hold (AND);
  a key holds if the request's value matches *any* of the listed values (OR), except for
  the negated operators (``StringNotEquals``, ``StringNotLike``, ``ArnNotEquals``,
  ``ArnNotLike``), which hold only if it matches *none*. A key the request lacks makes
  the condition false, except under ``Null`` and the ``...IfExists`` forms, where it holds.

A multi-valued key (``aws:TagKeys``: every tag key of the request) is a tuple in the
request's context, and is compared only under the set operators
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html):
``ForAllValues:`` holds if every value of the request matches a listed one, and so when the
request has none or lacks the key (hence ``Null`` beside it); ``ForAnyValue:`` holds if at
least one does, and never when the key is missing.

Identity policies only: no principals, permission boundaries, session policies or SCPs.
An operator outside the supported set, or a multi-valued key under a single-valued
operator, raises :class:`UnsupportedPolicy` rather than guess.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any


class UnsupportedPolicy(ValueError):
    """The document uses a construct this evaluator does not model."""


@dataclass(frozen=True)
class Request:
    """One API call as IAM sees it: the action, the resource ARN and the context keys."""

    action: str
    resource: str
    context: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    """Context keys to their value; a multi-valued key's values as a tuple."""

    def __str__(self) -> str:
        keys = "".join(f" {key}={value!r}" for key, value in sorted(self.context.items()))
        return f"{self.action} on {self.resource}{keys}"


@cache
def _pattern(wildcarded: str, ignore_case: bool) -> re.Pattern[str]:
    # fnmatch's translate also reads [...] as a class, which IAM does not: escape it.
    translated = fnmatch.translate(wildcarded.replace("[", "\0").replace("]", "\1"))
    translated = translated.replace("\0", r"\[").replace("\1", r"\]")
    return re.compile(translated, re.IGNORECASE if ignore_case else 0)


def _like(value: str, pattern: str, *, ignore_case: bool = False) -> bool:
    return _pattern(pattern, ignore_case).match(value) is not None


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


_MATCHERS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda actual, wanted: actual == wanted,
    "StringEqualsIgnoreCase": lambda actual, wanted: actual.lower() == wanted.lower(),
    "StringLike": _like,
    "ArnEquals": _like,  # ARN operators take wildcards too
    "ArnLike": _like,
    "Bool": lambda actual, wanted: actual.lower() == str(wanted).lower(),
}
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}


_SET_OPERATORS = ("ForAllValues", "ForAnyValue")


def _condition_holds(
    operator: str, key: str, wanted: Any, context: Mapping[str, str | tuple[str, ...]]
) -> bool:
    qualifier, _, single = operator.rpartition(":")
    if_exists = single.endswith("IfExists")
    base = single.removesuffix("IfExists")
    if qualifier:
        if qualifier not in _SET_OPERATORS or base == "Null":
            raise UnsupportedPolicy(f"condition operator {operator}: not modelled")
        if key not in context:
            return qualifier == "ForAllValues" or if_exists
        found = context[key]
        held = [
            _value_holds(operator, base, value, wanted)
            for value in (found if isinstance(found, tuple) else (found,))
        ]
        return all(held) if qualifier == "ForAllValues" else any(held)
    if base == "Null":
        missing = key not in context
        return any(missing == (str(value).lower() == "true") for value in _listed(wanted))
    if key not in context:
        return if_exists
    actual = context[key]
    if isinstance(actual, tuple):
        raise UnsupportedPolicy(
            f"condition operator {operator} on the multi-valued key {key}: allowed are "
            f"{' and '.join(_SET_OPERATORS)}"
        )
    return _value_holds(operator, base, actual, wanted)


def _value_holds(operator: str, base: str, actual: str, wanted: Any) -> bool:
    if base in _NEGATED:
        matches = _MATCHERS[_NEGATED[base]]
        return not any(matches(actual, str(value)) for value in _listed(wanted))
    if base not in _MATCHERS:
        raise UnsupportedPolicy(
            f"condition operator {operator}: supported are "
            f"{', '.join(sorted([*_MATCHERS, *_NEGATED, 'Null']))}, their IfExists forms and "
            f"{' and '.join(_SET_OPERATORS)} over them"
        )
    return any(_MATCHERS[base](actual, str(value)) for value in _listed(wanted))


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    if "Action" in statement:
        actions = any(
            _like(request.action, a, ignore_case=True) for a in _listed(statement["Action"])
        )
    else:
        actions = not any(
            _like(request.action, a, ignore_case=True) for a in _listed(statement["NotAction"])
        )
    if "Resource" in statement:
        resources = any(_like(request.resource, r) for r in _listed(statement["Resource"]))
    else:
        resources = not any(_like(request.resource, r) for r in _listed(statement["NotResource"]))
    return (
        actions
        and resources
        and all(
            _condition_holds(operator, key, wanted, request.context)
            for operator, keys in (statement.get("Condition") or {}).items()
            for key, wanted in keys.items()
        )
    )


def statements_of(documents: Iterable[Any]) -> list[Mapping[str, Any]]:
    """Every statement of ``documents``, each a dict or its JSON text."""
    statements: list[Mapping[str, Any]] = []
    for document in documents:
        parsed = json.loads(document) if isinstance(document, str) else document
        statements += _listed(parsed.get("Statement", []))
    return statements


def decide(documents: Iterable[Any], request: Request) -> str:
    """``"allowed"``, ``"denied"`` (an explicit Deny applies) or ``"implicitly denied"``."""
    applicable = [s for s in statements_of(documents) if _applies(s, request)]
    if any(s.get("Effect") == "Deny" for s in applicable):
        return "denied"
    if any(s.get("Effect") == "Allow" for s in applicable):
        return "allowed"
    return "implicitly denied"
