"""What a cluster hands the workloads that run on it, whatever the cloud.

A cluster component knows how its cloud binds a Kubernetes service account to a cloud
identity (an annotation on GKE and AKS, an association on the EKS side; a pod label on
AKS) and which pools serve a pool class. Workload components take these two values and
never ask which cloud they are on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pulumi

from spotproof.catalog import GRACE_PERIOD_SECONDS, Cloud, kueue
from spotproof.fleet import PoolClass, Taint
from spotproof.fleet.pools import GpuPoolSpec, shortest_reclaim_grace
from spotproof.scheduling import TARGET_CLASS_LABEL


@dataclass(frozen=True)
class ServiceAccountRef:
    """A Kubernetes service account, by namespace and name."""

    namespace: str
    name: str


@dataclass(frozen=True)
class LocalQueueRef:
    """A Kueue LocalQueue, by namespace and name."""

    namespace: str
    name: str


@dataclass(frozen=True)
class WorkloadIdentity:
    """How a pod of ``service_account`` acts as ``cloud_identity`` in the cloud."""

    service_account: ServiceAccountRef
    cloud_identity: pulumi.Input[str]
    """The cloud principal: a Google service account email, an IAM role ARN, a managed
    identity's client id."""
    service_account_annotations: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    """Annotations the binding needs on the service account (``iam.gke.io/gcp-service-account``,
    ``azure.workload.identity/client-id``); none with EKS Pod Identity."""
    pod_labels: dict[str, str] = field(default_factory=dict)
    """Labels the binding needs on the pod (``azure.workload.identity/use``)."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variables the workload's storage client needs besides the checkpoint URL
    (``AZURE_STORAGE_ACCOUNT_NAME``: an ``az://`` URL names only the container)."""
    granted_by: tuple[pulumi.Resource, ...] = ()
    """What binds the service account to ``cloud_identity`` and grants it its rights
    (typically the component that made them). Every workload running as it is created
    after them: a pod created first starts without credentials or rights
    (``spotproof.policy.identity_readiness``)."""


@dataclass(frozen=True)
class TargetPlacement:
    """What a workload aimed at a pool class needs to know about the pools that serve it."""

    target: PoolClass
    accelerators: list[str] = field(default_factory=list)
    """GPU models to require by node label (GKE's ``gke-accelerator``); empty where a
    pool class is one model or the cloud labels no model."""
    fallback: list[PoolClass] = field(default_factory=list)
    """Pool classes the workload may also run on when its target has no capacity."""
    reclaim_honours_budgets: bool = False
    """The cloud drains a reclaimed node through the Eviction API with nothing to end the
    wait (AKS node auto-drain on a spot agent pool): a PodDisruptionBudget allowing no
    disruption would keep SIGTERM from the workload until the VM is gone, so workloads
    aimed here carry none (the autoscaler's ``safe-to-evict`` annotation still guards
    them against scale-down)."""
    platform_taints: list[Taint] = field(default_factory=list)
    """Taints the cloud puts on the target's nodes by itself, beyond the contract's (AKS
    spot pools' ``kubernetes.azure.com/scalesetpriority=spot``): tolerated too."""
    queue: LocalQueueRef | None = None
    """Where the target's pools get nodes only through a ProvisioningRequest (GKE queued
    provisioning): the LocalQueue a Job or JobSet aimed here is submitted to
    (``spotproof.kube.provisioning_queue``). Only workloads in its namespace can use it."""
    compute_class: str | None = None
    """The GKE ComputeClass the target's workloads select (``fleet.gke_compute_class``):
    its priorities try the target's pools, then ``fallback``'s; None where there is none."""
    max_grace_seconds: int | None = None
    """The longest ``terminationGracePeriodSeconds`` the target's preemption path honours
    (``spotproof.catalog.GRACE_PERIOD_SECONDS``): a longer one is cut short when the node
    goes away, and the final checkpoint with it. None where nodes are not reclaimed."""


def target_labels(placement: TargetPlacement) -> dict[str, str]:
    """The pod label naming the pool class a workload is aimed at: what the Pending alerts
    and ``spotproof status`` group pods by (``scheduling.TARGET_CLASS_LABEL``)."""
    return {TARGET_CLASS_LABEL: placement.target.value}


def queue_labels(placement: TargetPlacement) -> dict[str, str]:
    """What submits a Job or JobSet to the target's Kueue queue; none where the target
    gets nodes without one."""
    return {kueue.QUEUE_NAME_LABEL: placement.queue.name} if placement.queue else {}


def reclaim_grace(cloud: Cloud, target: PoolClass, pools: Iterable[GpuPoolSpec] = ()) -> int | None:
    """:attr:`TargetPlacement.max_grace_seconds` for ``target`` on ``cloud``: spot capacity
    is reclaimed with the cloud's notice, or what its ``pools`` set (a GKE spot pool's
    shutdown period), the shortest of them: a pod may land on any; the other classes are
    not reclaimed."""
    if target is not PoolClass.SPOT_GPU:
        return None
    return shortest_reclaim_grace(pools, GRACE_PERIOD_SECONDS[cloud])
