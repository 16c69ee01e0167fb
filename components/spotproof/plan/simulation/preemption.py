"""The preemption path: when a reclaimed node's pods get SIGTERM, and with how much grace.

A trainer survives a reclaim only if SIGTERM reaches it while there is still time to
commit its final checkpoint. Each cloud delivers the reclaim its own way, and what can
hold SIGTERM back differs with it. A cloud's reclaim of the spot pools it scales itself is
its plan module's (``CloudPlan.spot_path``: GKE's kubelet shutdown in ``plan.gke``, AKS's
node auto-drain in ``plan.aks``); Karpenter's, on any cloud, is here, with the cloud's
notice and delivery from its profile:

EKS spot through Karpenter (https://karpenter.sh/docs/concepts/disruption/, in the source
tree aws/karpenter-provider-aws ``website/content/en/docs/concepts/disruption.md``, and the
CRD's own description of ``terminationGracePeriod`` in ``karpenter.sh_nodepools.yaml``:
"that pod will be deleted at T = node timeout - pod terminationGracePeriodSeconds";
"If left undefined, the controller will wait indefinitely"): AWS warns two
minutes ahead (best effort) through EventBridge; the warning reaches Karpenter through
the interruption queue (budgeted at ``interruption_delivery_seconds`` of its profile), which then
deletes the NodeClaim and drains the node through the Eviction API. The eviction waits for
every PodDisruptionBudget that allows no disruption, and pods annotated
``karpenter.sh/do-not-disrupt`` are not evicted at all. The NodePool's
``terminationGracePeriod`` bounds that wait: Karpenter deletes each pod still there at the
latest ``terminationGracePeriod - terminationGracePeriodSeconds`` after the drain began,
so it gets its whole grace period before the node's period ends. Without it a blocked pod
stays until the instance is gone and never gets SIGTERM.

AKS node auto-provisioning is Karpenter, but on Azure nothing drains on the notice: node
auto-drain covers agent pools only, and Karpenter's node repair, where it is on at all,
deletes the pods with no grace left (``catalog.aks.NAP_RECLAIM_UNANNOUNCED``). Such a
cloud's Karpenter reclaims are *unannounced* (:attr:`PreemptionPath.unannounced`): no
SIGTERM the trainer can use, the run resuming from its last periodic checkpoint. That is
a fact of the capacity, not a mistake in the stack: the plan prices it in the interval
model and says so, but finds no problem in it.

GKE flex-start nodes are not reclaimed early; they live at most ``maxRunDuration``. The
plan reports that bound rather than a notice.

What the pod's own launcher does comes last: torchrun stops its workers a fixed time after
SIGTERM (``runtime.launcher``, 30 s unless told otherwise), so a gang's final save has the
lesser of that and the grace (:attr:`PreemptionPath.usable_grace`), and a grace torchrun
would cut short is a problem of the path.

How each path ends the pod decides what its Job sees (:class:`Ending`): the graceful
node shutdown, an eviction and the pod garbage collector add the ``DisruptionTarget``
condition (https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions:
reasons ``TerminationByKubelet``, ``EvictionByEvictionAPI``, ``DeletionByPodGC``), but
Karpenter's deletion at ``terminationGracePeriod`` is a plain DELETE, which adds none
(kubernetes-sigs/karpenter ``terminator.go``, ``DeleteExpiringPods``): there the Job has
only the container's exit code (``plan.simulation.reclaims``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from spotproof.catalog import PROFILES, Cloud, profile
from spotproof.plan.cloud import plan_of
from spotproof.plan.model import Ending, Pool, PreemptionPath, Provisioner
from spotproof.plan.recording.recorder import Recording
from spotproof.policy import disruption
from spotproof.runtime import launcher

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DEFAULT_GRACE_SECONDS = 30
"""``terminationGracePeriodSeconds`` when a pod does not set it."""
POLICY = "preemption-path"


def karpenter_capacity(cloud: Cloud) -> str:
    """How reports name a cloud's spot capacity that Karpenter provisions."""
    return f"{cloud.value.upper()} spot (Karpenter)"


POOL_KEYS = {
    karpenter_capacity(cloud): cloud_profile.karpenter_pools_key
    for cloud, cloud_profile in PROFILES.items()
}
"""The stack config key that declares each cloud's Karpenter capacity."""


def pod_grace(pod: Mapping[str, Any]) -> int:
    """The grace period a pod declares."""
    return int(pod.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))


def launcher_stop(pod: Mapping[str, Any]) -> float | None:
    """The soonest any container's launcher kills its trainer after SIGTERM: torchrun's
    shutdown timeout, from its flags and the container's literal environment
    (``runtime.launcher.shutdown_timeout``); None where no container runs torchrun, or
    where the timeout comes from a source the plan cannot read (``valueFrom``)."""
    found = []
    for container in pod.get("containers") or []:
        env = container.get("env") or []
        names = {launcher.SHUTDOWN_TIMEOUT_ENV, launcher.SHUTDOWN_TIMEOUT_FLAG_ENV}
        if any(e.get("name") in names and "value" not in e for e in env):
            continue
        literal = {str(e.get("name")): str(e.get("value")) for e in env if "value" in e}
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        timeout = launcher.shutdown_timeout([str(word) for word in command], literal)
        if timeout is not None:
            found.append(timeout)
    return min(found, default=None)


def with_launcher(path: PreemptionPath, pod: Mapping[str, Any]) -> PreemptionPath:
    """``path`` with what the pod's launcher does after SIGTERM, in its steps too."""
    stop = launcher_stop(pod)
    if stop is None or path.sigterm_at is None:
        return path
    steps = list(path.steps)
    steps.insert(-1, f"torchrun SIGKILLs its workers {stop:g} s after SIGTERM")
    return replace(path, stopped_after=stop, steps=tuple(steps))


def node_gone_first(
    workload: str,
    capacity: str,
    pools: tuple[str, ...],
    *,
    notice: int,
    declared: int,
    steps: list[str],
    fix: str = "",
    unannounced: str = "",
) -> PreemptionPath:
    """A path on which the node goes before anything sends SIGTERM the pod can use."""
    return PreemptionPath(
        workload,
        capacity,
        pools,
        notice,
        sigterm_at=None,
        grace_seconds=0,
        declared_grace=declared,
        steps=(*steps, f"node gone at {notice} s"),
        ending=Ending.NODE_GONE,
        fix=fix,
        unannounced=unannounced,
    )


def _karpenter_spot(
    workload: str,
    pools: list[Pool],
    pod: Mapping[str, Any],
    annotations: Mapping[str, str],
    blocking_budgets: list[str],
    *,
    cloud: Cloud,
) -> PreemptionPath:
    facts = profile(cloud)
    notice = facts.preemption_notice_seconds
    drain = facts.interruption_delivery_seconds
    capacity = karpenter_capacity(cloud)
    budget = notice - drain
    declared = pod_grace(pod)
    names = tuple(p.name for p in pools)
    if facts.karpenter_reclaim_unannounced:
        return node_gone_first(
            workload,
            capacity,
            names,
            notice=notice,
            declared=declared,
            steps=[
                f"notice {notice} s (best effort)",
                "nothing drains the node; where Karpenter's node repair is on, it deletes the "
                "pod with no grace left",
                "no final save: the run resumes from its last periodic checkpoint",
            ],
            unannounced=facts.karpenter_reclaim_unannounced,
        )
    steps = [f"notice {notice} s", f"Karpenter drains after ~{drain} s"]
    holders = [f"PodDisruptionBudget {b}" for b in blocking_budgets]
    if annotations.get(DO_NOT_DISRUPT) == "true":
        holders.append(DO_NOT_DISRUPT)
    # A pod may land on any of these pools: the latest deletion among them decides.
    bounds = [p.scaling.termination_grace_seconds for p in pools]
    unbounded = [p.name for p in pools if p.scaling.termination_grace_seconds is None]
    fix = (
        f"set spec.template.spec.terminationGracePeriod of NodePool {', '.join(names)} to "
        f"{budget}s and the pod's terminationGracePeriodSeconds to at most {budget}"
    )
    sigterm: float | None
    ending = Ending.EVICTION
    if not holders:
        sigterm = drain
        steps.append("the eviction goes through at once")
    elif unbounded:
        sigterm = None
        steps.append(
            f"{' and '.join(holders)} hold the eviction, and NodePool {', '.join(unbounded)} "
            "sets no terminationGracePeriod to end the wait"
        )
    else:
        bound = max(b for b in bounds if b is not None)
        sigterm = drain + max(0, bound - declared)
        ending = Ending.DELETE
        late = sigterm >= notice
        steps.append(
            f"{' and '.join(holders)} hold the eviction until terminationGracePeriod "
            f"{bound}s deletes the pod at {sigterm:g} s"
            + (", after the instance is gone" if late else " (a plain delete: no DisruptionTarget)")
        )
        if late:
            sigterm = None
    if sigterm is None:
        return node_gone_first(
            workload, capacity, names, notice=notice, declared=declared, steps=steps, fix=fix
        )
    grace = min(declared, notice - sigterm)
    steps += [
        f"SIGTERM at {sigterm:g} s with {grace:g} s grace (declared {declared} s)",
        f"node gone at {notice} s",
    ]
    return PreemptionPath(
        workload,
        capacity,
        names,
        notice,
        sigterm,
        grace,
        declared,
        tuple(steps),
        ending,
        fix,
    )


def paths(
    workload: str,
    pod: Mapping[str, Any],
    annotations: Mapping[str, str],
    fitting: list[Pool],
    blocking_budgets: list[str],
    *,
    cloud: Cloud,
) -> list[PreemptionPath]:
    """The preemption path of a workload on each kind of reclaimable pool it fits, in the
    plan's ``cloud``: its own reclaim of the spot pools it scales (``CloudPlan.spot_path``),
    Karpenter's of its NodePools."""
    found = []
    node_pools = tuple(
        p.shape
        for p in fitting
        if p.shape.spot and p.scaling.provisioner is not Provisioner.KARPENTER
    )
    karpenter_spot = [
        p for p in fitting if p.shape.spot and p.scaling.provisioner is Provisioner.KARPENTER
    ]
    spot_path = plan_of(cloud).spot_path
    if node_pools and spot_path is not None:
        found.append(spot_path(workload, node_pools, pod, blocking_budgets))
    if karpenter_spot:
        found.append(
            _karpenter_spot(
                workload, karpenter_spot, pod, annotations, blocking_budgets, cloud=cloud
            )
        )
    return [with_launcher(path, pod) for path in found]


def blocking_budgets(
    recording: Recording, namespace: str, labels: Mapping[str, str], pods: int
) -> list[str]:
    """Names of the budgets over these pods that allow no eviction while they run."""
    found = []
    for budget in recording.of_type(disruption.PDB):
        metadata = budget.inputs.get("metadata") or {}
        if metadata.get("namespace", "default") != namespace:
            continue
        selector = (budget.inputs.get("spec") or {}).get("selector")
        if disruption.selects(selector, labels) and disruption.blocks_eviction(budget.inputs, pods):
            found.append(str(metadata.get("name", budget.name)))
    return found


def flex_start_bounds(fitting: list[Pool]) -> list[str]:
    """How long flex-start nodes this workload fits may live."""
    return [
        f"flex-start ({p.name}): no reclaim before maxRunDuration "
        f"{p.scaling.max_run_seconds // 3600} h; checkpoint well within it"
        for p in fitting
        if p.shape.flex_start and p.scaling.max_run_seconds
    ]
