"""PodDisruptionBudgets: which pods a budget covers, whether it is valid for the
controller that owns them, and whether it holds back an eviction.

Validity (Kubernetes, "Specifying a Disruption Budget for your Application", section
"Arbitrary workloads and arbitrary selectors",
https://kubernetes.io/docs/tasks/run-application/configure-pdb/): over pods whose
controller has no scale subresource (a Job, a CronJob's Jobs, bare Pods) only an integer
``minAvailable`` works; ``maxUnavailable`` and percentages need the controller's scale to
count the expected pods, and the disruption controller fails such a budget instead.

An eviction is allowed while the budget's ``disruptionsAllowed`` is above zero: the healthy
pods it selects less ``minAvailable``, or ``maxUnavailable`` less the unhealthy ones
(https://kubernetes.io/docs/concepts/workloads/pods/disruptions/).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.policy.base import PlannedResource, Problem, StackRule
from spotproof.scheduling import pod_templates

PDB = "kubernetes:policy/v1:PodDisruptionBudget"
SCALABLE = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"})
"""Controllers with a scale subresource; every other owner needs an integer minAvailable."""


def matches(
    selector: Mapping[str, Any] | None,
    labels: Mapping[str, str],
    unknown: frozenset[str] = frozenset(),
) -> bool | None:
    """Whether a label selector matches every pod labelled ``labels`` (True), none of them
    (False), or it depends on a label in ``unknown``, which each pod carries with a value
    not known here (None: all of them, some or none). An empty or missing selector matches
    every pod."""
    selector = selector or {}
    requirements = [
        (str(key), "In", [str(value)]) for key, value in (selector.get("matchLabels") or {}).items()
    ] + [
        (str(e.get("key")), str(e.get("operator")), [str(v) for v in e.get("values") or []])
        for e in selector.get("matchExpressions") or []
    ]
    result: bool | None = True
    for key, operator, values in requirements:
        if key in unknown:
            holds = {"Exists": True, "DoesNotExist": False}.get(operator)
        else:
            present = key in labels
            value = str(labels.get(key))
            holds = {
                "In": present and value in values,
                "NotIn": not present or value not in values,
                "Exists": present,
                "DoesNotExist": not present,
            }.get(operator, False)
        if holds is False:
            return False
        if holds is None:
            result = None
    return result


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (``matchLabels``, ``matchExpressions``) matches ``labels``.
    An empty selector matches every pod (policy/v1)."""
    return matches(selector, labels) is True


def covered(
    budget: Mapping[str, Any], resources: list[PlannedResource]
) -> Iterator[tuple[PlannedResource, str, int]]:
    """The workloads whose pods ``budget`` selects: (resource, kind, pods it runs)."""
    namespace = (budget.get("metadata") or {}).get("namespace", "default")
    selector = (budget.get("spec") or {}).get("selector")
    for resource in resources:
        if (resource.inputs.get("metadata") or {}).get("namespace", "default") != namespace:
            continue
        for template in pod_templates.pod_templates(resource.inputs):
            if selects(selector, template.metadata.get("labels") or {}):
                yield resource, str(resource.inputs["kind"]), template.pods


def blocks_eviction(budget: Mapping[str, Any], pods: int) -> bool:
    """Whether ``budget`` leaves no disruption allowed while ``pods`` matching pods run."""
    spec = budget.get("spec") or {}
    if "minAvailable" in spec:
        return pods - _absolute(spec["minAvailable"], pods) <= 0
    if "maxUnavailable" in spec:
        return _absolute(spec["maxUnavailable"], pods) <= 0
    return False


def _absolute(value: Any, pods: int) -> int:
    """An integer or a percentage of ``pods``, rounded up as the disruption controller
    rounds both fields."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(float(value[:-1]) / 100 * pods)
    return int(value)


def budget_valid_for_owner(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    for budget in (r for r in resources if r.type == PDB):
        spec = budget.inputs.get("spec") or {}
        min_available = spec.get("minAvailable")
        integer = min_available is not None and not isinstance(min_available, str)
        if integer and "maxUnavailable" not in spec:
            continue
        for workload, kind, _ in covered(budget.inputs, resources):
            if kind in SCALABLE:
                continue
            field = "maxUnavailable" if "maxUnavailable" in spec else "minAvailable"
            used = f"{field} {spec.get(field)!r}"
            name = (workload.inputs.get("metadata") or {}).get("name", workload.name)
            yield (
                budget.name,
                Problem(
                    f"budget selects the pods of {kind} {name}, which has no scale "
                    f"subresource, so {used} is not honoured and the disruption controller "
                    "fails the budget; fix: use an integer minAvailable (e.g. minAvailable: 1)",
                    f"spec.{field}",
                ),
            )
            break


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "pdb-valid-for-owner",
        "Disruption budgets use only what their pods' controller supports.",
        budget_valid_for_owner,
    ),
)
