"""What a training workload tells the plan about itself: how much state it checkpoints,
how long a step takes, how often it saves.

The checkpoint interval that maximises goodput depends on the state's size (what a save
holds training up, how long it takes to commit, whether a final save fits the grace
period) and, to be said in steps, on the step time. Neither is in a pod spec, so a
workload states them as pod-template annotations, which the plan reads from the rendered
objects whoever wrote them (a ``TrainingJob``, the smoke Job, a manifest by hand); the
interval itself is the trainer's own ``CHECKPOINT_INTERVAL``, read from the container's
environment as the trainer reads it (``runtime.settings``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from spotproof.runtime import settings
from spotproof.runtime.checkpointer.tiers import MEMORY_KEEP

TIER_COPIES = 2 * (MEMORY_KEEP + 1)
"""Copies of a pod's state its memory tier holds at most: ``MEMORY_KEEP`` of its own saves
and as many replicas of its peer's, each plus the step being committed, since retention
deletes the oldest only after the newest commits (``runtime.checkpointer.checkpoint``)."""
STATE_MIB = "spotproof.dev/state-mib"
"""Pod annotation: MiB of checkpointed state per pod (model, optimizer, data position)."""
STEP_SECONDS = "spotproof.dev/step-seconds"
"""Pod annotation: seconds per training step."""
_NUMBER = re.compile(r"[0-9]{1,15}(\.[0-9]{1,15})?([eE][-+]?[0-9]{1,3})?")


def annotations(
    state_mib: float | None, step_seconds: float | None, owner: str = "the workload"
) -> dict[str, str]:
    """The annotations that state ``state_mib`` and ``step_seconds`` (each left out when
    None); ``ValueError`` naming ``owner`` for a value that is not above zero."""
    found = {}
    for annotation, name, value in (
        (STATE_MIB, "state_mib", state_mib),
        (STEP_SECONDS, "step_seconds", step_seconds),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{owner}: {name} = {value!r}; allowed: a number above 0, or None")
        if not math.isfinite(value):
            raise ValueError(f"{owner}: {name} = {value!r}; allowed: a finite number above 0")
        found[annotation] = f"{value:g}"
    return found


class Profiled(Protocol):
    """What states a run's profile: a ``kube.pods.Trainer``."""

    @property
    def state_mib(self) -> float | None: ...
    @property
    def step_seconds(self) -> float | None: ...


def annotations_of(trainer: Profiled, owner: str = "Trainer") -> dict[str, str]:
    """:func:`annotations` of what ``trainer`` states."""
    return annotations(trainer.state_mib, trainer.step_seconds, owner)


def _positive(raw: Any) -> float | None:
    if not isinstance(raw, str) or not _NUMBER.fullmatch(raw.strip()):
        return None
    value = float(raw)
    return value if 0 < value < math.inf else None


def _steps(variable: settings.RequiredWhole, values: Mapping[str, Any]) -> int | None:
    """``variable`` as the trainer reads it; None where unset or refused."""
    raw = values.get(variable.name)
    if raw is None:
        return None
    try:
        return variable.read({variable.name: str(raw)})
    except settings.ConfigError:
        return None


@dataclass(frozen=True)
class RunProfile:
    """What one pod template says about its training run; each None when it does not say
    (or says something that is not a positive number)."""

    state_mib: float | None
    step_seconds: float | None
    interval_steps: int | None
    """``CHECKPOINT_INTERVAL`` as the trainer would read it."""
    total_steps: int | None = None
    """``TOTAL_STEPS``, where the trainer reads one (the smoke trainer): no interval longer
    than the run is of use, nor accepted beside it."""

    @classmethod
    def of(cls, pod_annotations: Mapping[str, Any], env: Iterable[Mapping[str, Any]]) -> RunProfile:
        """From a pod template's annotations and its training container's ``env`` list
        (a variable set through ``valueFrom`` has no value the plan can read)."""
        values = {str(v.get("name")): v.get("value") for v in env if "value" in v}
        return cls(
            _positive(pod_annotations.get(STATE_MIB)),
            _positive(pod_annotations.get(STEP_SECONDS)),
            _steps(settings.CHECKPOINT_INTERVAL, values),
            _steps(settings.TOTAL_STEPS, values),
        )

    @classmethod
    def of_pod(cls, pod_annotations: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> RunProfile:
        """From a pod template: the first container that sets ``CHECKPOINT_INTERVAL``
        (else the first container) is the trainer."""
        containers = pod_spec.get("containers") or [{}]
        named = settings.CHECKPOINT_INTERVAL.name
        trainer = next(
            (c for c in containers if any(v.get("name") == named for v in c.get("env") or [])),
            containers[0],
        )
        return cls.of(pod_annotations, trainer.get("env") or [])

    @property
    def trains(self) -> bool:
        """Whether the pod states a checkpoint interval or a state size: a training run."""
        return self.interval_steps is not None or self.state_mib is not None

    @property
    def interval_seconds(self) -> float | None:
        """The configured interval in seconds, where both it and the step time are known."""
        if self.interval_steps is None or self.step_seconds is None:
            return None
        return self.interval_steps * self.step_seconds
