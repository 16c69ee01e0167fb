"""GKE's ComputeClass checked as its API server would: the fields, enums and ranges of the
CRD, and the validation rules that matter for a class of spot rungs.

kubernetes-validate has no GKE CRDs, and the npm models of it are older than the API (no
``flexStart``, ``whenUnsatisfiable`` required). The fields and rules here are those of
GoogleCloudPlatform/compute-class-api ``api/cloud.google.com/v1/types.go`` at 8067eae
(2026-08-21): its kubebuilder markers and the ``XValidation`` rules on ``ComputeClassSpec``
and ``Priority``, each restated below with what it refuses. Fields spotproof never writes
are accepted by name and not looked into.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.catalog import gke_spot
from spotproof.plan.schemas.jobset import unknown_fields

KIND = "ComputeClass"
SPEC_FIELDS = frozenset(
    {
        "priorities",
        "nodePoolAutoCreation",
        "activeMigration",
        "whenUnsatisfiable",
        "autoscalingPolicy",
        "autopilot",
        "nodePoolConfig",
        "nodePoolGroup",
        "priorityDefaults",
        "description",
        "minimumCapacity",
        "allocationStrategyDefaults",
    }
)
PRIORITY_FIELDS = frozenset(
    {
        "machineFamily",
        "spot",
        "minCores",
        "minMemoryGb",
        "nodepools",
        "storage",
        "machineType",
        "gpu",
        "tpu",
        "reservations",
        "maxRunDurationSeconds",
        "maxPodsPerNode",
        "nodeSystemConfig",
        "flexStart",
        "podFamily",
        "location",
        "placement",
        "capacityCheckWaitTimeSeconds",
        "minCpuPlatform",
        "nodeLabels",
        "taints",
        "priorityScore",
        "acceleratorNetworkProfile",
        "gpuDirect",
        "allocationStrategy",
        "minimumCapacity",
        "instanceMetadata",
        "enableNestedVirtualization",
    }
)
NODEPOOLS_COMPANIONS = frozenset({"nodepools", "allocationStrategy", "priorityScore"})
"""A ``nodepools`` rule takes only these ("Nodepool field cannot be set along with other
nodepool configuration fields")."""
WHEN_UNSATISFIABLE = ("ScaleUpAnyway", "DoNotScaleUp")
MAX_PRIORITIES = 1000
GPU_DRIVER_VERSIONS = ("default", "latest", "autoinstall-disabled")


def is_compute_class(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == KIND and str(obj.get("apiVersion", "")).startswith(
        "cloud.google.com/"
    )


def errors(obj: Mapping[str, Any]) -> list[str]:
    """Every reason the API server would refuse ``obj``, each ``path: message``."""
    return list(_errors(obj))


def _errors(obj: Mapping[str, Any]) -> Iterator[str]:
    if obj.get("apiVersion") != gke_spot.COMPUTE_CLASS_API_VERSION:
        yield (
            f"apiVersion: {obj.get('apiVersion')!r} not served "
            f"(use {gke_spot.COMPUTE_CLASS_API_VERSION})"
        )
        return
    spec = obj.get("spec") or {}
    yield from unknown_fields("spec", spec, SPEC_FIELDS)
    when = spec.get("whenUnsatisfiable", "DoNotScaleUp")
    if when not in WHEN_UNSATISFIABLE:
        allowed = ", ".join(WHEN_UNSATISFIABLE)
        yield f"spec.whenUnsatisfiable: {when!r} not allowed (allowed: {allowed})"
    migration = spec.get("activeMigration")
    if migration is not None:
        yield from unknown_fields(
            "spec.activeMigration",
            migration,
            frozenset({"optimizeRulePriority", "ensureAllDaemonSetPodsRunning"}),
        )
        if not isinstance(migration.get("optimizeRulePriority"), bool):
            yield "spec.activeMigration.optimizeRulePriority: required, true or false"
    creation = spec.get("nodePoolAutoCreation")
    if creation is not None and not isinstance(creation.get("enabled"), bool):
        yield "spec.nodePoolAutoCreation.enabled: required, true or false"
    priorities = spec.get("priorities") or []
    if len(priorities) > MAX_PRIORITIES:
        yield f"spec.priorities: {len(priorities)} rules; allowed at most {MAX_PRIORITIES}"
    scored = [("priorityScore" in p) for p in priorities if isinstance(p, Mapping)]
    if any(scored) and not all(scored):
        yield "spec.priorities: priorityScore must be set for all priorities or for none"
    for index, priority in enumerate(priorities):
        yield from _priority(f"spec.priorities[{index}]", priority)
    yield from _defaults_shutdown(spec, priorities)


def _priority(path: str, rule: Any) -> Iterator[str]:
    yield from unknown_fields(path, rule, PRIORITY_FIELDS)
    if not isinstance(rule, Mapping):
        return
    if not rule:
        yield f"{path}: a rule needs at least one field"
    if "nodepools" in rule:
        extra = sorted(set(rule) - NODEPOOLS_COMPANIONS)
        if extra:
            yield f"{path}: nodepools cannot be set along with {', '.join(extra)}"
        names = rule["nodepools"]
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            yield f"{path}.nodepools: expected a list of node pool names"
    if "machineFamily" in rule and "machineType" in rule:
        yield f"{path}: machineFamily and machineType cannot be set together"
    if "machineType" in rule and ("minCores" in rule or "minMemoryGb" in rule):
        yield f"{path}: machineType cannot be set together with minCores or minMemoryGb"
    spot = rule.get("spot") is True
    if spot and (rule.get("flexStart") or {}).get("enabled") is True:
        yield f"{path}: flex-start cannot be combined with spot"
    kubelet = (rule.get("nodeSystemConfig") or {}).get("kubeletConfig") or {}
    if "shutdownGracePeriodSeconds" in kubelet and not spot:
        yield f"{path}.nodeSystemConfig.kubeletConfig.shutdownGracePeriodSeconds: spot rules only"
    yield from _shutdown(f"{path}.nodeSystemConfig.kubeletConfig", kubelet)
    driver = (rule.get("gpu") or {}).get("driverVersion")
    if driver is not None and driver not in GPU_DRIVER_VERSIONS:
        yield (
            f"{path}.gpu.driverVersion: {driver!r} not allowed "
            f"(allowed: {', '.join(GPU_DRIVER_VERSIONS)})"
        )
    pods = rule.get("maxPodsPerNode")
    if pods is not None and not (isinstance(pods, int) and 8 <= pods <= 256):
        yield f"{path}.maxPodsPerNode: {pods!r} out of range (allowed: 8 to 256)"


def _shutdown(path: str, kubelet: Mapping[str, Any]) -> Iterator[str]:
    """The kubelet's shutdown fields: a period of 0, 30 or 120, and a critical pods' share
    only with it and no more than it (the ``KubeletConfig`` markers and rule)."""
    seconds = kubelet.get("shutdownGracePeriodSeconds")
    critical = kubelet.get("shutdownGracePeriodCriticalPodsSeconds")
    if seconds is not None and seconds not in (0, *gke_spot.SPOT_SHUTDOWN_SECONDS):
        yield f"{path}.shutdownGracePeriodSeconds: {seconds!r} not allowed (allowed: 0, 30, 120)"
    if critical is not None and (seconds is None or not 0 <= critical <= seconds):
        yield (
            f"{path}.shutdownGracePeriodCriticalPodsSeconds: needs shutdownGracePeriodSeconds "
            "and may not exceed it"
        )


def _defaults_shutdown(spec: Mapping[str, Any], priorities: list[Any]) -> Iterator[str]:
    """A shutdown period in ``priorityDefaults`` needs every rule to be spot."""
    kubelet = ((spec.get("priorityDefaults") or {}).get("nodeSystemConfig") or {}).get(
        "kubeletConfig"
    ) or {}
    yield from _shutdown("spec.priorityDefaults.nodeSystemConfig.kubeletConfig", kubelet)
    if "shutdownGracePeriodSeconds" in kubelet and not all(
        isinstance(p, Mapping) and p.get("spot") is True for p in priorities
    ):
        yield (
            "spec.priorityDefaults.nodeSystemConfig.kubeletConfig.shutdownGracePeriodSeconds: "
            "only when every priority is spot"
        )
