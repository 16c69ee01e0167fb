"""Workloads in a plan and the scheduling check: will each one run, and where?

For every workload the check asks :func:`spotproof.scheduling.misfits` against every
node shape of the plan, then judges the answer:

- a workload targeting a pool class must fit at least one pool of that class;
- a system workload must fit the system pool and *no* reclaimable (spot, flex-start) pool;
- the platform's own add-ons, modelled by a reference pod, must do the same.

DaemonSets are exempt: node agents are meant to run on every node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof import scheduling
from spotproof.plan.recorder import Recording
from spotproof.policy import Violation
from spotproof.spec.types import PoolClass

FIT_POLICY = "scheduling-fit"
SYSTEM_OFF_SPOT_POLICY = "system-off-spot"


@dataclass(frozen=True)
class Workload:
    resource: str
    """Pulumi resource name, for the violation report."""
    kind: str
    namespace: str
    name: str
    pod_spec: Mapping[str, Any]

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def target(self) -> PoolClass | None:
        """The pool class the workload selects, if it selects one."""
        selector = self.pod_spec.get("nodeSelector") or {}
        if selector.get(scheduling.POOL_CLASS_LABEL) in PoolClass._value2member_map_:
            return PoolClass(selector[scheduling.POOL_CLASS_LABEL])
        if selector.get(scheduling.GKE_FLEX_START_LABEL) == "true":
            return PoolClass.FLEX_START
        return None


def _pod_spec(kind: str, spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template")
    return (template or {}).get("spec") if template is not None else None


def workloads(recording: Recording) -> list[Workload]:
    found = []
    for resource in recording.kubernetes_objects():
        kind = resource.inputs.get("kind", "")
        if kind == "DaemonSet":
            continue
        pod_spec = _pod_spec(kind, resource.inputs.get("spec") or {})
        if pod_spec is None:
            continue
        metadata = resource.inputs.get("metadata") or {}
        found.append(
            Workload(
                resource.name,
                kind,
                metadata.get("namespace", "default"),
                metadata.get("name", resource.name),
                pod_spec,
            )
        )
    return sorted(found, key=lambda w: (w.kind, w.namespace, w.name))


def _class_of(node: scheduling.NodeShape) -> str | None:
    return node.labels.get(scheduling.POOL_CLASS_LABEL)


def _why_not(pod_spec: Mapping[str, Any], nodes: list[scheduling.NodeShape]) -> str:
    return "; ".join(f"{n.pool}: {', '.join(scheduling.misfits(pod_spec, n))}" for n in nodes)


def check_workload(
    workload: Workload, nodes: list[scheduling.NodeShape], *, system: bool
) -> list[Violation]:
    fits = [n for n in nodes if not scheduling.misfits(workload.pod_spec, n)]
    if system:
        violations = []
        reclaimable = [n.pool for n in fits if n.reclaimable]
        if reclaimable:
            violations.append(
                Violation(
                    SYSTEM_OFF_SPOT_POLICY,
                    workload.resource,
                    f"system workload {workload.label} can land on reclaimable pool(s) "
                    f"{', '.join(reclaimable)}",
                )
            )
        if not any(_class_of(n) == PoolClass.SYSTEM for n in fits):
            system_pools = [n for n in nodes if _class_of(n) == PoolClass.SYSTEM]
            violations.append(
                Violation(
                    FIT_POLICY,
                    workload.resource,
                    f"system workload {workload.label} fits no system pool"
                    + (f" ({_why_not(workload.pod_spec, system_pools)})" if system_pools else ""),
                )
            )
        return violations

    target = workload.target
    candidates = [n for n in nodes if target is None or _class_of(n) == target]
    if any(n in fits for n in candidates):
        return []
    wanted = f"pool of class {target.value}" if target else "pool"
    detail = _why_not(workload.pod_spec, candidates) if candidates else f"the plan has no {wanted}"
    return [
        Violation(FIT_POLICY, workload.resource, f"{workload.label} fits no {wanted}: {detail}")
    ]


def check(recording: Recording, nodes: list[scheduling.NodeShape]) -> list[Violation]:
    """The scheduling check over a whole plan."""
    violations = []
    for workload in workloads(recording):
        system = scheduling.is_system_workload(workload.namespace, workload.pod_spec)
        violations += check_workload(workload, nodes, system=system)
    reference = Workload(
        "platform-add-ons",
        "Pod",
        "kube-system",
        "reference-add-on",
        scheduling.reference_system_pod(),
    )
    violations += check_workload(reference, nodes, system=True)
    return violations


REFERENCE_ADD_ON = Workload(
    "platform-add-ons", "Pod", "kube-system", "reference-add-on", scheduling.reference_system_pod()
)


def placements(recording: Recording, nodes: list[scheduling.NodeShape]) -> dict[str, list[str]]:
    """Which pools each workload fits (and the platform's add-ons), for the report."""
    return {
        w.label: [n.pool for n in nodes if not scheduling.misfits(w.pod_spec, n)]
        for w in [*workloads(recording), REFERENCE_ADD_ON]
    }
