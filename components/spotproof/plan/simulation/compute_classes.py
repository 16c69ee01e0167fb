"""GKE ComputeClasses in the plan: which priority a pending pod gets, what happens when
spot returns, and what a reclaim does on each rung.

A workload selects a class by the node label ``cloud.google.com/compute-class``. GKE's
cluster autoscaler then scales up the class's first priority it can get a node for and
moves to the next one only when it cannot (a stockout); with ``whenUnsatisfiable:
DoNotScaleUp`` nothing is created beyond the last
(https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes,
"Choose your fallback compute priorities"). With ``activeMigration.optimizeRulePriority``
GKE later moves workloads back to a higher priority by replacing the lower one's nodes.
The autoscaler's own node removals leave alone a node whose pod refuses eviction
(``safe-to-evict: "false"``, a PodDisruptionBudget that allows none: kubernetes/autoscaler
``cluster-autoscaler/FAQ.md``); GKE does not say whether migration honours them too, so
the plan names them and says its reading is an assumption. Each rung's reclaim is its
pool's: spot pools take the preemption path the plan computed for them
(``plan.simulation.preemption``), on-demand ones are never reclaimed, flex-start ones live
up to their ``maxRunDuration``.

A pool GKE did not create serves a class only with the class's label and NoSchedule
taint (the page above, "manually created node pools"): ``[compute-class-pools]`` flags a
class naming a pool without them, or one the program does not declare, and a pod that
pairs the class with a spot or machine selector, which GKE refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotproof import scheduling
from spotproof.catalog.labels import GKE_COMPUTE_CLASS_LABEL, GKE_NODEPOOL_LABEL, GKE_SPOT_LABEL
from spotproof.plan.model import Pool, PreemptionPath, Verdict
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.workloads import workloads
from spotproof.policy import Violation

TYPE = "kubernetes:cloud.google.com/v1:ComputeClass"
POLICY = "compute-class-pools"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
REFUSED_BESIDE_CLASS = (
    GKE_SPOT_LABEL,
    "cloud.google.com/machine-family",
    "node.kubernetes.io/instance-type",
)
"""Selectors GKE refuses on a pod that selects a ComputeClass: spot and machine choices
are the class's to make (the page above, "Request ComputeClasses in workloads")."""


@dataclass(frozen=True)
class Ladder:
    """One ComputeClass as its priorities, each the pools of one ``nodepools`` rule."""

    name: str
    resource: str
    rungs: tuple[tuple[str, ...], ...]
    active_migration: bool
    when_unsatisfiable: str


def ladders(recording: Recording) -> dict[str, Ladder]:
    """Every ComputeClass the program declares, by name."""
    found = {}
    for resource in recording.of_type(TYPE):
        spec = resource.inputs.get("spec") or {}
        name = str((resource.inputs.get("metadata") or {}).get("name", resource.name))
        rungs = tuple(
            tuple(str(p) for p in rule.get("nodepools") or ())
            for rule in spec.get("priorities") or []
            if isinstance(rule, Mapping)
        )
        found[name] = Ladder(
            name,
            resource.name,
            rungs,
            bool((spec.get("activeMigration") or {}).get("optimizeRulePriority")),
            str(spec.get("whenUnsatisfiable") or "DoNotScaleUp"),
        )
    return found


def selected(pod_spec: Mapping[str, Any]) -> str | None:
    """The ComputeClass a pod selects, if any."""
    value = (pod_spec.get("nodeSelector") or {}).get(GKE_COMPUTE_CLASS_LABEL)
    return str(value) if value else None


def describe(
    ladder: Ladder,
    verdicts: Mapping[str, Verdict],
    paths: Sequence[PreemptionPath],
    pools: Mapping[str, Pool],
    blockers: Sequence[str],
) -> list[str]:
    """What the class does for one workload, rung by rung, in words.

    ``verdicts``: the scale-up verdict of each pool the workload fits; ``paths`` its
    preemption paths; ``blockers``: what keeps its pod from being evicted."""
    lines = []
    for priority, names in enumerate(ladder.rungs, start=1):
        for name in names:
            verdict = verdicts.get(name)
            scales = (
                "not a pool it fits"
                if verdict is None
                else ("scales" if verdict.scales else f"does not scale: {verdict.detail}")
            )
            lines.append(
                f"priority {priority}: {name} ({scales}); {_rung_reclaim(name, paths, pools)}"
            )
    first = next(
        (
            priority
            for priority, names in enumerate(ladder.rungs, start=1)
            if any(verdicts.get(n) and verdicts[n].scales for n in names)
        ),
        None,
    )
    if first is None:
        lines.append("a pending pod gets no node: no priority scales")
    else:
        beyond = (
            "and none beyond the last (whenUnsatisfiable DoNotScaleUp)"
            if ladder.when_unsatisfiable == "DoNotScaleUp"
            else "then any node auto-provisioning creates (whenUnsatisfiable ScaleUpAnyway)"
        )
        lines.append(
            f"a pending pod gets a node from priority {first}, the next priority only when "
            f"GKE gets no capacity there, {beyond}"
        )
    lines.append(_when_capacity_returns(ladder, blockers))
    return lines


def _rung_reclaim(name: str, paths: Sequence[PreemptionPath], pools: Mapping[str, Pool]) -> str:
    path = next((p for p in paths if name in p.pools), None)
    if path is not None:
        if path.sigterm_at is None:
            return f"a reclaim ({path.capacity}) never sends SIGTERM"
        return (
            f"a reclaim ({path.capacity}) sends SIGTERM at {path.sigterm_at:g} s with "
            f"{path.grace_seconds:g} s grace"
        )
    pool = pools.get(name)
    if pool is not None and pool.shape.flex_start and pool.scaling.max_run_seconds:
        return f"flex-start: no reclaim before {pool.scaling.max_run_seconds // 3600} h"
    if pool is not None and not pool.shape.reclaimable:
        return "on-demand: never reclaimed"
    return "reclaim path unknown"


def _when_capacity_returns(ladder: Ladder, blockers: Sequence[str]) -> str:
    if not ladder.active_migration:
        return (
            "when a higher priority has capacity again the pod stays where it runs "
            "(activeMigration off)"
        )
    if blockers:
        return (
            "when a higher priority has capacity again GKE moves workloads up by replacing "
            f"their nodes; {' and '.join(blockers)} hold back the autoscaler's own node "
            "removals, and if migration honours them too (GKE does not say: an assumption) "
            "this pod stays where it runs until it ends, while a pod created later (after "
            "a reclaim, or the next run) starts from priority 1"
        )
    return (
        "when a higher priority has capacity again GKE evicts the pod to move it up: "
        "SIGTERM with its grace period, then it resumes from its final checkpoint"
    )


def eviction_blockers(annotations: Mapping[str, str], budgets: Sequence[str]) -> list[str]:
    """What keeps a pod from being evicted to move it between rungs."""
    found = [f"{SAFE_TO_EVICT}: false"] if annotations.get(SAFE_TO_EVICT) == "false" else []
    return found + [f"PodDisruptionBudget {b}" for b in budgets]


def check(recording: Recording, pools: Sequence[Pool]) -> list[Violation]:
    """Rungs GKE would not use, and pods GKE would refuse."""
    declared = {pool.name: pool for pool in pools}
    gke_pools = [pool for pool in pools if GKE_NODEPOOL_LABEL in pool.shape.labels]
    violations = []
    for ladder in ladders(recording).values():
        taint = scheduling.compute_class_taint(ladder.name)
        for name in (n for rung in ladder.rungs for n in rung):
            pool = declared.get(name)
            if pool is None:
                if gke_pools:  # the program declares the pools; one it names is missing
                    violations.append(
                        Violation(
                            POLICY,
                            ladder.resource,
                            f"ComputeClass {ladder.name} names node pool {name}, which this "
                            "program does not declare",
                        )
                    )
                continue
            missing = []
            if pool.shape.labels.get(GKE_COMPUTE_CLASS_LABEL) != ladder.name:
                missing.append(f"label {GKE_COMPUTE_CLASS_LABEL}={ladder.name}")
            if taint not in pool.shape.taints:
                missing.append(f"taint {taint.key}={taint.value}:{taint.effect.value}")
            if missing:
                violations.append(
                    Violation(
                        POLICY,
                        ladder.resource,
                        f"ComputeClass {ladder.name} names node pool {name}, but GKE uses a "
                        f"pool it did not create only with the class's {' and '.join(missing)}",
                    )
                )
    for workload in workloads(recording):
        chosen = selected(workload.pod_spec)
        selector = workload.pod_spec.get("nodeSelector") or {}
        refused = sorted(set(selector) & set(REFUSED_BESIDE_CLASS))
        if chosen and refused:
            violations.append(
                Violation(
                    POLICY,
                    workload.resource,
                    f"selects ComputeClass {chosen} and also {', '.join(refused)}, which GKE "
                    "refuses: the class chooses spot and machines",
                    workload.key_path(),
                )
            )
    return violations
