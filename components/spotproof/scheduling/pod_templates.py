"""Where each kind of workload keeps the pods it runs, and how many it runs at once.

The plan's checks (fit, scale-up, disruption budgets) all ask the same two questions of a
Kubernetes object: which pod templates does it hold, and how many pods of each run at
once. A JobSet also labels its pods itself (``spotproof.catalog.jobset``), and a budget or
a selector written against those labels must see them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from spotproof.catalog import jobset

KINDS: dict[str, frozenset[str]] = {
    "": frozenset({"Pod"}),
    "apps": frozenset({"Deployment", "StatefulSet", "ReplicaSet"}),
    "batch": frozenset({"Job", "CronJob"}),
    jobset.API_VERSION.split("/")[0]: frozenset({jobset.KIND}),
}
"""API group -> the kinds whose pods the checks follow."""


@dataclass(frozen=True)
class PodTemplate:
    part: str | None
    """Which of the object's templates (a JobSet's replicated Job); None for the only one."""
    metadata: Mapping[str, Any]
    """Labels and annotations the pods get, the controller's own included."""
    spec: Mapping[str, Any]
    pods: int
    """Pods of it that run at once: a Job's ``parallelism``, a Deployment's ``replicas``,
    a replicated Job's ``replicas`` times its Jobs' ``parallelism``."""


def is_workload(obj: Mapping[str, Any]) -> bool:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return obj.get("kind") in KINDS.get(group, frozenset())


def _count(value: Any, default: int = 1) -> int:
    return int(default if value is None else value or 0)


def _job_pods(job: Mapping[str, Any]) -> int:
    """Pods a Job runs at once: ``parallelism`` (default 1), never more than its
    ``completions`` when it has a fixed count
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#controlling-parallelism)."""
    pods = _count(job.get("parallelism"))
    completions = job.get("completions")
    return pods if completions is None else min(pods, _count(completions))


def pod_spec_path(obj: Mapping[str, Any], part: str | None = None) -> str:
    """Where ``obj`` keeps its pod spec (of replicated Job ``part``, for a JobSet)."""
    kind = obj.get("kind")
    if kind == "Pod":
        return "spec"
    if kind == "CronJob":
        return "spec.jobTemplate.spec.template.spec"
    if kind == jobset.KIND:
        spec = obj.get("spec")
        jobs = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
        names = (
            [r.get("name") for r in jobs if isinstance(r, Mapping)]
            if isinstance(jobs, list)
            else []
        )
        index = names.index(part) if part in names else 0
        return f"spec.replicatedJobs[{index}].template.spec.template.spec"
    return "spec.template.spec"


def pod_templates(obj: Mapping[str, Any]) -> list[PodTemplate]:
    """The pod templates of a workload object; empty for anything else."""
    if not is_workload(obj):
        return []
    kind = obj["kind"]
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return [PodTemplate(None, metadata, spec, 1)]
    if kind == jobset.KIND:
        return list(_jobset_templates(str(metadata.get("name", "")), spec))
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template") or {}
    if template.get("spec") is None:
        return []
    pods = _job_pods(spec) if kind in ("Job", "CronJob") else _count(spec.get("replicas"))
    return [PodTemplate(None, template.get("metadata") or {}, template["spec"], pods)]


class Declared(Protocol):
    """A planned resource: its name and the object it declares (``inputs``, which carry
    the object's ``apiVersion`` and ``kind``)."""

    name: str
    inputs: dict[str, Any]


D = TypeVar("D", bound=Declared)


def workload_templates(resources: Iterable[D]) -> Iterator[tuple[D, str, PodTemplate]]:
    """Every pod template of every workload among ``resources``, with its namespace."""
    for resource in resources:
        namespace = (resource.inputs.get("metadata") or {}).get("namespace", "default")
        for template in pod_templates(resource.inputs):
            yield resource, namespace, template


def containers(pod_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A pod's init containers, then its containers."""
    return [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]


def _jobset_templates(name: str, spec: Mapping[str, Any]) -> list[PodTemplate]:
    found = []
    for replicated in spec.get("replicatedJobs") or []:
        job = ((replicated.get("template") or {}).get("spec")) or {}
        template = job.get("template") or {}
        if template.get("spec") is None:
            continue
        metadata = dict(template.get("metadata") or {})
        metadata["labels"] = {**(metadata.get("labels") or {}), jobset.JOBSET_NAME_LABEL: name}
        pods = _count(replicated.get("replicas")) * _job_pods(job)
        found.append(PodTemplate(str(replicated.get("name")), metadata, template["spec"], pods))
    return found
