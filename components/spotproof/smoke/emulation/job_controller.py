"""The Job controller's verdict on a failed pod, from the rendered Job's own policy.

Kubernetes matches a failed pod against ``spec.podFailurePolicy.rules`` in order; the first
rule that matches decides (https://kubernetes.io/docs/concepts/workloads/controllers/job/
#pod-failure-policy):

- ``onExitCodes``: the exit code of a container (``containerName``, if given) is ``In``
  or ``NotIn`` the values; a container that never terminated with a code (its node
  vanished) matches no exit-code rule;
- ``onPodConditions``: the pod carries the condition (``DisruptionTarget`` when it was
  preempted, evicted, or deleted with its node);
- actions: ``FailJob`` ends the Job, ``Ignore`` does not count the failure, ``Count``
  (and a pod no rule matches) counts towards ``backoffLimit``; the Job fails once more
  than ``backoffLimit`` failures have been counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DISRUPTION_TARGET = "DisruptionTarget"


@dataclass(frozen=True)
class JobPolicy:
    backoff_limit: int = 6
    """Kubernetes' default when the Job sets none."""
    rules: tuple[Mapping[str, Any], ...] = ()
    container: str = ""

    @classmethod
    def of(cls, job_spec: Mapping[str, Any]) -> JobPolicy:
        pod = (job_spec.get("template") or {}).get("spec") or {}
        containers = pod.get("containers") or [{}]
        return cls(
            backoff_limit=int(job_spec.get("backoffLimit", 6)),
            rules=tuple((job_spec.get("podFailurePolicy") or {}).get("rules") or ()),
            container=str(containers[0].get("name", "")),
        )

    def action(self, exit_code: int | None, conditions: Iterable[str]) -> str:
        """``FailJob``, ``Ignore`` or ``Count`` for a pod that failed this way."""
        present = set(conditions)
        for rule in self.rules:
            if self._matches(rule, exit_code, present):
                return str(rule.get("action"))
        return "Count"

    def _matches(self, rule: Mapping[str, Any], exit_code: int | None, present: set) -> bool:
        codes = rule.get("onExitCodes")
        if codes:
            if exit_code is None:
                return False
            name = codes.get("containerName")
            if name and name != self.container:
                return False
            values = [int(v) for v in codes.get("values") or []]
            return (exit_code in values) == (codes.get("operator") == "In")
        wanted = rule.get("onPodConditions") or []
        return any(
            c.get("type") in present and str(c.get("status", "True")) == "True" for c in wanted
        )


@dataclass
class JobController:
    """Counts failures the way the Job controller would and says when it gives up."""

    policy: JobPolicy
    counted: int = 0
    verdicts: list[str] = field(default_factory=list)
    failed: str | None = None
    """Why the Job failed; None while it is still running."""

    def pod_failed(self, exit_code: int | None, conditions: Iterable[str], what: str) -> None:
        action = self.policy.action(exit_code, conditions)
        self.verdicts.append(f"{what}: {action}")
        if action == "FailJob" and self.failed is None:
            self.failed = f"{what} matched a FailJob rule"
        elif action == "Count":
            self.counted += 1
            if self.counted > self.policy.backoff_limit and self.failed is None:
                self.failed = (
                    f"{self.counted} failures counted against backoffLimit "
                    f"{self.policy.backoff_limit} (last: {what})"
                )
