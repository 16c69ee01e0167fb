"""The scheduling contract: the single source of truth for where pods may run.

Each pool class (system, spot GPU, flex-start, on-demand GPU) has a *contract*: the
taints its nodes carry, the labels they are guaranteed to have, and the PriorityClass of
the work meant for it. Pools take their taints and labels from :func:`contract`;
workloads take their tolerations, node selector and affinity from :func:`placement` for
the class they target. Because both sides are derived from the same table, a workload
cannot be built that misses a toleration of the pool it targets.

Its inverse, "could this pod land on this node?", is :mod:`spotproof.scheduling.fit`, which
``spotproof plan`` and the policy rules run over the *rendered* resources, so a
hand-edited manifest or a mutated pool is caught too.

Taint effects are spelled three ways: ``NoSchedule`` in Kubernetes and Karpenter,
``NO_SCHEDULE`` in the GCP and AWS APIs, ``key=value:NoSchedule`` strings in AKS.
:func:`cloud_effect` and :func:`aks_taint` own that translation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import EXPENDABLE_PRIORITY_CUTOFF, PROFILES, Cloud
from spotproof.catalog.labels import (
    GKE_ACCELERATOR_LABEL,
    GKE_COMPUTE_CLASS_LABEL,
    GKE_FLEX_START_LABEL,
)
from spotproof.catalog.profile import CRITICAL_ADDONS_ONLY
from spotproof.fleet.pools import PoolClass, Taint, TaintEffect

POOL_CLASS_LABEL = "spotproof.dev/pool-class"
"""Node label every spotproof pool carries; workloads select on it."""
TARGET_CLASS_LABEL = "spotproof.dev/target-class"
"""Pod label every spotproof workload carries: the pool class it is aimed at. A pending pod
has no node to say where it is going; kube-state-metrics exposes this label (allowlisted)
as ``kube_pod_labels{label_spotproof_dev_target_class=...}``, which the Pending alerts
(``observability.rules``) join per class."""
WARM_SPARE_LABEL = "spotproof.dev/warm-spare"
"""Pod label, ``"true"``, on every placeholder pod that holds a warm spare node
(``kube.spares.WarmSpares``): what the plan and ``spotproof status`` count spares by. A
placeholder carries no ``TARGET_CLASS_LABEL``: it is not work, and a placeholder waiting
for a new node after it gave its own away would otherwise count as GPU work pending (the
Pending alerts) and as a workload that is never scraped (the health alerts). Its class is
where its selector and tolerations aim it, the trainer's own."""
CAPACITY_TAINT_KEY = "spotproof.dev/capacity"
"""Taint key that keeps ordinary pods off spot and flex-start capacity."""
GPU_RESOURCE = "nvidia.com/gpu"

SYSTEM_TAINT = Taint(*CRITICAL_ADDONS_ONLY, TaintEffect.NO_SCHEDULE)
"""The system pool's taint where the platform's add-ons follow the Kubernetes convention;
a cloud whose add-ons tolerate another names it in its profile (``system_taint``)."""
GPU_TAINT = Taint(GPU_RESOURCE, "present", TaintEffect.NO_SCHEDULE)
"""GKE taints the nodes of a GPU pool added to a cluster that already runs a non-GPU pool
("GKE automatically taints the GPU nodes", https://cloud.google.com/kubernetes-engine/docs/how-to/gpus;
every spotproof cluster has its system pool first); declaring it keeps ``pulumi up``
diff-free, and Karpenter pools carry it so that only GPU work lands on GPU nodes."""


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int
    description: str
    preempts: bool = True
    """False sets ``preemptionPolicy: Never``: the pod waits instead of evicting others."""


PLATFORM_PRIORITY = PriorityClassSpec(
    "spotproof-platform", 1_000_000, "Cluster add-ons on the system pool; never preempted by work."
)
TRAINING_PRIORITY = PriorityClassSpec(
    "spotproof-training",
    1_000,
    "Training on capacity that is not reclaimed (on-demand, flex-start).",
)
SPOT_BATCH_PRIORITY = PriorityClassSpec(
    "spotproof-spot-batch",
    -5,
    "Preemptible batch work on spot capacity: negative, so the scheduler evicts it first; "
    "not below -10, or the cluster autoscaler never adds a node for it.",
)
"""Negative so that any default-priority pod preempts it, and at or above the cluster
autoscaler's expendable cutoff (``catalog.EXPENDABLE_PRIORITY_CUTOFF``, -10): a pending pod
below it never triggers a scale-up, and every GPU pool starts at zero nodes. It preempts
(``PreemptLowerPriority``), which evicts only pods of a strictly lower priority: of what
spotproof renders, only warm spares' placeholders (:data:`WARM_SPARE_PRIORITY`, -10), so a
replaced rank takes a spare's node instead of waiting for a new one; a class that is
``Never`` "cannot preempt other pods" (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/,
"Non-preempting PriorityClass"). Earlier releases rendered it ``Never``; the field is
immutable, so the baseline replaces the class on ``pulumi up`` (``kube.baseline``)."""
PRIORITY_CLASSES = (PLATFORM_PRIORITY, TRAINING_PRIORITY, SPOT_BATCH_PRIORITY)
WARM_SPARE_PRIORITY = PriorityClassSpec(
    "spotproof-warm-spare",
    EXPENDABLE_PRIORITY_CUTOFF,
    "Placeholders holding warm spare GPU nodes: below every workload, so any workload that "
    "may preempt takes their node; not below -10, or the cluster autoscaler would neither "
    "add a node for one nor keep its node.",
    preempts=False,
)
"""The placeholders' priority (``kube.spares``), not one of ``PRIORITY_CLASSES`` (each
``WarmSpares`` renders its own). Exactly the cluster autoscaler's expendable cutoff
(``--expendable-pods-priority-cutoff``, default -10, kubernetes/autoscaler
cluster-autoscaler-1.36.1 ``cluster-autoscaler/config/flags/flags.go``): a pod *below* it
neither triggers a scale-up nor keeps its node from being scaled down, one at it does both
(``cluster-autoscaler/FAQ.md``, "How can I configure overprovisioning with Cluster
Autoscaler?", which reserves -10 for such pods). The lowest value that holds a node leaves
the most room below the lowest workload class (``SPOT_BATCH_PRIORITY``, -5). ``Never``
preempts: a placeholder waits for a node rather than evicting anything."""


@dataclass(frozen=True)
class PoolContract:
    """What every node of one pool class carries, and what work targeting it runs at."""

    pool_class: PoolClass
    taints: tuple[Taint, ...]
    labels: Mapping[str, str]
    priority: PriorityClassSpec


_SYSTEM_CONTRACTS: dict[Cloud, PoolContract] = {
    cloud: PoolContract(
        PoolClass.SYSTEM,
        (Taint(*profile.system_taint, TaintEffect.NO_SCHEDULE),),
        {POOL_CLASS_LABEL: "system"},
        PLATFORM_PRIORITY,
    )
    for cloud, profile in PROFILES.items()
}
_CONTRACTS: dict[PoolClass, PoolContract] = {
    PoolClass.SPOT_GPU: PoolContract(
        PoolClass.SPOT_GPU,
        (Taint(CAPACITY_TAINT_KEY, "spot"), GPU_TAINT),
        {POOL_CLASS_LABEL: "spot-gpu"},
        SPOT_BATCH_PRIORITY,
    ),
    PoolClass.FLEX_START: PoolContract(
        PoolClass.FLEX_START,
        (Taint(CAPACITY_TAINT_KEY, "flex-start"), GPU_TAINT),
        {POOL_CLASS_LABEL: "flex-start"},
        TRAINING_PRIORITY,
    ),
    PoolClass.ON_DEMAND_GPU: PoolContract(
        PoolClass.ON_DEMAND_GPU,
        (GPU_TAINT,),
        {POOL_CLASS_LABEL: "on-demand-gpu"},
        TRAINING_PRIORITY,
    ),
}


def contract(pool_class: PoolClass, cloud: Cloud | None = None) -> PoolContract:
    """The contract of ``pool_class``; the system class's taint differs per ``cloud``."""
    if pool_class is PoolClass.SYSTEM:
        if cloud is None:
            raise ValueError("the system pool's contract differs per cloud; name the cloud")
        return _SYSTEM_CONTRACTS[cloud]
    return _CONTRACTS[pool_class]


def system_taint(cloud: Cloud) -> Taint:
    return contract(PoolClass.SYSTEM, cloud).taints[0]


# --- workloads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Everything a pod spec needs to land on one pool class, in Kubernetes spelling."""

    tolerations: tuple[dict[str, str], ...]
    node_selector: dict[str, str]
    node_affinity: dict[str, Any] | None
    priority_class_name: str


def toleration_for(taint: Taint) -> dict[str, str]:
    return {
        "key": taint.key,
        "operator": "Equal",
        "value": taint.value,
        "effect": taint.effect.value,
    }


def compute_class_taint(name: str) -> Taint:
    """The taint of the pools a GKE ComputeClass ``name`` takes (``catalog.labels``)."""
    return Taint(GKE_COMPUTE_CLASS_LABEL, name, TaintEffect.NO_SCHEDULE)


def placement(
    pool_class: PoolClass,
    accelerators: Iterable[str] = (),
    fallback: Iterable[PoolClass] = (),
    compute_class: str | None = None,
) -> Placement:
    """Where a workload targeting ``pool_class`` goes.

    ``accelerators`` narrows GPU work to nodes with one of these GPU models (required node
    affinity on GKE's ``cloud.google.com/gke-accelerator``). Flex-start work selects the
    labels GKE documents for DWS flex-start, so node auto-provisioning can create such a
    pool too.

    ``fallback`` names classes the workload may also run on when its own has no capacity
    (EKS: the on-demand NodePool behind the spot one). The pool class is then required by
    node affinity over all of them, the workload tolerates every one's taints, and the
    provisioner's pool weights decide which is tried first.

    ``compute_class`` (GKE) selects that ComputeClass, whose priorities order the target's
    and ``fallback``'s pools: the class label is then the only selector (GKE refuses a pod
    that pairs a class with spot or machine selectors, and the class already names the
    hardware), and the workload tolerates every rung's taints and the class's own.

    This is what a pod spec gets. Workload components (``TrainingJob``) take a
    ``kube.workload.TargetPlacement`` instead (``cluster.placement(...)``, or
    ``TargetPlacement.on_existing_cluster(...)`` on a cluster spotproof did not create):
    it also says what a reclaim of the pools leaves the pod, and renders to this.
    """
    pool_contract = contract(pool_class)
    if compute_class is not None:
        classes = [pool_class, *(c for c in fallback if c is not pool_class)]
        taints = dict.fromkeys(t for c in classes for t in contract(c).taints)
        return Placement(
            tolerations=tuple(
                toleration_for(t) for t in [*taints, compute_class_taint(compute_class)]
            ),
            node_selector={GKE_COMPUTE_CLASS_LABEL: compute_class},
            node_affinity=None,
            priority_class_name=pool_contract.priority.name,
        )
    accelerators = sorted(set(accelerators))
    classes = [pool_class, *(c for c in fallback if c is not pool_class)]
    selector = dict(pool_contract.labels)
    expressions = []
    if pool_class is PoolClass.FLEX_START and len(accelerators) == 1:
        selector = {GKE_FLEX_START_LABEL: "true", GKE_ACCELERATOR_LABEL: accelerators[0]}
    elif accelerators:
        expressions.append({"key": GKE_ACCELERATOR_LABEL, "operator": "In", "values": accelerators})
    if len(classes) > 1:
        selector = {}
        expressions.insert(
            0, {"key": POOL_CLASS_LABEL, "operator": "In", "values": [c.value for c in classes]}
        )
    affinity = None
    if expressions:
        affinity = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    taints = dict.fromkeys(t for c in classes for t in contract(c).taints)
    return Placement(
        tolerations=tuple(toleration_for(t) for t in taints),
        node_selector=selector,
        node_affinity=affinity,
        priority_class_name=pool_contract.priority.name,
    )


def cloud_effect(effect: TaintEffect) -> str:
    """GCP and AWS API spelling: ``NoSchedule`` -> ``NO_SCHEDULE``."""
    return {
        TaintEffect.NO_SCHEDULE: "NO_SCHEDULE",
        TaintEffect.PREFER_NO_SCHEDULE: "PREFER_NO_SCHEDULE",
        TaintEffect.NO_EXECUTE: "NO_EXECUTE",
    }[effect]


def cloud_taints(taints: Iterable[Taint]) -> list[dict[str, str]]:
    """Taints as the GCP and AWS APIs take them: ``{key, value, effect: NO_SCHEDULE}``."""
    return [{"key": t.key, "value": t.value, "effect": cloud_effect(t.effect)} for t in taints]


def kubernetes_effect(cloud_spelling: str) -> TaintEffect:
    """The inverse of :func:`cloud_effect`; accepts Kubernetes spelling unchanged."""
    for effect in TaintEffect:
        if cloud_spelling in (effect.value, cloud_effect(effect)):
            return effect
    raise ValueError(f"unknown taint effect {cloud_spelling!r}")


def aks_taint(taint: Taint) -> str:
    """AKS node pool spelling: ``key=value:NoSchedule``."""
    return f"{taint.key}={taint.value}:{taint.effect.value}"
