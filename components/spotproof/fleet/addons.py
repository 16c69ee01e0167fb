"""The controllers a fleet installs on its system pool beside the platform's own: JobSet,
Kueue and KEDA, each pinned to a published release, and when each is installed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import jobset, keda, kueue
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import read_object, setting
from spotproof.fleet.readers import boolean, published
from spotproof.fleet.workloads import BatchSpec


@dataclass(frozen=True)
class JobSetSpec:
    """The JobSet controller, which runs a multi-node ``TrainingJob`` as one gang
    (``spotproof.kube.jobset``); installed on the system pool like the other add-ons."""

    enabled: bool = setting("enabled", boolean, True)
    """Off for a cluster that has JobSet already, or runs no multi-node training."""
    version: str = setting(
        "version", published(jobset.VERSIONS, "JobSet", jobset.REFUSED), jobset.VERSIONS[-1]
    )
    """Helm chart version, pinned; one of ``catalog.jobset.VERSIONS``."""


@dataclass(frozen=True)
class KueueSpec:
    """Kueue, which admits work aimed at a queued flex-start pool through a
    ProvisioningRequest (``spotproof.kube.provisioning_queue``); installed on the system
    pool, and only
    on a stack with such a pool."""

    enabled: bool = setting("enabled", boolean, True)
    """Default: on where the stack has a queued pool. Off leaves that pool without a way to
    get nodes from spotproof's components (the plan says so for each workload aimed at it)."""
    version: str = setting(
        "version", published(kueue.VERSIONS, "Kueue", kueue.REFUSED), kueue.VERSIONS[-1]
    )
    """Helm chart version, pinned; one of ``catalog.kueue.VERSIONS``."""


@dataclass(frozen=True)
class KedaSpec:
    """KEDA, which scales the batch workers on their queue's depth; installed on the system
    pool, and only on a stack with ``spotproof:batch``."""

    enabled: bool = setting("enabled", boolean, True)
    """Default: on where the stack has batch workers. Off runs ``minWorkers`` workers, no
    more and no fewer (so ``minWorkers`` must then be 1 or more)."""
    version: str = setting("version", published(keda.VERSIONS, "KEDA"), keda.VERSIONS[-1])
    """Helm chart version, pinned; one of ``catalog.keda.VERSIONS``."""


def read_jobset(key: str, raw: Any) -> JobSetSpec | None:
    spec = read_object(JobSetSpec, key, raw)
    return spec if spec.enabled else None


def read_kueue(queued: list[str]) -> Callable[[str, Any], KueueSpec | None]:
    """Kueue is for queued pools: on by default where there is one, refused where none."""

    def parse(key: str, raw: Any) -> KueueSpec | None:
        spec = read_object(KueueSpec, key, raw)
        explicit = isinstance(raw, Mapping) and "enabled" in raw
        if spec.enabled and explicit and not queued:
            raise SpecError(
                f"{key}.enabled",
                True,
                "Kueue is installed for a queued flex-start pool and this stack has none",
                "false, or a pool with queuedProvisioning: true",
            )
        return spec if spec.enabled and queued else None

    return parse


def read_keda(batch: BatchSpec | None) -> Callable[[str, Any], KedaSpec | None]:
    """KEDA is for batch workers: on by default where there are some, refused where none;
    off only with workers that need no scaler (``minWorkers`` 1 or more)."""

    def parse(key: str, raw: Any) -> KedaSpec | None:
        spec = read_object(KedaSpec, key, raw)
        explicit = isinstance(raw, Mapping) and "enabled" in raw
        if spec.enabled and explicit and batch is None:
            raise SpecError(
                f"{key}.enabled",
                True,
                "KEDA is installed to scale batch workers and this stack declares none",
                "false, or a spotproof:batch section",
            )
        if not spec.enabled and batch is not None and batch.min_workers == 0:
            raise SpecError(
                f"{key}.enabled",
                False,
                "without KEDA nothing would start a worker (spotproof:batch.minWorkers is 0)",
                "true, or spotproof:batch.minWorkers of 1 or more",
            )
        return spec if spec.enabled and batch is not None else None

    return parse
