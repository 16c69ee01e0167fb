"""The workloads a stack renders, each with its pods, its failure budget, its queue and its
checkpoints: what ``spotproof status`` reports.

A workload is a Job, JobSet or Deployment labelled ``app.kubernetes.io/managed-by:
spotproof`` (``kube.baseline.MANAGED_BY``: the smoke Job, a TrainingJob's Job or JobSet, the
batch workers' Deployment); a Job a JobSet owns is part of its JobSet. Its pods are found by
the label their controller puts on them (``drill.target.selector``: the Job controller's
``batch.kubernetes.io/job-name``, the JobSet's ``jobset.sigs.k8s.io/jobset-name``), a
Deployment's by its own selector. The pool class it targets is its pod template's
``spotproof.dev/target-class`` label (``scheduling.TARGET_CLASS_LABEL``).

What counts against the failure budget is the controller's own count: a Job's
``status.failed`` against ``spec.backoffLimit`` (pods its ``podFailurePolicy`` ignores, such
as reclaims, are not counted: https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy),
a JobSet's ``status.restartsCountTowardsMax`` against ``spec.failurePolicy.maxRestarts``
(kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from spotproof.catalog import jobset as jobset_facts
from spotproof.drill.target import selector
from spotproof.runtime import settings
from spotproof.scheduling import TARGET_CLASS_LABEL
from spotproof.status import cluster
from spotproof.status.checkpoints import LastCheckpoint
from spotproof.status.pods import PodStatus, pod_status
from spotproof.status.queueing import Queued, queue_name, queued

KINDS = ("Job", jobset_facts.KIND, "Deployment")
FINISHED = ("Complete", "Completed", "Failed", "Suspended")
"""Job and JobSet conditions that name a state on their own."""


@dataclass(frozen=True)
class Budget:
    counted: int
    limit: int | None
    field: str
    """Where ``counted`` is read: ``status.failed``, ``status.restartsCountTowardsMax``."""
    limit_field: str
    """Where ``limit`` is read: ``spec.backoffLimit``, ``spec.failurePolicy.maxRestarts``."""
    restarts: int | None = None
    """A JobSet's every restart (``status.restarts``), reclaims included: a gang restart
    deletes the reclaimed rank's pod with the others, so no pod is left to show it."""


@dataclass(frozen=True)
class Workload:
    kind: str
    namespace: str
    name: str
    target_class: str
    state: str
    pods: tuple[PodStatus, ...]
    budget: Budget | None = None
    queue: Queued | None = None
    checkpoint: LastCheckpoint | None = None

    @property
    def reclaims(self) -> int:
        return sum(p.reclaim is not None for p in self.pods)


def _template(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The pod template of a Job, JobSet (its first replicated Job) or Deployment."""
    spec = obj.get("spec") or {}
    if kind == jobset_facts.KIND:
        jobs = spec.get("replicatedJobs") or [{}]
        spec = ((jobs[0].get("template") or {}).get("spec")) or {}
    return spec.get("template") or {}


def checkpoint_url(obj: Mapping[str, Any], kind: str) -> str | None:
    """The literal ``CHECKPOINT_URL`` of the template's first container (the trainer's)."""
    containers = (_template(obj, kind).get("spec") or {}).get("containers") or [{}]
    env = {e.get("name"): e.get("value") for e in containers[0].get("env") or []}
    return env.get(settings.CHECKPOINT_URL.name) or None


def _pod_selector(obj: Mapping[str, Any], kind: str) -> str:
    if kind == "Deployment":
        labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return ",".join(f"{k}={v}" for k, v in labels.items())
    return selector(kind, obj["metadata"]["name"])


def _state(obj: Mapping[str, Any], kind: str) -> str:
    status = obj.get("status") or {}
    if kind == "Deployment":
        return (
            f"{status.get('readyReplicas') or 0}/{(obj.get('spec') or {}).get('replicas', 1)} ready"
        )
    true = [
        c["type"]
        for c in status.get("conditions") or []
        if c.get("status") == "True" and c.get("type") in FINISHED
    ]
    if true:
        return true[-1]
    if (obj.get("spec") or {}).get("suspend"):
        return "Suspended"
    return f"Active {status.get('active') or 0}" if kind == "Job" else "Running"


def _budget(obj: Mapping[str, Any], kind: str) -> Budget | None:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind == "Job":
        counted = int(status.get("failed") or 0)
        return Budget(counted, spec.get("backoffLimit"), "status.failed", "spec.backoffLimit")
    if kind == jobset_facts.KIND:
        limit = (spec.get("failurePolicy") or {}).get("maxRestarts")
        counted = int(status.get("restartsCountTowardsMax") or 0)
        field, limit_field = "status.restartsCountTowardsMax", "spec.failurePolicy.maxRestarts"
        return Budget(counted, limit, field, limit_field, int(status.get("restarts") or 0))
    return None


def _owned_by_jobset(obj: Mapping[str, Any]) -> bool:
    owners = obj["metadata"].get("ownerReferences") or []
    return any(o.get("kind") == jobset_facts.KIND for o in owners)


def _sort_key(pod: PodStatus) -> tuple[float, str]:
    return (pod.created or 0.0, pod.name)


def collect(
    api: client.ApiClient,
    now: float,
    checkpoints: Callable[[str], LastCheckpoint] | None = None,
    fallback_url: str | None = None,
) -> list[Workload]:
    """Every workload of the stack with its pods, oldest pod first. ``checkpoints(url)``
    reads a store (None: not read); a trainer whose template names no literal URL is given
    ``fallback_url`` (the stack's ``checkpoint_url`` output)."""
    nodes = cluster.nodes(api)
    found: list[Workload] = []
    for kind in KINDS:
        for obj in cluster.managed(api, kind):
            if kind == "Job" and _owned_by_jobset(obj):
                continue
            template = _template(obj, kind)
            labels = (template.get("metadata") or {}).get("labels") or {}
            if (
                kind == "Deployment"
                and TARGET_CLASS_LABEL not in labels
                and (labels.get("app.kubernetes.io/component") != "batch-worker")
            ):
                continue  # not a workload: an add-on's Deployment
            meta = obj["metadata"]
            namespace = meta.get("namespace", "")
            listed = cluster.pods(api, namespace, _pod_selector(obj, kind))
            pods = sorted((pod_status(p, nodes, now) for p in listed), key=_sort_key)
            queue = None
            if kind != "Deployment" and queue_name(obj) is not None:
                queue = queued(obj, cluster.kueue_workloads(api, namespace, meta.get("uid", "")))
            url = checkpoint_url(obj, kind)
            if url is None and kind != "Deployment":
                url = fallback_url
            found.append(
                Workload(
                    kind=kind,
                    namespace=namespace,
                    name=meta["name"],
                    target_class=labels.get(TARGET_CLASS_LABEL, ""),
                    state=_state(obj, kind),
                    pods=tuple(pods),
                    budget=_budget(obj, kind),
                    queue=queue,
                    checkpoint=checkpoints(url) if url and checkpoints else None,
                )
            )
    return sorted(found, key=lambda w: (w.namespace, w.kind, w.name))
