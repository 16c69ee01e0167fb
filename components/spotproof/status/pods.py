"""One pod as ``spotproof status`` shows it: where it runs, how long it has waited and why,
and whether a reclaim ended it.

A reclaim is told by what the cluster writes, not guessed from timing:

- the ``DisruptionTarget`` condition, added before a pod is terminated by a disruption; its
  reason names the path: ``TerminationByKubelet`` (graceful node shutdown, GKE spot),
  ``EvictionByEvictionAPI`` (a drain: Karpenter, AKS node auto-drain),
  ``DeletionByTaintManager`` (a ``NoExecute`` taint, node unreachable), ``DeletionByPodGC``
  (the node object gone), ``PreemptionByScheduler``
  (https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions);
- exit code 143 in a container's ``state.terminated`` or ``lastState.terminated``: the
  trainer's ``PREEMPTED`` (``runtime.exit_codes``), its final checkpoint committed after
  SIGTERM. Karpenter's delete at ``terminationGracePeriod`` adds no condition (the drill's
  ``watch`` cites it), so the exit code is the only sign there.

A Pending pod's reason is the ``PodScheduled`` condition the scheduler writes when it cannot
place the pod (reason ``Unschedulable`` or ``SchedulingGated``, message ``0/5 nodes are
available: ...``: https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions);
once scheduled, the waiting container's reason (``ContainerCreating``, ``ImagePullBackOff``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.drill.kube_api import api_time
from spotproof.runtime.exit_codes import PREEMPTED
from spotproof.status.nodes import Placement, placement

PROVISIONING_REQUEST_ANNOTATION = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
"""A pod waiting for the nodes of a ProvisioningRequest (GKE queued provisioning) names it
here (kubernetes/autoscaler ``provisioningrequest/pods``,
``ProvisioningRequestPodAnnotationKey``)."""


@dataclass(frozen=True)
class Waiting:
    """Why a Pending pod is not running yet, and for how long."""

    seconds: float
    reason: str
    message: str


@dataclass(frozen=True)
class Reclaim:
    """The signs a reclaim or drain ended this pod."""

    reason: str
    """The ``DisruptionTarget`` reason; empty where only the exit code tells."""
    message: str
    exit_code: int | None
    at: float | None
    """When ``DisruptionTarget`` was added, else when the container ended."""


@dataclass(frozen=True)
class PodStatus:
    name: str
    phase: str
    placement: Placement | None
    """None until the pod is scheduled."""
    restarts: int
    created: float | None
    waiting: Waiting | None = None
    reclaim: Reclaim | None = None


def pod_status(
    pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], now: float
) -> PodStatus:
    """The pod's status; ``nodes`` by name (a node missing from it is gone), ``now`` on the
    API server's clock."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    node = spec.get("nodeName")
    phase = status.get("phase") or "Unknown"
    if meta.get("deletionTimestamp") and phase in ("Pending", "Running"):
        phase = "Terminating"
    containers = status.get("containerStatuses") or []
    created = api_time(meta.get("creationTimestamp"))
    return PodStatus(
        name=meta["name"],
        phase=phase,
        placement=placement(node, nodes.get(node)) if node else None,
        restarts=sum(int(c.get("restartCount") or 0) for c in containers),
        created=created,
        waiting=_waiting(pod, now - created) if phase == "Pending" and created else None,
        reclaim=_reclaim(status),
    )


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def _waiting(pod: Mapping[str, Any], seconds: float) -> Waiting:
    status = pod.get("status") or {}
    scheduled = _conditions(status).get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        reason, message = scheduled.get("reason") or "", scheduled.get("message") or ""
    else:
        waits = [
            (c.get("state") or {}).get("waiting") or {}
            for c in (status.get("initContainerStatuses") or [])
            + (status.get("containerStatuses") or [])
        ]
        first = next((w for w in waits if w), {})
        reason = first.get("reason") or ("Scheduled" if scheduled else "")
        message = first.get("message") or ""
    request = (pod["metadata"].get("annotations") or {}).get(PROVISIONING_REQUEST_ANNOTATION)
    if request:
        message = f"{message} (waits for ProvisioningRequest {request})".strip()
    return Waiting(max(0.0, seconds), reason, message)


def _exit_code(status: Mapping[str, Any]) -> tuple[int | None, float | None]:
    """The first reclaim exit code (else any exit code) a container reported, and when."""
    ended = [
        ((c.get(which) or {}).get("terminated")) or {}
        for c in status.get("containerStatuses") or []
        for which in ("state", "lastState")
    ]
    ended = [t for t in ended if "exitCode" in t]
    chosen = next((t for t in ended if t["exitCode"] == PREEMPTED), ended[0] if ended else {})
    return chosen.get("exitCode"), api_time(chosen.get("finishedAt"))


def _reclaim(status: Mapping[str, Any]) -> Reclaim | None:
    code, finished = _exit_code(status)
    disruption = _conditions(status).get("DisruptionTarget") or {}
    if disruption.get("status") == "True":
        at = api_time(disruption.get("lastTransitionTime"))
        return Reclaim(disruption.get("reason") or "", disruption.get("message") or "", code, at)
    if code == PREEMPTED:
        return Reclaim("", "", code, finished)
    return None
