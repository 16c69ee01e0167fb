"""How often each training workload should checkpoint, and what reclaims then cost it: the
goodput model (``plan.simulation.goodput``) applied to what the plan knows.

A *training workload* is a Job or JobSet whose pod sets ``CHECKPOINT_INTERVAL`` or states
its state's size (``scheduling.run_profile``). For each, the plan knows:

- the capacity it is judged on: the worst of its spot preemption paths (the least grace the
  trainer can use, which torchrun's shutdown timeout may cut short; a path that never sends
  SIGTERM has no graceful reclaims at all); with flex-start pools
  only, a reclaim per node at its ``maxRunDuration``; on-demand only, no reclaims;
- the reclaim rate: ``spotproof:reclaimModel.reclaimsPerNodeHour``, else the rate the
  cloud publishes (``CloudProfile.reclaims``), times the pods of a gang, any of whose
  nodes restarts all of it;
- what a save costs, from the state per pod at spotproof's measured rates
  (``catalog``): training held up while the state is captured, the upload behind it, and a
  final save from SIGTERM to committed; whether that final save fits the path's grace
  decides whether reclaims lose nothing (all but the ``unannouncedShare``) or the work
  since the last checkpoint (all of them);
- what a restart costs: a new node (``CloudProfile.node_ready_seconds``), the image
  (``imagePullSeconds``), the restore.

It recommends the interval that maximises goodput, with the goodput there and at the
configured interval, the cost of a useful GPU-hour on spot and on demand, and the largest
state whose final save still commits within the grace; and it finds where the configured
interval is far from the recommendation (:func:`is_far`), which the plan warns of in
``plan.reporting.checkpointing``'s words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from spotproof import scheduling
from spotproof.catalog import (
    ASYNC_CAPTURE_MIB_PER_SECOND,
    FINAL_SAVE_MIB_PER_SECOND,
    RESTORE_MIB_PER_SECOND,
    Cloud,
    jobset,
    profile,
)
from spotproof.fleet.reclaims import ReclaimModel
from spotproof.fleet.workloads import SmokeTest
from spotproof.kube.smoke import JOB_NAME as SMOKE_JOB
from spotproof.plan.model import Workload
from spotproof.plan.simulation import goodput, recovery
from spotproof.plan.simulation.memory_tiers import replaces_reclaimed_pods_alone
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.plan.simulation.preemption import pod_grace
from spotproof.runtime import settings
from spotproof.scheduling import run_profile
from spotproof.scheduling.run_profile import RunProfile

TRAINING_KINDS = frozenset({"Job", jobset.KIND})
FAR = 2.0
"""A configured interval more than this factor from the recommendation, either way, is
far from it..."""
COSTLY = 0.005
"""...where it also costs at least this much goodput (half a percentage point): nearer, or
cheaper, the difference is within what the model's inputs can tell."""


@dataclass(frozen=True)
class Capacity:
    """What a workload's interval is judged on."""

    name: str
    """``GKE spot``, ``EKS spot (Karpenter)``, ``flex-start``, ``on-demand``."""
    spot: bool
    per_node_hour: float
    rate_source: str
    """Where the rate comes from, in words."""
    grace_seconds: float | None
    """SIGTERM to the trainer's end; None where SIGTERM never comes (or nothing is
    reclaimed)."""
    grace_limit: str = ""
    """What ends the grace before the pod's period does, in words; empty where nothing."""


@dataclass(frozen=True)
class Settings:
    """Where a workload's own numbers are set, for the advice to name."""

    key: str
    """What a warning is filed under: the stack's key, or the workload."""
    interval: str
    """How to set the interval: ``spotproof:smokeTest.checkpointInterval``, or the env."""
    step: str
    """How to state the step time."""
    state: str
    """How to state the state's size."""


@dataclass(frozen=True)
class IntervalAdvice:
    """The goodput model's verdict on one training workload; the numbers are None where
    what they need is unknown (``missing`` says what)."""

    workload: str
    capacity: str
    spot: bool
    pods: int
    settings: Settings
    state_mib: float | None
    step_seconds: float | None
    configured_steps: int | None
    missing: str = ""
    reclaims_per_node_hour: float = 0.0
    rate_source: str = ""
    unannounced_share: float = 0.0
    graceful_share: float = 0.0
    grace_seconds: float | None = None
    grace_limit: str = ""
    """What cuts the grace short of the pod's period (:attr:`Capacity.grace_limit`)."""
    largest_state_mib: float | None = None
    """The most state per pod whose final save commits within the grace."""
    costs: goodput.SaveCosts | None = None
    node_ready_seconds: float = 0.0
    image_pull_seconds: float = 0.0
    recommended_seconds: float | None = None
    whole_run: bool = False
    """The best interval is the whole run (``TOTAL_STEPS``): longer would be better still."""
    daly_seconds: float | None = None
    """Daly's closed form for the stall and the unannounced reclaims, beside the optimum."""
    goodput: float | None = None
    configured_seconds: float | None = None
    configured_goodput: float | None = None
    spot_cost: float | None = None
    """A useful GPU-hour on this capacity, in on-demand GPU-hours' price."""
    on_demand_cost: float | None = None
    """A useful GPU-hour on demand at the same interval, in the same unit."""
    on_demand_gpu_hour_usd: float | None = None

    recovery: tuple[recovery.Prediction, ...] = ()
    """A gang whose ranks are replaced one at a time: its paths and goodput at the
    recommended interval with 0 to ``recovery.MAX_SPARES`` warm spares
    (``plan.simulation.recovery``); empty for any other workload."""
    warm_spares: int = 0
    """Warm spares' placeholders the stack keeps where the gang's pods run (``kube.spares``:
    pods labelled ``scheduling.WARM_SPARE_LABEL`` with the gang's node selector and
    affinity)."""
    whole_gang_goodput: float | None = None
    """The same gang's goodput were every reclaim to restart it whole, priced the same way."""

    final_save_fits: bool = False
    """The final save of this state commits within the grace (what every reclaim that is
    not unannounced then loses: nothing)."""

    @property
    def recommended_steps(self) -> int | None:
        if self.recommended_seconds is None or self.step_seconds is None:
            return None
        return max(1, round(self.recommended_seconds / self.step_seconds))


def settings_of(workload: Workload, smoke: SmokeTest | None) -> Settings:
    """The stack's keys for the smoke Job; the pod's own env and annotations otherwise."""
    is_smoke = smoke is not None and (workload.kind, workload.namespace, workload.name) == (
        "Job",
        smoke.namespace,
        SMOKE_JOB,
    )
    if is_smoke:
        return Settings(
            "spotproof:smokeTest.checkpointInterval",
            "spotproof:smokeTest.checkpointInterval",
            "spotproof:smokeTest.stepMilliseconds",
            "spotproof:smokeTest.modelMb",
        )
    return Settings(
        workload.label,
        settings.CHECKPOINT_INTERVAL.name,
        f"the pod annotation {run_profile.STEP_SECONDS}",
        f"the pod annotation {run_profile.STATE_MIB} (MiB of checkpointed state per pod)",
    )


def capacity_of(
    outcome: Outcome, cloud: Cloud, model: ReclaimModel, model_key: str
) -> Capacity | None:
    """The capacity ``outcome``'s workload is judged on; None where it fits no pool."""
    if outcome.paths:
        worst = min(outcome.paths, key=lambda p: -1.0 if p.sigterm_at is None else p.usable_grace)
        rate = model.reclaims_per_node_hour
        published = profile(cloud).reclaims
        return Capacity(
            worst.capacity,
            True,
            published.per_node_hour if rate is None else rate,
            f"{cloud.value.upper()}'s published rate, read {published.read_on}"
            if rate is None
            else f"{model_key}.reclaimsPerNodeHour",
            None if worst.sigterm_at is None else worst.usable_grace,
            "" if worst.usable_grace == worst.grace_seconds else "torchrun's shutdown timeout",
        )
    lives = [
        p.scaling.max_run_seconds
        for p in outcome.fits
        if p.shape.flex_start and p.scaling.max_run_seconds
    ]
    if lives:
        hours = min(lives) / 3600
        return Capacity(
            "flex-start",
            False,
            1 / hours,
            f"a node at the end of its maxRunDuration, {hours:g} h",
            pod_grace(outcome.workload.pod_spec),
        )
    if outcome.fits:
        return Capacity("on-demand", False, 0.0, "on-demand capacity is not reclaimed", None)
    return None


def advise(
    found: list[Outcome],
    cloud: Cloud,
    model: ReclaimModel,
    *,
    model_key: str = "spotproof:reclaimModel",
    smoke: SmokeTest | None = None,
) -> list[IntervalAdvice]:
    """The advice for every training workload among ``found``, in their order."""
    advice = []
    for outcome in found:
        workload = outcome.workload
        run = RunProfile.of_pod(workload.pod_annotations, workload.pod_spec)
        if outcome.system or workload.kind not in TRAINING_KINDS or not run.trains:
            continue
        gang = replaced_alone(workload)
        if gang is None:  # the leader of a gang judged as a whole under its workers
            continue
        capacity = capacity_of(outcome, cloud, model, model_key)
        if capacity is None:  # fits no pool: the scheduling check says so
            continue
        if gang:
            workload = replace(workload, pods=gang)
        found_advice = _advice(
            workload, run, capacity, cloud=cloud, model=model, where=settings_of(workload, smoke)
        )
        if gang:
            found_advice = replace(found_advice, warm_spares=warm_spares(workload, found))
        advice.append(found_advice)
    return advice


def _advice(
    workload: Workload,
    run: RunProfile,
    capacity: Capacity,
    *,
    cloud: Cloud,
    model: ReclaimModel,
    where: Settings,
) -> IntervalAdvice:
    grace = capacity.grace_seconds
    known: dict[str, Any] = {
        "workload": workload.label,
        "capacity": capacity.name,
        "spot": capacity.spot,
        "pods": workload.pods,
        "settings": where,
        "state_mib": run.state_mib,
        "step_seconds": run.step_seconds,
        "configured_steps": run.interval_steps,
        "reclaims_per_node_hour": capacity.per_node_hour,
        "rate_source": capacity.rate_source,
        "unannounced_share": model.unannounced_share,
        "grace_seconds": grace,
        "grace_limit": capacity.grace_limit,
        "largest_state_mib": None if grace is None else grace * FINAL_SAVE_MIB_PER_SECOND,
        "node_ready_seconds": float(profile(cloud).node_ready_seconds),
        "image_pull_seconds": model.image_pull_seconds,
        "on_demand_gpu_hour_usd": model.on_demand_gpu_hour_usd,
    }
    if run.state_mib is None:
        return IntervalAdvice(**known, missing=f"no state size: set {where.state}")
    state = run.state_mib
    stall = state / ASYNC_CAPTURE_MIB_PER_SECOND
    final_save = state / FINAL_SAVE_MIB_PER_SECOND
    restart = known["node_ready_seconds"] + model.image_pull_seconds
    costs = goodput.SaveCosts(
        stall, stall + final_save, restart + state / RESTORE_MIB_PER_SECOND, final_save
    )
    fits = grace is not None and final_save <= grace
    graceful = 1 - model.unannounced_share if fits else 0.0
    reclaims = goodput.Reclaims(capacity.per_node_hour * workload.pods, graceful)
    best = goodput.best_interval(costs, reclaims)
    whole_run = run.total_steps * run.step_seconds if run.total_steps and run.step_seconds else None
    if whole_run is not None and best > whole_run:  # W is convex: the bound is the best left
        best = whole_run
    on_demand = goodput.goodput(best, costs, goodput.Reclaims(0.0, 0.0))
    kept = goodput.goodput(best, costs, reclaims)
    configured = run.interval_seconds
    unannounced = reclaims.unannounced_per_second
    gang = None
    if replaced_alone(workload):
        gang = recovery.Gang(
            workload.pods,
            state,
            costs,
            reclaims,
            known["node_ready_seconds"] + model.image_pull_seconds,
            _persist_every(workload),
        )
    return IntervalAdvice(
        **known,
        recovery=()
        if gang is None
        else tuple(
            recovery.predict(gang, best, spares, model.spot_price_ratio)
            for spares in range(recovery.MAX_SPARES + 1)
        ),
        whole_gang_goodput=None
        if gang is None
        else recovery.goodput(recovery.whole_gang_paths(gang, best), gang, best),
        final_save_fits=fits,
        graceful_share=graceful,
        costs=costs,
        recommended_seconds=best,
        whole_run=best == whole_run,
        daly_seconds=goodput.daly_interval(stall, 1 / unannounced) if unannounced else None,
        goodput=kept,
        configured_seconds=configured,
        configured_goodput=None
        if configured is None
        else goodput.goodput(configured, costs, reclaims),
        spot_cost=model.spot_price_ratio / kept if capacity.spot and kept > 0 else None,
        on_demand_cost=1 / on_demand,
    )


def is_far(advice: IntervalAdvice) -> bool:
    """Whether the configured interval is far from the recommendation, and costly."""
    configured, best = advice.configured_seconds, advice.recommended_seconds
    if configured is None or best is None or advice.goodput is None:
        return False
    ratio = configured / best
    lost = advice.goodput - (advice.configured_goodput or 0.0)
    return not 1 / FAR <= ratio <= FAR and lost >= COSTLY


def replaced_alone(workload: Workload) -> int | None:
    """For the part of a JobSet whose reclaimed pods are replaced alone (its workers), the
    pods of the whole gang; None for another part of such a JobSet (its leader, judged
    with the gang); 0 for every other workload."""
    if workload.kind != jobset.KIND or not replaces_reclaimed_pods_alone(workload.spec):
        return 0
    part = workload.name.rsplit("/", 1)[-1]
    total, mine = 0, False
    for replicated in workload.spec.get("replicatedJobs") or []:
        job = (replicated.get("template") or {}).get("spec") or {}
        total += int(replicated.get("replicas", 1)) * int(job.get("parallelism", 1))
        if replicated.get("name") == part:
            mine = replaces_reclaimed_pods_alone({"replicatedJobs": [replicated]})
    return total if mine else None


def _persist_every(workload: Workload) -> int:
    """The trainer's ``PERSIST_EVERY``, or the runtime's default."""
    for container in workload.pod_spec.get("containers") or []:
        for variable in container.get("env") or []:
            if variable.get("name") == settings.PERSIST_EVERY.name:
                value = str(variable.get("value", ""))
                if value.isdigit() and int(value) > 0:
                    return int(value)
    return int(settings.PERSIST_EVERY.default)


def warm_spares(gang: Workload, found: list[Outcome]) -> int:
    """The placeholders among ``found`` aimed where ``gang``'s pods run, in its cluster: a
    replaced rank of the gang may take their nodes."""
    aim = _aim(gang.pod_spec)
    return sum(
        o.workload.pods
        for o in found
        if o.workload.pod_labels.get(scheduling.WARM_SPARE_LABEL) == "true"
        and o.workload.cluster == gang.cluster
        and _aim(o.workload.pod_spec) == aim
    )


def _aim(pod_spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """Where a pod asks to run: its node selector and node affinity."""
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity")
    return pod_spec.get("nodeSelector") or {}, affinity
