"""Which capacity each kind of work belongs on: the decision matrix of running AI work on
spot and flex-start capacity.

- work that restarts cheaply from a checkpoint or is made of small independent pieces
  (hyperparameter sweeps, CI validation, fault-tolerant batch) goes on **spot**: up to
  90% off, reclaimed with seconds of notice;
- long work that a reclaim every few hours would keep from finishing (multi-day training,
  RL fine-tuning, large batch inference) goes on **flex-start**, GPUs that are not
  reclaimed for up to 7 days once obtained (GKE DWS,
  https://cloud.google.com/kubernetes-engine/docs/concepts/dws); where the cloud has no
  flex-start, on-demand GPUs give the same guarantee;
- work with an SLA (serving, low-latency APIs) goes on **on-demand**.

A workload names its kind with :data:`WORK_LABEL` on its pods (``TrainingJobArgs.work``),
and the plan shows the capacity the matrix advises next to what it targets.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from spotproof.fleet.pools import PoolClass

WORK_LABEL = "spotproof.dev/work"


class Work(StrEnum):
    SWEEP = "sweep"
    CI_VALIDATION = "ci-validation"
    FAULT_TOLERANT_BATCH = "fault-tolerant-batch"
    MULTI_DAY_TRAINING = "multi-day-training"
    RL_FINE_TUNING = "rl-fine-tuning"
    BATCH_INFERENCE = "batch-inference"
    SERVING = "serving"
    LOW_LATENCY_API = "low-latency-api"


_INTERRUPTIBLE = (PoolClass.SPOT_GPU,)
_LONG = (PoolClass.FLEX_START, PoolClass.ON_DEMAND_GPU)
_SLA = (PoolClass.ON_DEMAND_GPU,)

ADVISED: dict[Work, tuple[PoolClass, ...]] = {
    Work.SWEEP: _INTERRUPTIBLE,
    Work.CI_VALIDATION: _INTERRUPTIBLE,
    Work.FAULT_TOLERANT_BATCH: _INTERRUPTIBLE,
    Work.MULTI_DAY_TRAINING: _LONG,
    Work.RL_FINE_TUNING: _LONG,
    Work.BATCH_INFERENCE: _LONG,
    Work.SERVING: _SLA,
    Work.LOW_LATENCY_API: _SLA,
}
"""The classes each kind of work belongs on, the preferred one first."""


def choose(work: Work, offered: Iterable[PoolClass]) -> PoolClass:
    """The pool class ``work`` should target among those a cluster ``offered``;
    ``ValueError`` (one line) when it offers none the matrix advises."""
    available = set(offered)
    for pool_class in ADVISED[work]:
        if pool_class in available:
            return pool_class
    advised = " or ".join(c.value for c in ADVISED[work])
    raise ValueError(f"{work.value} belongs on {advised} capacity; the cluster has none")


def advice(work_label: str | None, target: PoolClass | None) -> str | None:
    """What the plan says of a workload labelled ``work_label`` that targets ``target``:
    None when it names no kind of work."""
    if work_label is None:
        return None
    if work_label not in Work._value2member_map_:
        return f"unknown work {work_label!r} (known: {', '.join(w.value for w in Work)})"
    advised = ADVISED[Work(work_label)]
    text = f"{work_label} belongs on {' or '.join(c.value for c in advised)}"
    if target is not None and target not in advised:
        return f"{text}, but it targets {target.value}"
    return text
