"""What the API server refuses that the OpenAPI schema lets through.

The published schema types a quantity as int-or-string and an enumeration as a string;
the API server's validation (``pkg/apis/core/validation/validation.go`` and
``pkg/apis/batch/validation/validation.go`` in kubernetes/kubernetes) then parses the
quantity and refuses a value outside the enumeration. Each enumeration below is the one
the API reference states for the field (https://kubernetes.io/docs/reference/kubernetes-api/:
Pod ``restartPolicy``, Container ``imagePullPolicy``, Toleration ``operator`` and
``effect``, NodeSelectorRequirement ``operator``; Job: "The only allowed
template.spec.restartPolicy values are Never or OnFailure", ``podFailurePolicy`` rule
``action`` and ``onExitCodes.operator``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.scheduling import pod_templates, quantity

RESTART_POLICIES = ("Always", "OnFailure", "Never")
JOB_RESTART_POLICIES = ("OnFailure", "Never")
PULL_POLICIES = ("Always", "Never", "IfNotPresent")
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FAILURE_ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")
EXIT_CODE_OPERATORS = ("In", "NotIn")


def errors(obj: Mapping[str, Any]) -> list[str]:
    """Each ``path: message`` the API server would answer for ``obj``'s pods and Jobs."""
    found = []
    for template in pod_templates.pod_templates(obj):
        where = pod_templates.pod_spec_path(obj, template.part)
        found += [f"{where}.{error}" for error in _pod_errors(template.spec, obj.get("kind"))]
    for path, job in _jobs(obj):
        found += [f"{path}{error}" for error in _failure_policy_errors(job)]
    return found


def _pod_errors(spec: Mapping[str, Any], kind: Any) -> Iterator[str]:
    allowed = RESTART_POLICIES if kind == "Pod" else JOB_RESTART_POLICIES
    if kind in ("Pod", "Job", "CronJob", "JobSet"):
        yield from _one_of("restartPolicy", spec.get("restartPolicy"), allowed)
    for group in ("initContainers", "containers"):
        for index, container in enumerate(_list(spec.get(group))):
            where = f"{group}[{index}]"
            yield from _one_of(
                f"{where}.imagePullPolicy", container.get("imagePullPolicy"), PULL_POLICIES
            )
            yield from _quantities(where, container.get("resources"))
    for index, toleration in enumerate(_list(spec.get("tolerations"))):
        where = f"tolerations[{index}]"
        operator = toleration.get("operator")
        yield from _one_of(f"{where}.operator", operator, TOLERATION_OPERATORS)
        yield from _one_of(f"{where}.effect", toleration.get("effect") or None, TAINT_EFFECTS)
        if operator == "Exists" and toleration.get("value"):
            yield f"{where}.value: must be empty when operator is Exists"
        if not toleration.get("key") and operator not in ("Exists", None):
            yield f"{where}.operator: must be Exists when key is empty"
    yield from _selector_operators(spec)


def _selector_operators(spec: Mapping[str, Any]) -> Iterator[str]:
    affinity = _mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = _mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = [
        (f"affinity.nodeAffinity.required...nodeSelectorTerms[{i}]", term)
        for i, term in enumerate(_list(required.get("nodeSelectorTerms")))
    ]
    terms += [
        (f"affinity.nodeAffinity.preferred...[{i}].preference", _mapping(item.get("preference")))
        for i, item in enumerate(
            _list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
        )
    ]
    for where, term in terms:
        for index, requirement in enumerate(_list(term.get("matchExpressions"))):
            yield from _one_of(
                f"{where}.matchExpressions[{index}].operator",
                requirement.get("operator"),
                SELECTOR_OPERATORS,
            )


def _jobs(obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    spec = _mapping(obj.get("spec"))
    if obj.get("kind") == "Job":
        yield "spec.", spec
    elif obj.get("kind") == "JobSet":
        for index, replicated in enumerate(_list(spec.get("replicatedJobs"))):
            job = _mapping(_mapping(replicated.get("template")).get("spec"))
            yield f"replicatedJobs[{index}].template.spec.", job


def _failure_policy_errors(job: Mapping[str, Any]) -> Iterator[str]:
    policy = _mapping(job.get("podFailurePolicy"))
    for index, rule in enumerate(_list(policy.get("rules"))):
        where = f"podFailurePolicy.rules[{index}]"
        yield from _one_of(f"{where}.action", rule.get("action"), FAILURE_ACTIONS)
        codes = _mapping(rule.get("onExitCodes"))
        yield from _one_of(
            f"{where}.onExitCodes.operator", codes.get("operator"), EXIT_CODE_OPERATORS
        )


def _quantities(where: str, resources: Any) -> Iterator[str]:
    for kind in ("requests", "limits"):
        for name, value in _mapping(_mapping(resources).get(kind)).items():
            try:
                quantity.parse(value)
            except ValueError as error:
                yield f"{where}.resources.{kind}.{name}: {error}"


def _one_of(path: str, value: Any, allowed: tuple[str, ...]) -> Iterator[str]:
    if value is not None and value not in allowed:
        yield f"{path}: {value!r} is not one of {', '.join(allowed)}"


def _list(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
