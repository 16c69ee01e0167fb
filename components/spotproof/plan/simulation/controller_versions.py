"""Every object of a pinned controller, checked against the release the stack installs.

The plan validates JobSet, Kueue, KEDA and Karpenter objects against their latest
releases' fields (``plan.schemas.jobset``, ``plan.schemas.kueue``, ``plan.schemas.keda``,
``plan.schemas.karpenter``); this adds what differs between releases (``catalog.versions``): a
field or value an older release's CRD does not know is pruned by the API server, or the
object refused under strict field validation, so an object that passes against the newest
schema may mean something else, or nothing, on the release a stack pins. The releases are
the stack's (``spotproof:jobset.version``, ``kueue.version``, ``keda.version``) and
those of the controllers its cloud runs (``CloudPlan.releases``: EKS's Karpenter at
``karpenter.version``; for AKS node auto-provisioning, the one AKS runs,
``catalog.aks.NAP_KARPENTER_VERSION``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spotproof.catalog import jobset, keda, kueue
from spotproof.catalog.versions import older
from spotproof.fleet import FleetSpec
from spotproof.plan.cloud import plan_of
from spotproof.plan.model import Release
from spotproof.plan.recording.recorder import Recording
from spotproof.policy import Violation
from spotproof.scheduling import pod_templates

POLICY = "controller-version"


def releases(spec: FleetSpec) -> list[Release]:
    found = []
    if spec.jobset is not None:
        found.append(
            Release("JobSet", spec.jobset.version, ("jobset.x-k8s.io",), jobset.INTRODUCED)
        )
    if spec.kueue is not None:
        found.append(Release("Kueue", spec.kueue.version, ("kueue.x-k8s.io",), kueue.INTRODUCED))
    if spec.keda is not None:
        found.append(Release("KEDA", spec.keda.version, ("keda.sh",), keda.INTRODUCED))
    return [*found, *plan_of(spec.cloud).releases(spec.platform)]


def values_at(obj: Any, path: str) -> Iterator[Any]:
    """Every value at ``path`` in ``obj`` (``[]`` steps into each item of a list)."""
    found = [obj]
    for step in path.split("."):
        name, each = step.removesuffix("[]"), step.endswith("[]")
        found = [item[name] for item in found if isinstance(item, dict) and name in item]
        if each:
            found = [element for item in found if isinstance(item, list) for element in item]
    yield from found


def check(spec: FleetSpec, recording: Recording) -> list[Violation]:
    violations = []
    for release in releases(spec):
        for resource in recording.kubernetes_objects():
            obj = resource.inputs
            if str(obj.get("apiVersion", "")).split("/")[0] not in release.groups:
                continue
            metadata = obj.get("metadata") or {}
            where = "/".join(str(p) for p in (metadata.get("namespace"), metadata.get("name")) if p)
            for field in release.introduced:
                if field.kind != obj.get("kind") or not older(release.version, field.since):
                    continue
                found = list(values_at(obj, field.path))
                if field.value is not None:
                    found = [v for v in found if v == field.value]
                if not found:
                    continue
                what = f"{field.path} {field.value}" if field.value else field.path
                violations.append(
                    Violation(
                        POLICY,
                        resource.name,
                        f"{obj.get('kind')} {where}: {what} is accepted by {release.controller} "
                        f"from {field.since} on, and the stack installs {release.version}, "
                        "whose CRD prunes it (or refuses the object under strict field "
                        f"validation); allowed: {release.controller} {field.since} or later, "
                        "or leave it out",
                        # Where check has put it: a workload's (first) pod spec.
                        pod_templates.pod_spec_path(obj)
                        if pod_templates.is_workload(obj)
                        else None,
                    )
                )
    return violations
