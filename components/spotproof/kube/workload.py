"""What a cluster hands the workloads that run on it, whatever the cloud.

A cluster component knows how its cloud binds a Kubernetes service account to a cloud
identity (an annotation on GKE and AKS, an association on the EKS side; a pod label on
AKS) and which pools serve a pool class. Workload components take these two values and
never ask which cloud they are on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import pulumi

from spotproof.catalog import GRACE_PERIOD_SECONDS, Cloud, kueue, profile
from spotproof.fleet import PoolClass, Taint
from spotproof.fleet.pools import GpuPoolSpec, shortest_reclaim_grace
from spotproof.scheduling import TARGET_CLASS_LABEL

_WORK_CLASSES = [c for c in PoolClass if c is not PoolClass.SYSTEM]


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
    goes away, and the final checkpoint with it. None where nodes are not reclaimed, so
    required for spot: a guess there (Kubernetes' 30 s) is longer than GKE's 15 s."""
    cloud: Cloud | None = None
    """Set by :meth:`on_existing_cluster`: the cluster is not spotproof's, so no baseline of
    spotproof's isolates the namespace its workloads run in, and a ``TrainingJob`` isolates
    its own pods with a NetworkPolicy of this cloud's allowances. None on a
    ``HybridCluster``, whose workload namespace its baseline isolates."""

    def __post_init__(self) -> None:
        # A mistake here would otherwise surface as an AttributeError deep in a pod spec,
        # or as a grace period the plan finds too long only after the program is written.
        if not _member(PoolClass, self.target):
            raise TypeError(
                f"TargetPlacement.target = {self.target!r}: not a pool class; allowed: "
                f"{_allowed(PoolClass)}"
            )
        object.__setattr__(self, "target", PoolClass(self.target))
        grace = self.max_grace_seconds
        if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
            raise TypeError(
                f"TargetPlacement.max_grace_seconds = {grace!r}; allowed: whole seconds, or None"
            )
        if self.target is PoolClass.SPOT_GPU and (grace is None or grace < 1):
            raise ValueError(
                f"TargetPlacement(PoolClass.SPOT_GPU): max_grace_seconds = {grace}, but spot "
                "nodes are reclaimed, so the grace the reclaim leaves a pod must be stated; "
                "allowed: cluster.placement(PoolClass.SPOT_GPU) on a HybridCluster, "
                "TargetPlacement.on_existing_cluster(cloud) on a cluster you already have, "
                "or max_grace_seconds=1 or more"
            )

    @classmethod
    def on_existing_cluster(
        cls,
        cloud: Cloud | str,
        target: PoolClass | str = PoolClass.SPOT_GPU,
        *,
        pools: Sequence[GpuPoolSpec] = (),
        accelerators: Sequence[str] = (),
        fallback: Sequence[PoolClass] = (),
    ) -> TargetPlacement:
        """Where work aimed at ``target`` goes on a cluster spotproof did not create: what a
        ``HybridCluster`` reads from its fleet, taken from ``cloud``'s facts (``catalog``)
        and from the ``pools`` the program adds there (``GkeGpuPool``, ``KarpenterPool``,
        ``GpuAgentPool``...), which the plan then judges it against.

        - The grace: what a spot reclaim leaves a pod on ``cloud`` (GKE 15 s of its 30 s
          shutdown, EKS 90 s, AKS 30 s: ``CloudProfile.grace_seconds``), or the shortest
          that the ``pools`` of ``target`` leave (a GKE pool of ``shutdown_seconds=120``:
          105 s); none for a class that is not reclaimed.
        - The taint ``cloud`` puts on its spot pools by itself, tolerated (AKS's
          ``scalesetpriority``), and no disruption budget where its reclaim drain would wait
          on one (``CloudProfile.reclaim_waits_on_budgets``: AKS).
        - ``accelerators``: GPU models to require by GKE's ``cloud.google.com/gke-accelerator``
          label (empty on EKS and AKS, whose nodes carry no such label);
          ``fallback``: classes the work may also run on when ``target`` has no capacity.
        """
        where = "TargetPlacement.on_existing_cluster"
        if not _member(Cloud, cloud):
            raise ValueError(f"{where}: cloud = {cloud!r}; allowed: {_allowed(Cloud)}")
        cloud, target = Cloud(cloud), _work_class(where, "target", target)
        fallback = [_work_class(where, "fallback", c) for c in _listed(where, "fallback", fallback)]
        accelerators = _listed(where, "accelerators", accelerators)
        if not all(isinstance(a, str) and a for a in accelerators):
            raise TypeError(f"{where}: accelerators = {accelerators!r}; allowed: GPU model names")
        serving = _pools_of(where, target, _listed(where, "pools", pools))
        facts = profile(cloud)
        spot = target is PoolClass.SPOT_GPU
        own_taint = facts.spot_pool_taint if spot else None
        return cls(
            target,
            accelerators=sorted(set(accelerators)),
            fallback=fallback,
            reclaim_honours_budgets=spot and facts.reclaim_waits_on_budgets,
            platform_taints=[Taint(*own_taint)] if own_taint else [],
            max_grace_seconds=reclaim_grace(cloud, target, serving),
            cloud=cloud,
        )


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


def _member(enum: type[StrEnum], value: Any) -> bool:
    """Whether ``value`` is one of ``enum``'s members or their values."""
    return isinstance(value, str) and value in enum._value2member_map_


def _allowed(values: Iterable[Any]) -> str:
    return ", ".join(str(getattr(v, "value", v)) for v in values)


def _work_class(where: str, name: str, value: Any) -> PoolClass:
    """``value`` as a class work may target: any but the system pool's."""
    if not _member(PoolClass, value) or PoolClass(value) is PoolClass.SYSTEM:
        shown = getattr(value, "value", value)
        raise ValueError(f"{where}: {name} = {shown!r}; allowed: {_allowed(_WORK_CLASSES)}")
    return PoolClass(value)


def _listed(where: str, name: str, values: Any) -> list[Any]:
    """``values`` as a list; a lone string or object is a mistake, not a list of one."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{where}: {name} = {values!r}; allowed: a list, e.g. [{values!r}]")
    return list(values)


def _pools_of(where: str, target: PoolClass, pools: list[Any]) -> list[GpuPoolSpec]:
    """The ``pools`` that serve ``target``: the ones a reclaim of its work may hit."""
    for pool in pools:
        if not hasattr(pool, "pool_class") or not hasattr(pool, "reclaim_grace_seconds"):
            raise TypeError(
                f"{where}: pools holds {pool!r}; allowed: the pool specs the program adds "
                "(GkeGpuPool, KarpenterPool, GpuAgentPool, AutoProvisionedPool)"
            )
    serving = [p for p in pools if p.pool_class is target]
    if pools and not serving:
        found = ", ".join(f"{p.name} ({p.pool_class.value})" for p in pools)
        raise ValueError(
            f"{where}: none of the pools is of class {target.value}: {found}; allowed: "
            f"the pools that serve {target.value}, or none for the cloud's own facts"
        )
    return serving
