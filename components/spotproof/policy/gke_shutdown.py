"""A GKE node pool's graceful shutdown, whoever declared the pool.

A spot pool's ``kubeletConfig.shutdownGracePeriodSeconds`` decides how long its pods have
once the VM is reclaimed (``catalog.gke_spot`` has the facts and their sources). GKE takes 0,
30 or 120 s, on Spot VMs only, with the critical pods' share no more than the whole,
and more than the default only from control plane 1.35.0-gke.1171000. A pool written by
hand that GKE would refuse fails ``pulumi up`` half-way; one with 0 turns the shutdown
off, and a reclaim then ends the trainer without SIGTERM. ``[gke-spot-shutdown]`` says so
before either happens; ``[gke-spot-shutdown-version]`` holds a longer period to the
cluster's version where the program declares the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.catalog import gke_spot
from spotproof.policy.base import PlannedResource, ResourceRule, StackRule
from spotproof.scheduling import gke as gke_shapes

NODE_POOL = gke_shapes.NODE_POOL
CLUSTER = "gcp:container/cluster:Cluster"
ALLOWED_PERIODS = (0, *gke_spot.SPOT_SHUTDOWN_SECONDS)
"""What the API takes for the whole period."""


def _kubelet(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    return (inputs.get("nodeConfig") or {}).get("kubeletConfig") or {}


def spot_shutdown(inputs: Mapping[str, Any]) -> Iterator[str]:
    kubelet = _kubelet(inputs)
    seconds = kubelet.get("shutdownGracePeriodSeconds")
    critical = kubelet.get("shutdownGracePeriodCriticalPodsSeconds")
    if seconds is None:
        if critical is not None:
            yield (
                "shutdownGracePeriodCriticalPodsSeconds is set without "
                "shutdownGracePeriodSeconds, which GKE requires with it"
            )
        return
    config = inputs.get("nodeConfig") or {}
    if not config.get("spot"):
        yield (
            f"shutdownGracePeriodSeconds {seconds} on a pool that is not spot: GKE takes it "
            "on Spot VMs only; allowed: leave it unset"
        )
    if seconds not in ALLOWED_PERIODS:
        yield (
            f"shutdownGracePeriodSeconds {seconds} is not a period GKE takes; allowed: "
            f"{', '.join(str(s) for s in gke_spot.SPOT_SHUTDOWN_SECONDS)}"
        )
    elif seconds == 0:
        yield (
            "shutdownGracePeriodSeconds 0 turns graceful shutdown off: a reclaim ends the "
            "trainer without SIGTERM, and its final checkpoint with it; allowed: "
            f"{', '.join(str(s) for s in gke_spot.SPOT_SHUTDOWN_SECONDS)}"
        )
    elif critical is not None and not 0 <= critical <= seconds:
        yield (
            f"shutdownGracePeriodCriticalPodsSeconds {critical} is not within the whole "
            f"period of {seconds} s; allowed: 0 to {seconds}"
        )


def _version(text: str) -> tuple[int, ...]:
    """``1.35.0-gke.1171000`` as (1, 35, 0, 1171000); a bare minor as (1, 35)."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", text))


def long_shutdown_version(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    longer = [
        r.name
        for r in resources
        if r.type == NODE_POOL
        and (_kubelet(r.inputs).get("shutdownGracePeriodSeconds") or 0)
        > gke_spot.DEFAULT_SPOT_SHUTDOWN_SECONDS
    ]
    least = _version(gke_spot.LONG_SHUTDOWN_MIN_VERSION)
    for cluster in (r for r in resources if r.type == CLUSTER and longer):
        version = str(cluster.inputs.get("minMasterVersion") or "")
        minor_ok = _version(version)[:2] > least[:2]
        if not version or not (minor_ok or _version(version) >= least):
            yield (
                cluster.name,
                f"minMasterVersion {version or 'unset'} may be older than "
                f"{gke_spot.LONG_SHUTDOWN_MIN_VERSION}, the first control plane that takes "
                f"the longer spot shutdown of {', '.join(longer)}; allowed: "
                f"{gke_spot.LONG_SHUTDOWN_MIN_VERSION} or a later minor",
            )


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "gke-spot-shutdown",
        "Spot pools shut down gracefully, as GKE allows.",
        NODE_POOL,
        spot_shutdown,
    ),
)
STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "gke-spot-shutdown-version",
        "A longer spot shutdown has a control plane that takes it.",
        long_shutdown_version,
    ),
)
