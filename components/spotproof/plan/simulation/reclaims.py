"""Does a Job count a reclaim as a reclaim? Its failure policies, applied to the pod each
preemption path leaves behind.

A reclaimed pod ends ``Failed`` with what its path gives it (``preemption.Ending``): the
``DisruptionTarget`` condition or not, and the exit code its launcher leaves after SIGTERM
(``runtime.launcher.exit_after_sigterm``) or none at all when the node vanished first. The
Job controller then takes the first ``podFailurePolicy`` rule that matches, in order: an
``onExitCodes`` rule matches a container's terminated exit code other than 0 (of the named
container, with ``In`` or ``NotIn``), an ``onPodConditions`` rule a condition of the pod;
no rule matching counts the failure against ``backoffLimit``
(kubernetes/kubernetes ``pkg/controller/job/pod_failure_policy.go``,
``matchPodFailurePolicy``; https://kubernetes.io/docs/tasks/job/pod-failure-policy/).

What a reclaim must come to:

- a one-pod Job: ``Ignore``, so the Job starts a new pod without spending ``backoffLimit``;
- a JobSet's child Job: ``FailJob``, whose reason ``PodFailurePolicy`` and message the
  JobSet's first matching ``failurePolicy`` rule turns into
  ``RestartJobSetAndIgnoreMaxRestarts`` (``catalog.jobset.FIRST_MATCHING_RULE_WINS``); a
  Job failed any other way takes the default ``RestartJobSet``, counted against
  ``maxRestarts``.

The failure message a JobSet rule's ``onJobFailureMessagePatterns`` reads is the Job
controller's: "Container C for pod NS/P failed with exit code N matching FailJob rule at
index I", or "Pod NS/P has condition DisruptionTarget matching FailJob rule at index I"
(``pod_failure_policy.go``); the patterns are RE2, here read as Python expressions, which
agree on the ones JobSet examples and spotproof write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import jobset
from spotproof.plan.model import Ending, PreemptionPath, Workload
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.policy import Violation
from spotproof.runtime import launcher
from spotproof.scheduling import pod_templates

POLICY = "reclaim-counted"
FREE_RESTART = "RestartJobSetAndIgnoreMaxRestarts"
POD = "pod-0"
"""Stands for the reclaimed pod's name in a failure message."""


@dataclass(frozen=True)
class Failure:
    """The reclaimed pod as the Job controller finds it."""

    condition: bool
    exits: dict[str, int]
    """Container -> exit code; empty when none was recorded."""


def failure(pod_spec: Mapping[str, Any], ending: Ending) -> Failure:
    exits = {
        str(c.get("name")): launcher.exit_after_sigterm(
            [*(c.get("command") or []), *(c.get("args") or [])]
        )
        for c in pod_spec.get("containers") or []
    }
    return Failure(ending.condition, exits if ending.exits else {})


def matching_rule(
    policy: Mapping[str, Any] | None, pod: Failure
) -> tuple[int, Mapping[str, Any], str] | None:
    """The first rule of ``policy`` that matches, its index, and what it matched on."""
    for index, rule in enumerate((policy or {}).get("rules") or []):
        on_exit = rule.get("onExitCodes")
        if on_exit:
            wanted = on_exit.get("containerName")
            values = {int(v) for v in on_exit.get("values") or []}
            for container, code in pod.exits.items():
                if code == 0 or (wanted and wanted != container):
                    continue
                inside = code in values
                if inside == (on_exit.get("operator", "In") == "In"):
                    return index, rule, f"exit code {code} of container {container}"
        for pattern in rule.get("onPodConditions") or []:
            if (
                pod.condition
                and pattern.get("type") == "DisruptionTarget"
                and str(pattern.get("status", "True")) == "True"
            ):
                return index, rule, "condition DisruptionTarget"
    return None


def _message(index: int, matched: str, namespace: str) -> str:
    """The Job controller's failure message for a pod failed by rule ``index``."""
    if matched.startswith("exit code"):
        code, container = matched.removeprefix("exit code ").split(" of container ")
        return (
            f"Container {container} for pod {namespace}/{POD} failed with exit code {code} "
            f"matching FailJob rule at index {index}"
        )
    return (
        f"Pod {namespace}/{POD} has condition DisruptionTarget matching FailJob rule at "
        f"index {index}"
    )


def jobset_action(policy: Mapping[str, Any] | None, reason: str, message: str) -> str:
    """The action the JobSet takes for a child Job failed with ``reason``."""
    for rule in (policy or {}).get("rules") or []:
        reasons = rule.get("onJobFailureReasons") or []
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if reasons and reason not in reasons:
            continue
        if patterns and not any(re.search(str(p), message) for p in patterns):
            continue
        return str(rule.get("action"))
    return "RestartJobSet"


def _judge(obj: Mapping[str, Any], workload: Workload, path: PreemptionPath) -> str | None:
    """What goes wrong when ``path`` reclaims a pod of ``workload`` (declared by ``obj``);
    None if its Job counts it as a reclaim."""
    kind, pod_spec, namespace = workload.kind, workload.pod_spec, workload.namespace
    part = workload.name.split("/", 1)[1] if "/" in workload.name else None
    pod = failure(pod_spec, path.ending)
    how = _how(path, pod)
    if kind == "Job":
        job = obj.get("spec") or {}
        found = matching_rule(job.get("podFailurePolicy"), pod)
        if found and found[1].get("action") == "Ignore":
            return None
        if found and found[1].get("action") in ("FailJob", "FailIndex"):
            return f"{how}, which podFailurePolicy rule {found[0]} fails the Job for"
        return (
            f"{how}, which no podFailurePolicy rule ignores: each reclaim spends one of "
            f"backoffLimit {job.get('backoffLimit', 6)}"
        )
    spec = obj.get("spec") or {}
    child = _child_job(spec, part)
    found = matching_rule(child.get("podFailurePolicy"), pod)
    if found and found[1].get("action") == "FailJob":
        reason, message = "PodFailurePolicy", _message(found[0], found[2], namespace)
    elif found and found[1].get("action") == "Ignore":
        return None  # the child Job replaces the pod itself; gang-restart judges that
    else:
        reason, message = "BackoffLimitExceeded", ""
    action = jobset_action(spec.get("failurePolicy"), reason, message)
    if action == FREE_RESTART:
        return None
    if action == "RestartJobSet":
        budget = (spec.get("failurePolicy") or {}).get("maxRestarts", 0)
        return (
            f"{how}, which fails its Job with {reason} and restarts the JobSet against "
            f"maxRestarts {budget}: after {budget} reclaims the run fails"
        )
    return f"{how}, which fails its Job with {reason}, and the JobSet's rule for that is {action}"


def _how(path: PreemptionPath, pod: Failure) -> str:
    where = f"on {path.capacity} ({', '.join(path.pools)})"
    if path.ending is Ending.DELETE:
        codes = ", ".join(f"{c} exits {code}" for c, code in pod.exits.items())
        return (
            f"{where} the reclaim deletes the pod without a DisruptionTarget condition and {codes}"
        )
    if not path.ending.exits:
        return f"{where} the node vanishes first, leaving DisruptionTarget and no exit code"
    return f"{where} the reclaim leaves DisruptionTarget ({path.ending.value})"


def _child_job(spec: Mapping[str, Any], part: str | None) -> Mapping[str, Any]:
    for replicated in spec.get("replicatedJobs") or []:
        if part is None or replicated.get("name") == part:
            return ((replicated.get("template") or {}).get("spec")) or {}
    return {}


def _fix(pod_spec: Mapping[str, Any]) -> str:
    commands = [
        [*(c.get("command") or []), *(c.get("args") or [])]
        for c in pod_templates.containers(pod_spec)
    ]
    if any(launcher.is_torchrun(c) for c in commands):
        return (
            "start torchrun through spotproof's launch script (runtime.launcher.wrapped: exit "
            "143 after SIGTERM), as TrainingJob does, and match exit 143 in podFailurePolicy"
        )
    return (
        "exit 143 after SIGTERM (spotproof's runtime does) and match it in podFailurePolicy: "
        "Ignore for a Job, FailJob for a JobSet's child Job whose JobSet restarts on "
        f"PodFailurePolicy with {FREE_RESTART}"
    )


def check(recording: Recording, found: list[Outcome]) -> list[Violation]:
    objects = {r.name: r.inputs for r in recording.kubernetes_objects()}
    violations = []
    for outcome in found:
        workload = outcome.workload
        if workload.kind not in ("Job", jobset.KIND) or outcome.system:
            continue
        obj = objects.get(workload.resource) or {}
        problems = [_judge(obj, workload, path) for path in outcome.paths]
        violations += [
            Violation(
                POLICY,
                workload.resource,
                f"{workload.label} {problem}; fix: {_fix(workload.pod_spec)}",
                _key_path(obj, workload),
            )
            for problem in problems
            if problem
        ]
    return violations


def _key_path(obj: Mapping[str, Any], workload: Workload) -> str | None:
    """Where a reclaim's finding is about: the podFailurePolicy of the Job that runs the
    pod, which decides how a reclaim counts, where that Job sets one; else the pod spec."""
    spec = obj.get("spec") or {}
    part = workload.name.split("/", 1)[1] if "/" in workload.name else None
    job = spec if workload.kind == "Job" else _child_job(spec, part)
    if "podFailurePolicy" in job:
        return workload.job_key_path("podFailurePolicy")
    return workload.key_path()
