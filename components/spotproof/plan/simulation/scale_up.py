"""Would a node be created for it? The autoscalers' rules, applied to every workload.

Fitting a pool's node shape is not enough: every GPU pool starts at zero nodes, so a pod
runs only if the provisioner behind a pool it fits creates a node for it. This module asks
that question per workload and pool, with the rule each provisioner documents:

The cluster autoscaler, as GKE runs it (also with node auto-provisioning, NAP) and AKS:

- pods below the expendable cutoff never trigger a scale-up
  (``--expendable-pods-priority-cutoff``, default -10; a pod is expendable when its
  priority is *below* it: kubernetes/autoscaler ``cluster-autoscaler/utils/pod/pod.go``,
  ``IsExpendablePod``; GKE keeps the default:
  https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler);
- a pool scales between its bounds, per zone for ``minNodeCount``/``maxNodeCount``;
  ``max 0`` never adds a node;
- NAP's resource limits cap the *whole cluster*, the pools declared by hand included
  (https://cloud.google.com/kubernetes-engine/docs/how-to/node-auto-provisioning; the
  autoscaler's own design notes say it "supports cluster-wide limits on resources (like
  total CPU and memory)", kubernetes/autoscaler
  ``cluster-autoscaler/proposals/granular-resource-limits.md``): a pool scales up only
  while every limit leaves room for one more of its nodes (the cloud whose cluster sets
  limits reads them: ``CloudPlan.cluster_limits``);
- a queued-provisioning pool gets nodes only through a ProvisioningRequest, never for an
  ordinary pending pod (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest):
  one of class ``queued-provisioning.gke.io`` that Kueue writes for a workload it would
  admit (``plan.simulation.admission``), or one the pods consume by annotation;
- nodes are created only in the pool's zones that offer its accelerator, where the
  cloud's catalog can tell (``catalog.gke.accelerator_zones``, read into
  ``Scaling.offered_zones``).

Karpenter (https://karpenter.sh/docs/concepts/nodepools/#speclimits):

- a NodePool launches only while its ``limits`` leave room for the node; as every GPU pool
  starts empty, its ``nvidia.com/gpu`` limit must hold one node's GPUs;
- there is no priority cutoff; requirements and taints are the fit check's business.

An EKS managed node group has no autoscaler here: its pods run on the nodes it keeps.

A gang (a JobSet's pods) runs only when all of its pods run at once, so the pools it
targets must hold all of them together, within their maximum nodes and GPU limits: asking
for more than that stalls the gang for good (the field guide's "over-provisioning"
pitfall), and nothing in Kubernetes reports why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spotproof import scheduling
from spotproof.catalog import EXPENDABLE_PRIORITY_CUTOFF, kueue
from spotproof.plan.cloud import every_plan
from spotproof.plan.model import ClusterLimits, Pool, Provisioner, Verdict
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.admission import Route
from spotproof.scheduling import quantity

PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
BUILTIN_PRIORITIES = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}
PROVISIONING_REQUEST_ANNOTATION = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
"""What a pod carries to consume a ProvisioningRequest (kubernetes/autoscaler,
``provisioningrequest/pods``); Kueue adds it for the workloads it admits."""


def cluster_limits(recording: Recording, pools: Sequence[Pool]) -> ClusterLimits | None:
    """The limits the recording's cluster puts on scaling up; None without any."""
    for plan in every_plan():
        limits = plan.cluster_limits(recording, pools)
        if limits is not None:
            return limits
    return None


def priority_of(pod_spec: Mapping[str, Any], recording: Recording) -> int:
    """The pod's priority as the admission controller resolves it."""
    classes = {
        (r.inputs.get("metadata") or {}).get("name"): r.inputs
        for r in recording.of_type(PRIORITY_CLASS)
    }
    name = pod_spec.get("priorityClassName")
    if name in BUILTIN_PRIORITIES:
        return BUILTIN_PRIORITIES[name]
    if name in classes:
        return int(classes[name].get("value") or 0)
    default = next((c for c in classes.values() if c.get("globalDefault")), None)
    return int(default.get("value") or 0) if default else 0


def zone_count(pool: Pool) -> int:
    return len(pool.scaling.zones) or pool.scaling.zones_by_default


def _queued_verdict(
    pool: Pool, annotations: Mapping[str, str], route: Route | None
) -> Verdict | None:
    """Why a queued-provisioning pool would provision nothing for the workload; None if it
    would."""
    if PROVISIONING_REQUEST_ANNOTATION in annotations:
        return None
    wanted = kueue.GKE_QUEUED_PROVISIONING_CLASS
    fix = (
        f"label the Job or JobSet {kueue.QUEUE_NAME_LABEL}: <a LocalQueue whose ClusterQueue "
        f"has a ProvisioningRequest admission check of class {wanted}>"
    )
    if route is None:
        return Verdict(
            pool.name,
            False,
            "queued-provisioning pool: nodes come only through a ProvisioningRequest, and the "
            f"workload is in no Kueue queue (no {kueue.QUEUE_NAME_LABEL} label) nor consumes "
            f"a request ({PROVISIONING_REQUEST_ANNOTATION})",
            fix,
        )
    if route.problems:
        return Verdict(
            pool.name,
            False,
            f"Kueue would never admit it through {route.describe()}: {'; '.join(route.problems)}",
            "fix the queue, or " + fix,
        )
    if wanted not in route.provisioning_classes:
        return Verdict(
            pool.name,
            False,
            f"{route.describe()} provisions no {wanted} nodes, and the pool takes no other "
            "requests",
            fix,
        )
    return None


def autoscaler_verdict(
    pool: Pool,
    priority: int,
    annotations: Mapping[str, str],
    limits: ClusterLimits | None,
    route: Route | None = None,
) -> Verdict:
    scaling = pool.scaling
    if priority < EXPENDABLE_PRIORITY_CUTOFF:
        return Verdict(
            pool.name,
            False,
            f"pod priority {priority} is below the cluster autoscaler's expendable cutoff "
            f"({EXPENDABLE_PRIORITY_CUTOFF}): no node is ever added for it",
            f"use a PriorityClass of at least {EXPENDABLE_PRIORITY_CUTOFF}",
        )
    if scaling.queued:
        blocked = _queued_verdict(pool, annotations, route)
        if blocked:
            return blocked
    if not scaling.max_nodes:
        return Verdict(pool.name, False, "its autoscaling maximum is 0 nodes", "raise maxNodeCount")
    offered = scaling.offered_zones
    usable = [z for z in scaling.zones if offered is None or z in offered]
    if scaling.zones and not usable:
        return Verdict(
            pool.name,
            False,
            f"none of its zones ({', '.join(scaling.zones)}) offers {scaling.accelerator}",
            f"use zones that offer it: {', '.join(sorted(offered or ()))}",
        )
    if limits is not None:
        blocked = limits.room_for(pool)
        if blocked:
            return blocked
    where = f" in {', '.join(usable)}" if usable else " in the cluster's zones"
    per = " per zone" if scaling.per_zone else ""
    through = f", queued through {route.describe()}" if scaling.queued and route else ""
    return Verdict(
        pool.name,
        True,
        f"{scaling.autoscaler}, {scaling.min_nodes}-{scaling.max_nodes} nodes{per}{where}{through}",
    )


def karpenter_verdict(pool: Pool) -> Verdict:
    limit = pool.scaling.limits.get(scheduling.GPU_RESOURCE)
    gpus = pool.shape.gpus
    if limit is not None and gpus > quantity.amount_or_zero(limit):
        return Verdict(
            pool.name,
            False,
            f"its limit of {limit} {scheduling.GPU_RESOURCE} cannot hold one node of {gpus}",
            f"raise spec.limits.{scheduling.GPU_RESOURCE} to at least {gpus}",
        )
    bound = f"up to {limit} {scheduling.GPU_RESOURCE}" if limit else "no GPU limit"
    return Verdict(pool.name, True, f"Karpenter, {bound}")


def _existing(pool: Pool) -> Verdict:
    count = pool.scaling.min_nodes
    if count:
        return Verdict(pool.name, True, f"no autoscaler; runs on its {count} nodes")
    return Verdict(pool.name, False, "no autoscaler and no nodes", "keep at least one node")


def pods_at_once(pool: Pool, pod_gpus: int) -> int | None:
    """The most pods of ``pod_gpus`` GPUs ``pool`` can run at the same time; None where
    nothing bounds it (CPU pods, a NodePool without a GPU limit)."""
    if pod_gpus <= 0:
        return None
    per_node = pool.shape.gpus // pod_gpus
    if pool.scaling.provisioner is Provisioner.KARPENTER:
        limit = pool.scaling.limits.get(scheduling.GPU_RESOURCE)
        return None if limit is None else int(quantity.amount_or_zero(limit) // pod_gpus)
    if pool.scaling.max_nodes is None:
        return None
    nodes = pool.scaling.max_nodes * (zone_count(pool) if pool.scaling.per_zone else 1)
    return nodes * per_node


def verdict(
    pool: Pool,
    priority: int,
    annotations: Mapping[str, str],
    limits: ClusterLimits | None,
    route: Route | None = None,
) -> Verdict:
    """Would ``pool`` get a node for a pending pod (of ``priority``, with the pod
    ``annotations``, its workload submitted through Kueue by ``route``) that fits it?"""
    if pool.scaling.provisioner is Provisioner.KARPENTER:
        return karpenter_verdict(pool)
    if pool.scaling.provisioner is Provisioner.NONE:
        return _existing(pool)
    return autoscaler_verdict(pool, priority, annotations, limits, route)
