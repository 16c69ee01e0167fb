"""Kueue's objects checked as its API server would: fields, required values, enums, and
the rule that a flavor lists its group's resources in the same order.

kubernetes-validate has no Kueue schema; the fields are those of ``apis/kueue/v1beta2``
(``resourceflavor_types.go``, ``clusterqueue_types.go``, ``localqueue_types.go``,
``admissioncheck_types.go``, ``provisioningrequestconfig_types.go``) in
kubernetes-sigs/kueue v0.19.2 (``catalog.kueue``). Objects of the deprecated v1beta1 are
refused: v1beta2 names admission checks differently, and the plan reads v1beta2.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.catalog import kueue
from spotproof.plan.schemas.jobset import unknown_fields

SPEC_FIELDS = {
    "ResourceFlavor": frozenset({"nodeLabels", "nodeTaints", "tolerations", "topologyName"}),
    "ClusterQueue": frozenset(
        {
            "resourceGroups",
            "cohortName",
            "queueingStrategy",
            "namespaceSelector",
            "flavorFungibility",
            "preemption",
            "admissionChecksStrategy",
            "stopPolicy",
            "fairSharing",
            "admissionScope",
            "concurrentAdmissionPolicy",
        }
    ),
    "LocalQueue": frozenset({"clusterQueue", "stopPolicy", "fairSharing"}),
    "AdmissionCheck": frozenset({"controllerName", "parameters"}),
    "ProvisioningRequestConfig": frozenset(
        {
            "provisioningClassName",
            "parameters",
            "managedResources",
            "retryStrategy",
            "podSetUpdates",
            "podSetMergePolicy",
        }
    ),
}
REQUIRED = {
    "LocalQueue": ("clusterQueue",),
    "AdmissionCheck": ("controllerName",),
    "ProvisioningRequestConfig": ("provisioningClassName",),
}
RESOURCE_GROUP_FIELDS = frozenset({"coveredResources", "flavors"})
FLAVOR_QUOTA_FIELDS = frozenset({"name", "resources"})
RESOURCE_QUOTA_FIELDS = frozenset({"name", "nominalQuota", "borrowingLimit", "lendingLimit"})
CHECK_RULE_FIELDS = frozenset({"name", "onFlavors"})
PARAMETERS_FIELDS = frozenset({"apiGroup", "kind", "name"})
QUEUEING_STRATEGIES = frozenset({"StrictFIFO", "BestEffortFIFO"})
MAX_RESOURCE_GROUPS = 16
MAX_PER_GROUP = 64
"""Covered resources, flavors, and resources per flavor in one group."""


def is_kueue(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).split("/")[0] == kueue.API_VERSION.split("/")[0]


def errors(obj: Mapping[str, Any]) -> list[str]:
    """Every reason the API server would refuse ``obj``, each ``path: message``."""
    return list(_errors(obj))


def _errors(obj: Mapping[str, Any]) -> Iterator[str]:
    kind = str(obj.get("kind"))
    if obj.get("apiVersion") != kueue.API_VERSION:
        yield f"apiVersion: {obj.get('apiVersion')!r} not checked (use {kueue.API_VERSION})"
        return
    if kind not in SPEC_FIELDS:
        yield f"kind: {kind!r} not checked (known: {', '.join(sorted(SPEC_FIELDS))})"
        return
    spec = obj.get("spec") or {}
    yield from unknown_fields("spec", spec, SPEC_FIELDS[kind])
    for field in REQUIRED.get(kind, ()):
        if not spec.get(field):
            yield f"spec.{field}: required"
    if kind == "ClusterQueue":
        yield from _cluster_queue(spec)
    elif kind == "AdmissionCheck" and spec.get("parameters") is not None:
        yield from unknown_fields("spec.parameters", spec["parameters"], PARAMETERS_FIELDS)


def _cluster_queue(spec: Mapping[str, Any]) -> Iterator[str]:
    strategy = spec.get("queueingStrategy", "BestEffortFIFO")
    if strategy not in QUEUEING_STRATEGIES:
        yield (
            f"spec.queueingStrategy: {strategy!r} not allowed "
            f"(allowed: {', '.join(sorted(QUEUEING_STRATEGIES))})"
        )
    groups = spec.get("resourceGroups") or []
    if len(groups) > MAX_RESOURCE_GROUPS:
        yield f"spec.resourceGroups: {len(groups)} groups; allowed at most {MAX_RESOURCE_GROUPS}"
    for index, group in enumerate(groups):
        yield from _resource_group(f"spec.resourceGroups[{index}]", group)
    checks = spec.get("admissionChecksStrategy")
    if checks is not None:
        yield from unknown_fields(
            "spec.admissionChecksStrategy", checks, frozenset({"admissionChecks"})
        )
        for index, rule in enumerate(checks.get("admissionChecks") or []):
            path = f"spec.admissionChecksStrategy.admissionChecks[{index}]"
            yield from unknown_fields(path, rule, CHECK_RULE_FIELDS)
            if not rule.get("name"):
                yield f"{path}.name: required"


def _resource_group(path: str, group: Mapping[str, Any]) -> Iterator[str]:
    yield from unknown_fields(path, group, RESOURCE_GROUP_FIELDS)
    covered = [str(r) for r in group.get("coveredResources") or []]
    flavors = group.get("flavors") or []
    for field, items in (("coveredResources", covered), ("flavors", flavors)):
        if not 1 <= len(items) <= MAX_PER_GROUP:
            yield f"{path}.{field}: {len(items)} entries; allowed 1 to {MAX_PER_GROUP}"
    for index, flavor in enumerate(flavors):
        where = f"{path}.flavors[{index}]"
        yield from unknown_fields(where, flavor, FLAVOR_QUOTA_FIELDS)
        if not flavor.get("name"):
            yield f"{where}.name: required"
        resources = flavor.get("resources") or []
        for position, quota in enumerate(resources):
            yield from unknown_fields(
                f"{where}.resources[{position}]", quota, RESOURCE_QUOTA_FIELDS
            )
        names = [str(r.get("name")) for r in resources]
        if names != covered:
            yield (
                f"{where}.resources: lists {names}, but a flavor must list its group's "
                f"coveredResources in the same order ({covered})"
            )
