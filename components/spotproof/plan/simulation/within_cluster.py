"""The checks whose answers depend on the cluster a workload runs in, asked within one.

A pod lands only on its own cluster's nodes; only its cluster's autoscaler adds one for
it; its add-ons must fit that cluster's system pool; a reclaim there is that cluster's
pools' path. So where a program declares several clusters (``plan.recording.clusters``)
these run once per cluster, over that cluster's part of the recording and its pools alone,
and ``spotproof.plan`` joins what they find with the checks over the whole program
(schemas, resource rules, unique names, bucket lifecycles).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import Cloud
from spotproof.fleet.advice import SpecWarning
from spotproof.fleet.reclaims import ReclaimModel
from spotproof.fleet.workloads import SmokeTest
from spotproof.plan.model import Pool
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation import (
    compute_classes,
    gpu_advertising,
    intervals,
    nodes,
    outcomes,
    pitfalls,
    preemption,
    reclaims,
    termination,
    workloads,
)
from spotproof.plan.simulation.intervals import IntervalAdvice
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.policy import Violation


@dataclass(frozen=True)
class Reclaims:
    """What the interval advice assumes of reclaims, as the stack states it."""

    cloud: Cloud
    model: ReclaimModel
    key: str
    """Where the stack states the model, for the advice's lines."""
    smoke: SmokeTest | None = None


@dataclass
class Judged:
    """What the checks within one cluster found."""

    recording: Recording
    """The cluster's part of the program's (the whole of it for one cluster)."""
    pools: list[Pool]
    outcomes: list[Outcome]
    unadvertised: list[Violation]
    """Pools whose GPUs nothing advertises (``gpu_advertising``)."""
    violations: list[Violation]
    """Scheduling, compute classes, scale-up and the outcomes' checks, pitfalls,
    termination, reclaims: in that order."""
    warnings: list[SpecWarning]
    intervals: list[IntervalAdvice]


def judge(
    recording: Recording,
    existing: list[Pool],
    stated: Reclaims,
    *,
    gpus_advertised: bool = False,
) -> Judged:
    """Every check within the cluster of ``recording``, over its pools and ``existing``
    (the system pool a stack describes of a cluster the program did not create)."""
    pools = sorted([*nodes.pools(recording), *existing], key=lambda pool: pool.name)
    unadvertised: list[Violation] = []
    if not gpus_advertised:
        pools, unadvertised = gpu_advertising.advertised(recording, pools)
    found = outcomes.outcomes(recording, pools)
    violations = workloads.check(recording, [pool.shape for pool in pools])
    violations += compute_classes.check(recording, pools)
    violations += outcomes.check(found)
    violations += pitfalls.check(recording, found, pools)
    violations += termination.check(recording, found)
    violations += reclaims.check(recording, found)
    advised = intervals.advise(
        found, stated.cloud, stated.model, model_key=stated.key, smoke=stated.smoke
    )
    return Judged(
        recording, pools, found, unadvertised, violations, unannounced_paths(found), advised
    )


def unannounced_paths(found: list[Outcome]) -> list[SpecWarning]:
    """A warning per workload on capacity whose reclaims never reach its pods in time."""
    return [
        SpecWarning(
            preemption.POOL_KEYS.get(path.capacity, "spotproof:cloud"),
            f"{outcome.workload.label} on {path.capacity}: {path.unannounced}"
            + _loss_bound(outcome.workload.pod_spec),
        )
        for outcome in found
        for path in outcome.paths
        if path.unannounced
    ]


def _loss_bound(pod_spec: Mapping[str, Any]) -> str:
    for container in pod_spec.get("containers") or []:
        for variable in container.get("env") or []:
            if variable.get("name") == "CHECKPOINT_INTERVAL":
                return f", losing at most CHECKPOINT_INTERVAL={variable.get('value')} steps"
    return ", losing what it trained since"
