"""Where each kind of workload keeps the pods it runs, and how many it runs at once.

The plan's checks (fit, scale-up, disruption budgets) all ask the same two questions of a
Kubernetes object: which pod templates does it hold, and how many pods of each run at
once. The controllers also label the pods they make (a JobSet's, ``catalog.jobset``; a
Job's, ``catalog.kubernetes_job``), and a budget or a NetworkPolicy written against those
labels selects them on a cluster, so the checks must see them: a label's value where it is
the same on every pod of a template and known before the pods run, else the label's key
alone (``PodTemplate.unknown_labels``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from spotproof.catalog import jobset, kubernetes_job

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
    unknown_labels: frozenset[str] = frozenset()
    """Labels the controllers put on every pod of it whose value is not known for each pod
    before they run: a uid, a restart count, an index that differs from pod to pod. A
    selector on one may select all of its pods, some or none (``policy.ingress.matches``);
    a controller's label whose value is known is in ``metadata``'s labels."""


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
        return list(_jobset_templates(metadata, spec))
    name: str | None = str(metadata.get("name", ""))
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
        name = None  # each run's Job is named after its schedule time
    template = spec.get("template") or {}
    if template.get("spec") is None:
        return []
    if kind not in ("Job", "CronJob"):
        pods = _count(spec.get("replicas"))
        return [PodTemplate(None, template.get("metadata") or {}, template["spec"], pods)]
    known, unknown = _job_labels(spec, name, kubernetes_job.NON_INDEXED)
    return [
        PodTemplate(
            None,
            _labelled(template.get("metadata") or {}, known, unknown),
            template["spec"],
            _job_pods(spec),
            unknown,
        )
    ]


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


def _labelled(
    metadata: Mapping[str, Any], known: Mapping[str, str], unknown: frozenset[str]
) -> dict[str, Any]:
    """A pod template's ``metadata`` with the controllers' labels over its own, as the
    controllers set them (the API server refuses a Job whose template sets one otherwise)."""
    labels = {**(metadata.get("labels") or {}), **known}
    return {**metadata, "labels": {k: v for k, v in labels.items() if k not in unknown}}


def _job_labels(
    job: Mapping[str, Any], name: str | None, default_mode: str
) -> tuple[dict[str, str], frozenset[str]]:
    """The labels every pod of a Job gets from the API server and the Job controller
    (``catalog.kubernetes_job``): those known for each pod (the Job's name, when ``name``
    is known), and the keys of the others (its uid; a completion index, one per pod)."""
    known: dict[str, str] = {}
    unknown: set[str] = set()
    if job.get("manualSelector") is not True:
        unknown |= {kubernetes_job.CONTROLLER_UID_LABEL, kubernetes_job.LEGACY_CONTROLLER_UID_LABEL}
        names = (kubernetes_job.JOB_NAME_LABEL, kubernetes_job.LEGACY_JOB_NAME_LABEL)
        if name is None:
            unknown.update(names)
        else:
            known.update(dict.fromkeys(names, name))
    if (job.get("completionMode") or default_mode) == kubernetes_job.INDEXED:
        if job.get("completions") == 1:
            known[kubernetes_job.COMPLETION_INDEX_LABEL] = "0"
        else:
            unknown.add(kubernetes_job.COMPLETION_INDEX_LABEL)
    return known, frozenset(unknown)


def _jobset_templates(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> list[PodTemplate]:
    """Each replicated Job's pod template, with the labels the JobSet controller gives its
    pods (``catalog.jobset``): the replicated Job's own, known for all of them; a child
    Job's (its index, its key, its name), known only when the replicated Job has one."""
    name = str(metadata.get("name", ""))
    namespace = str(metadata.get("namespace", "default"))
    replicated_jobs = [r for r in spec.get("replicatedJobs") or [] if isinstance(r, Mapping)]
    replicas = [_count(r.get("replicas")) for r in replicated_jobs]
    groups = [str(r.get("groupName") or jobset.DEFAULT_GROUP) for r in replicated_jobs]
    coordinator = spec.get("coordinator")
    found = []
    for index, replicated in enumerate(replicated_jobs):
        job = ((replicated.get("template") or {}).get("spec")) or {}
        template = job.get("template") or {}
        if template.get("spec") is None:
            continue
        part, group = str(replicated.get("name")), groups[index]
        known = {
            jobset.JOBSET_NAME_LABEL: name,
            jobset.REPLICATED_JOB_NAME_LABEL: part,
            jobset.REPLICATED_JOB_REPLICAS_LABEL: str(replicas[index]),
            jobset.GLOBAL_REPLICAS_LABEL: str(sum(replicas)),
            jobset.GROUP_NAME_LABEL: group,
            jobset.GROUP_REPLICAS_LABEL: str(
                sum(n for n, g in zip(replicas, groups, strict=True) if g == group)
            ),
        }
        if isinstance(coordinator, Mapping):
            subdomain = (spec.get("network") or {}).get("subdomain") or name
            known[jobset.COORDINATOR_LABEL] = (
                f"{name}-{coordinator.get('replicatedJob')}-{coordinator.get('jobIndex') or 0}"
                f"-{coordinator.get('podIndex') or 0}.{subdomain}"
            )
        unknown = set(jobset.UNKNOWN_LABELS)
        child: str | None = None
        if replicas[index] == 1:
            child = f"{name}-{part}-0"
            known[jobset.JOB_INDEX_LABEL] = "0"
            known[jobset.JOB_GLOBAL_INDEX_LABEL] = str(sum(replicas[:index]))
            known[jobset.JOB_GROUP_INDEX_LABEL] = str(
                sum(n for n, g in zip(replicas[:index], groups, strict=False) if g == group)
            )
            known[jobset.JOB_KEY_LABEL] = hashlib.sha1(
                f"{namespace}/{child}".encode(), usedforsecurity=False
            ).hexdigest()
        else:
            unknown.update(jobset.PER_JOB_LABELS)
        job_known, job_unknown = _job_labels(job, child, jobset.DEFAULT_COMPLETION_MODE)
        labels = {**job_known, **known}  # the JobSet's own over the Job's (none overlap)
        every = frozenset(unknown | job_unknown)
        pods = replicas[index] * _job_pods(job)
        found.append(
            PodTemplate(
                part,
                _labelled(template.get("metadata") or {}, labels, every),
                template["spec"],
                pods,
                every,
            )
        )
    return found
