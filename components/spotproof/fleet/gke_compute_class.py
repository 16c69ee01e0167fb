"""``spotproof:computeClasses``: GKE's own "spot when there is spot, something when there is
not", over the stack's pools.

A custom ComputeClass (``cloud.google.com/v1``, https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes)
lists node choices in priority order; the cluster autoscaler scales up the first it can
get capacity for, and with active migration moves workloads back up when a higher one
has capacity again. Each class here takes one target pool class's pools, one rung per
pool in stack order, then each fallback class's pools: its priorities name those pools
(``nodepools`` rules), so every rung is a pool the stack declares and the plan models
(sizes, zones, auto-provisioning limits, a spot pool's shutdown). GKE uses a pool it did
not create for a class only if the pool carries the class's label and NoSchedule taint
(the page above, "manually created node pools"), which makes the pool the class's alone:
a workload aimed at the target (or at a fallback class) then goes through the class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import Checked, ConfigObject, config_key, read_settings, setting
from spotproof.fleet.pools import GpuPoolSpec, PoolClass
from spotproof.fleet.readers import boolean, choice, items

FALLBACK_CLASSES = (PoolClass.ON_DEMAND_GPU, PoolClass.FLEX_START)
TARGET_CLASSES = (PoolClass.SPOT_GPU, PoolClass.FLEX_START)


def _pool_class(options: tuple[PoolClass, ...]) -> Any:
    def parse(key: str, raw: Any) -> PoolClass:
        return PoolClass(choice(tuple(c.value for c in options))(key, raw))

    return parse


def _fallback(key: str, raw: Any) -> tuple[PoolClass, ...]:
    if isinstance(raw, str):
        raw = [raw]
    found = tuple(_pool_class(FALLBACK_CLASSES)(k, v) for k, v in items(key, raw))
    if len(set(found)) != len(found):
        raise SpecError(key, raw, "names a class twice", "each class once, in the order tried")
    return found


@dataclass(frozen=True)
class ComputeClassSpec(Checked):
    """One ComputeClass: the target's pools first, then the fallbacks', each pool a rung."""

    target: PoolClass = setting("target", _pool_class(TARGET_CLASSES), PoolClass.SPOT_GPU)
    """The pool class whose workloads select the class (spot-gpu, or flex-start without
    queued provisioning); its pools are tried first, in stack order."""
    fallback: tuple[PoolClass, ...] = setting("fallback", _fallback, (PoolClass.ON_DEMAND_GPU,))
    """Classes tried next, in this order, each pool in stack order: on-demand-gpu and
    flex-start (a pool without queued provisioning); default on-demand-gpu."""
    active_migration: bool = setting("activeMigration", boolean, True)
    """Move workloads back to a higher rung once it has capacity again (GKE's
    ``activeMigration.optimizeRulePriority``), by replacing the lower rung's nodes.
    spotproof's trainers refuse eviction (``safe-to-evict: "false"`` and a disruption
    budget), which the autoscaler's own node removals honour; GKE does not say whether
    migration does, so a running trainer may be moved: it then resumes from its final
    checkpoint, as after a reclaim."""

    @property
    def name(self) -> str:
        """The class's name, which pods select: ``spotproof-<target>``."""
        return f"spotproof-{self.target.value}"

    @property
    def classes(self) -> tuple[PoolClass, ...]:
        """Every pool class of its rungs, in priority order."""
        return (self.target, *self.fallback)


def read_compute_classes(pools: tuple[GpuPoolSpec, ...]) -> Any:
    """The reader of ``spotproof:computeClasses`` against the stack's GPU ``pools``."""

    def parse(key: str, raw: Any) -> tuple[ComputeClassSpec, ...]:
        found: list[ComputeClassSpec] = []
        taken: dict[PoolClass, str] = {}
        for item_key, item in items(key, raw):
            obj = ConfigObject(item_key, item, fields_of=ComputeClassSpec)
            spec = ComputeClassSpec(**read_settings(ComputeClassSpec, obj))
            if spec.target in spec.fallback:
                raise SpecError(
                    obj.key_of("fallback"),
                    spec.target.value,
                    "is the target itself",
                    ", ".join(c.value for c in FALLBACK_CLASSES),
                )
            for pool_class in spec.classes:
                where = config_key(
                    ComputeClassSpec, "target" if pool_class is spec.target else "fallback"
                )
                check_class(obj.key_of(where), pool_class, pools)
                if pool_class in taken:
                    raise SpecError(
                        obj.key_of(where),
                        pool_class.value,
                        f"its pools already serve {taken[pool_class]}, and a pool serves one "
                        "compute class only (it carries that class's taint)",
                        "each pool class in one compute class",
                    )
                taken[pool_class] = spec.name
            obj.finish()
            found.append(spec)
        return tuple(found)

    return parse


def check_class(key: str, pool_class: PoolClass, pools: Sequence[GpuPoolSpec]) -> None:
    """Refuse a rung class with no pools, or with pools only queued provisioning fills."""
    own = [pool for pool in pools if pool.pool_class is pool_class]
    if not own:
        raise SpecError(
            key, pool_class.value, "no pool of that class in this stack", "a class with pools"
        )
    queued = [pool.name for pool in own if pool.queued]
    if queued:
        raise SpecError(
            key,
            pool_class.value,
            f"{', '.join(queued)} gets nodes only through queued provisioning, which a "
            "compute class does not request",
            "a class whose pools scale on pending pods",
        )


def class_of_pool(classes: tuple[ComputeClassSpec, ...]) -> Mapping[PoolClass, str]:
    """Which compute class each pool class's pools serve."""
    return {pool_class: spec.name for spec in classes for pool_class in spec.classes}
