"""JobSets checked as the JobSet API server would: its CRD's fields, its webhook's rules,
and each replicated Job's template against the Kubernetes ``batch/v1`` Job schema.

kubernetes-validate has no JobSet schema; the fields below are those of
``api/jobset/v1alpha2/jobset_types.go`` and the rules those of
``pkg/webhooks/jobset_webhook.go`` (kubernetes-sigs/jobset v0.12.0, ``catalog.jobset``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from spotproof.catalog import jobset
from spotproof.plan.schemas import field_types

SPEC_FIELDS = frozenset(
    {
        "replicatedJobs",
        "network",
        "successPolicy",
        "failurePolicy",
        "startupPolicy",
        "suspend",
        "coordinator",
        "managedBy",
        "ttlSecondsAfterFinished",
        "volumeClaimPolicies",
    }
)
REPLICATED_JOB_FIELDS = frozenset({"name", "groupName", "template", "replicas", "dependsOn"})
NETWORK_FIELDS = frozenset({"enableDNSHostnames", "subdomain", "publishNotReadyAddresses"})
FAILURE_POLICY_FIELDS = frozenset({"maxRestarts", "restartStrategy", "rules"})
RULE_FIELDS = frozenset(
    {"name", "action", "onJobFailureReasons", "onJobFailureMessagePatterns", "targetReplicatedJobs"}
)
RESTART_STRATEGIES = frozenset({jobset.RECREATE, "BlockingRecreate"})
"""What the webhook admits from a controller installed from ``catalog.jobset.CHART``:
``InPlaceRestart`` needs the controller's alpha gate, which that chart cannot turn on
(``catalog.jobset.CHART_FEATURE_GATES``)."""

JOBSET_SHAPE: dict[str, field_types.Shape] = {
    "metadata": field_types.METADATA,
    "spec": {
        "replicatedJobs": [
            {
                "name": str,
                "groupName": str,
                "replicas": int,
                "template": {
                    "metadata": field_types.OBJECT,
                    "spec": {
                        "completions": int,
                        "parallelism": int,
                        "completionMode": str,
                        "template": field_types.OBJECT,
                    },
                },
                "dependsOn": [field_types.OBJECT],
            }
        ],
        "network": {"enableDNSHostnames": bool, "subdomain": str, "publishNotReadyAddresses": bool},
        "failurePolicy": {
            "maxRestarts": int,
            "restartStrategy": str,
            "rules": [
                {
                    "name": str,
                    "action": str,
                    "onJobFailureReasons": [str],
                    "onJobFailureMessagePatterns": [str],
                    "targetReplicatedJobs": [str],
                }
            ],
        },
        "successPolicy": {"operator": str, "targetReplicatedJobs": [str]},
        "startupPolicy": field_types.OBJECT,
        "suspend": bool,
        "managedBy": str,
        "ttlSecondsAfterFinished": int,
    },
}
"""The types of the JobSet fields these checks read (``jobset_types.go``)."""

JobValidator = Callable[[dict[str, Any]], list[str]]
"""Schema errors of a ``batch/v1`` Job object, each ``path: message``."""


def is_jobset(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == jobset.API_VERSION and obj.get("kind") == jobset.KIND


def errors(obj: Mapping[str, Any], validate_job: JobValidator) -> list[str]:
    """Every reason the API server would refuse ``obj``, each ``path: message``; only the
    fields' types when those are wrong (the other checks read the fields)."""
    wrong_types = list(field_types.errors(obj, JOBSET_SHAPE))
    return wrong_types or list(_errors(obj, validate_job))


def unknown_fields(path: str, value: Any, known: frozenset[str]) -> Iterator[str]:
    """``path.key: unknown field`` for each key of ``value`` outside ``known``."""
    if not isinstance(value, Mapping):
        yield f"{path}: expected an object"
        return
    for key in sorted(set(value) - known):
        yield f"{path}.{key}: unknown field (allowed: {', '.join(sorted(known))})"


def _errors(obj: Mapping[str, Any], validate_job: JobValidator) -> Iterator[str]:
    name = str((obj.get("metadata") or {}).get("name", ""))
    spec = obj.get("spec") or {}
    yield from unknown_fields("spec", spec, SPEC_FIELDS)
    yield from unknown_fields("spec.network", spec.get("network") or {}, NETWORK_FIELDS)
    replicated = spec.get("replicatedJobs") or []
    if not replicated:
        yield "spec.replicatedJobs: required, at least one"
    names = [str(r.get("name", "")) for r in replicated]
    for index, job in enumerate(replicated):
        path = f"spec.replicatedJobs[{index}]"
        yield from unknown_fields(path, job, REPLICATED_JOB_FIELDS)
        yield from _replicated_job(name, path, job, validate_job)
    yield from _failure_policy(spec.get("failurePolicy"), names)


def _replicated_job(
    name: str, path: str, job: Mapping[str, Any], validate_job: JobValidator
) -> Iterator[str]:
    if not job.get("name"):
        yield f"{path}.name: required"
        return
    replicas = int(job.get("replicas", 1))
    longest = f"{name}-{job['name']}-{max(replicas - 1, 0)}"
    if len(longest) > jobset.MAX_NAME_LENGTH:
        yield (
            f"{path}: child Job name {longest} is longer than {jobset.MAX_NAME_LENGTH} "
            "characters; shorten the JobSet or replicated Job name"
        )
    template = (job.get("template") or {}).get("spec")
    if template is None:
        yield f"{path}.template.spec: required"
        return
    completions = template.get("completions")
    if template.get("completionMode", "Indexed") == "Indexed" and completions:
        pod = f"{longest}-{int(completions) - 1}-abcde"
        if len(pod) > jobset.MAX_NAME_LENGTH:
            yield (
                f"{path}: pod name {pod} is longer than {jobset.MAX_NAME_LENGTH} characters; "
                "shorten the JobSet or replicated Job name"
            )
    child = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": longest},
        "spec": template,
    }
    for error in validate_job(child):
        yield f"{path}.template.{error}"


def _failure_policy(policy: Any, replicated: list[str]) -> Iterator[str]:
    if policy is None:
        return
    yield from unknown_fields("spec.failurePolicy", policy, FAILURE_POLICY_FIELDS)
    strategy = policy.get("restartStrategy", jobset.RECREATE)
    if (
        strategy == jobset.IN_PLACE_RESTART
        and jobset.IN_PLACE_RESTART_GATE not in jobset.CHART_FEATURE_GATES
    ):
        yield (
            f"spec.failurePolicy.restartStrategy: {strategy!r} not allowed: the webhook refuses "
            f"it while the controller's {jobset.IN_PLACE_RESTART_GATE} feature gate is off "
            "(alpha, off by default), and the JobSet chart has no value that turns it on "
            f"(allowed: {', '.join(sorted(RESTART_STRATEGIES))})"
        )
    elif strategy not in RESTART_STRATEGIES:
        yield (
            f"spec.failurePolicy.restartStrategy: {strategy!r} not allowed "
            f"(allowed: {', '.join(sorted(RESTART_STRATEGIES))})"
        )
    seen: set[str] = set()
    for index, rule in enumerate(policy.get("rules") or []):
        path = f"spec.failurePolicy.rules[{index}]"
        yield from unknown_fields(path, rule, RULE_FIELDS)
        rule_name = str(rule.get("name", ""))
        if not jobset.RULE_NAME.fullmatch(rule_name) or len(rule_name) > jobset.RULE_NAME_MAX:
            yield (
                f"{path}.name: {rule_name!r} is not a rule name (a letter, then letters, "
                "digits, '_', ',' or ':', ending in a letter, digit or '_'; at most "
                f"{jobset.RULE_NAME_MAX})"
            )
        elif rule_name in seen:
            yield f"{path}.name: {rule_name!r} is used by an earlier rule"
        seen.add(rule_name)
        if rule.get("action") not in jobset.ACTIONS:
            yield (
                f"{path}.action: {rule.get('action')!r} not allowed "
                f"(allowed: {', '.join(sorted(jobset.ACTIONS))})"
            )
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in jobset.FAILURE_REASONS:
                yield (
                    f"{path}.onJobFailureReasons: {reason!r} is not a Job failure reason "
                    f"(allowed: {', '.join(sorted(jobset.FAILURE_REASONS))})"
                )
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in replicated:
                yield f"{path}.targetReplicatedJobs: no replicated Job named {target!r}"
