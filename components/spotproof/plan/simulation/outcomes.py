"""Will each workload run, and will it survive a reclaim? The plan's per-workload verdict.

For every workload the plan renders: the pools it fits (``workloads``), which of those
would get a node for it (``scale_up``), and what a reclaim of each kind of reclaimable
capacity it fits does to it (``preemption``). Two checks come out of it:

- ``scale-up``: a workload meant to run must, for every pool class it targets, fit a pool
  whose provisioner would add a node for it (or that keeps nodes it can use);
- ``preemption-path``: on reclaimable capacity it must get SIGTERM, with at least the
  grace period it declares, before the node is gone;
- ``gang-capacity``: a gang's pods must all fit at once in the pools it gets nodes from,
  its target's and its fallbacks' together (``scale_up.pods_at_once``);
- ``queue-admission``: a workload submitted to a Kueue queue must be admissible by it
  (``queues``), or it stays suspended for good;
- ``memory-tier-restart``, ``memory-tier-room``, ``memory-tier-peers``: a trainer's memory
  tier must survive the restarts it is kept for, fit the pod's memory, and reach its peers
  (``memory_tiers``).
"""

from __future__ import annotations

from dataclasses import dataclass

from spotproof import scheduling
from spotproof.catalog import DEFAULT_CLOUD, jobset
from spotproof.fleet.pools import PoolClass
from spotproof.plan.model import Pool, PreemptionPath, Verdict, Workload
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation import (
    admission,
    compute_classes,
    memory_tiers,
    preemption,
    scale_up,
)
from spotproof.plan.simulation.workloads import workloads
from spotproof.policy import Violation
from spotproof.policy.kubernetes import cloud_of
from spotproof.scheduling import fit

SCALE_UP_POLICY = "scale-up"
GANG_CAPACITY_POLICY = "gang-capacity"
GANG_KINDS = frozenset({jobset.KIND})
"""Workloads whose pods must all run at once."""


@dataclass(frozen=True)
class Outcome:
    workload: Workload
    system: bool
    fits: tuple[Pool, ...]
    verdicts: tuple[Verdict, ...]
    """One per pool it fits."""
    paths: tuple[PreemptionPath, ...]
    bounds: tuple[str, ...]
    """Limits on how long its nodes live (flex-start)."""
    route: admission.Route | None = None
    """Its way through Kueue, where it is submitted to a queue."""
    budgets: tuple[str, ...] = ()
    """PodDisruptionBudgets that allow none of its pods to be evicted (none are looked for
    over system workloads)."""
    ladder: tuple[str, ...] = ()
    """What the GKE ComputeClass it selects does for it, rung by rung
    (``compute_classes.describe``); empty where it selects none."""

    def scaling(self) -> list[str]:
        ok = [f"{v.pool} ({v.detail})" for v in self.verdicts if v.scales]
        not_ok = [v.reason() for v in self.verdicts if not v.scales]
        text = f"gets nodes from {', '.join(ok)}" if ok else "NO POOL WOULD ADD A NODE"
        return [text, *(f"would not: {reason}" for reason in not_ok)]


def outcomes(recording: Recording, pools: list[Pool]) -> list[Outcome]:
    limits = scale_up.cluster_limits(recording, pools)
    kueue_objects = admission.KueueObjects.of(recording)
    classes = compute_classes.ladders(recording)
    cloud = cloud_of(recording.resources) or DEFAULT_CLOUD
    found = []
    for workload in workloads(recording):
        fits = tuple(p for p in pools if not fit.misfits(workload.pod_spec, p.shape))
        priority = scale_up.priority_of(workload.pod_spec, recording)
        queue = admission.queue_name(workload.kind, workload.labels)
        route = (
            admission.route(
                kueue_objects, queue, workload.namespace, workload.pod_spec, workload.pods
            )
            if queue
            else None
        )
        verdicts = tuple(
            scale_up.verdict(p, priority, workload.pod_annotations, limits, route) for p in fits
        )
        system = fit.is_system_workload(workload.namespace, workload.pod_spec)
        # A system workload must not be on reclaimable capacity at all (the scheduling
        # check says so); how a reclaim would treat it is beside the point.
        paths: list[PreemptionPath] = []
        budgets: list[str] = []
        if not system:
            budgets = preemption.blocking_budgets(
                recording, workload.namespace, workload.pod_labels, workload.pods
            )
            paths = preemption.paths(
                workload.label,
                workload.pod_spec,
                workload.pod_annotations,
                list(fits),
                budgets,
                cloud=cloud,
            )
        ladder: list[str] = []
        chosen = compute_classes.selected(workload.pod_spec)
        if chosen is not None and chosen in classes:
            ladder = compute_classes.describe(
                classes[chosen],
                {verdict.pool: verdict for verdict in verdicts},
                paths,
                {pool.name: pool for pool in pools},
                compute_classes.eviction_blockers(workload.pod_annotations, budgets),
            )
        elif chosen is not None:
            ladder = [f"ComputeClass {chosen} is not in the program: its priorities are unseen"]
        found.append(
            Outcome(
                workload,
                system,
                fits,
                verdicts,
                tuple(paths),
                tuple(preemption.flex_start_bounds(list(fits))),
                route,
                tuple(budgets),
                tuple(ladder),
            )
        )
    return found


def check(found: list[Outcome]) -> list[Violation]:
    violations = []
    for outcome in found:
        workload = outcome.workload
        targets = [None] if outcome.system else (workload.targets or [None])
        for target in targets:
            candidates = [
                v
                for pool, v in zip(outcome.fits, outcome.verdicts, strict=True)
                if target is None or pool.shape.labels.get(scheduling.POOL_CLASS_LABEL) == target
            ]
            if candidates and not any(v.scales for v in candidates):
                where = f"of class {target.value} " if target else ""
                reasons = "; ".join(v.reason() for v in candidates)
                violations.append(
                    Violation(
                        SCALE_UP_POLICY,
                        workload.resource,
                        f"{workload.label} fits pools {where}but none would get a node for "
                        f"it: {reasons}",
                        workload.first_key_path("priorityClassName", "nodeSelector", "affinity"),
                    )
                )
        violations += _gang_capacity(outcome, targets)
        violations += memory_tiers.check(workload)
        if outcome.route and outcome.route.problems:
            violations.append(
                Violation(
                    admission.POLICY,
                    workload.resource,
                    f"{workload.label} is submitted to {outcome.route.describe()}, which would "
                    f"never admit it: {'; '.join(outcome.route.problems)}",
                    workload.object_key_path("metadata.labels"),
                )
            )
        for path in outcome.paths:
            violations += [
                Violation(
                    preemption.POLICY,
                    workload.resource,
                    f"{workload.label} {problem}",
                    workload.key_path("terminationGracePeriodSeconds"),
                )
                for problem in path.problems
            ]
    return violations


def _gang_capacity(outcome: Outcome, targets: list[PoolClass | None]) -> list[Violation]:
    """A gang may spread over every class it accepts (its target and fallbacks), so what
    counts is the room of all their pools together."""
    workload = outcome.workload
    if workload.kind not in GANG_KINDS or workload.pods < 2:
        return []
    gpus = fit.gpu_request(workload.pod_spec)
    pools = [
        pool
        for pool, verdict in zip(outcome.fits, outcome.verdicts, strict=True)
        if verdict.scales
        and (None in targets or pool.shape.labels.get(scheduling.POOL_CLASS_LABEL) in targets)
    ]
    room = [scale_up.pods_at_once(pool, gpus) for pool in pools]
    if not pools or any(r is None for r in room):
        return []
    total = sum(r for r in room if r is not None)
    if total >= workload.pods:
        return []
    held = ", ".join(f"{p.name}: {r}" for p, r in zip(pools, room, strict=True))
    return [
        Violation(
            GANG_CAPACITY_POLICY,
            workload.resource,
            f"{workload.label} needs {workload.pods} pods of {gpus} GPU(s) at once, but the "
            f"pools it gets nodes from hold at most {total} ({held}); fix: run at most "
            f"{total} pods, or raise those pools' maximum nodes or GPU limits",
            workload.key_path("containers"),
        )
    ]
