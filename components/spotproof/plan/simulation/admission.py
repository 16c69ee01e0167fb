"""Will Kueue admit a workload, and who provisions its nodes? The route of a queued workload.

Kueue manages a Job or JobSet that carries ``kueue.x-k8s.io/queue-name``: its webhook
suspends it at creation and only admission unsuspends it (``catalog.kueue``). So a
labelled workload runs only if every step below holds; each is what kubernetes-sigs/kueue
v0.19.2 requires:

1. a LocalQueue of that name exists in the workload's namespace
   (``pkg/cache/queue/manager.go``: "localQueue doesn't exist or inactive");
2. its ClusterQueue exists (same file) and its ``namespaceSelector`` selects that
   namespace; a null selector selects none (``apis/kueue/v1beta2/clusterqueue_types.go``);
3. every flavor and admission check the ClusterQueue names exists, or the queue is
   inactive (``pkg/cache/scheduler/clusterqueue.go``, ``inactiveReason``); a
   ProvisioningRequest check needs the ProvisioningRequestConfig it names;
4. the ClusterQueue covers every resource the pods request (``quotaCheckStrategy``
   BlockUndeclared, ``pkg/scheduler/flavorassigner/flavorassigner.go``);
5. one flavor's nominal quota holds all the workload's pods at once: Kueue admits a
   workload whole (quota borrowed from a cohort is not counted here).

The provisioning class of its ProvisioningRequest checks is what then gets the nodes; a
queued-provisioning pool answers only ``queued-provisioning.gke.io`` (``plan.simulation.scale_up``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import kueue
from spotproof.catalog.labels import NAMESPACE_NAME_LABEL
from spotproof.plan.recording.recorder import Recording
from spotproof.policy.disruption import selects
from spotproof.scheduling import quantity

POLICY = "queue-admission"
KUEUE_GROUP = kueue.API_VERSION.split("/")[0]
MANAGED_KINDS = frozenset({"Job", "JobSet"})
"""What the chart's default integrations manage (``catalog.kueue.INTEGRATIONS``)."""


@dataclass(frozen=True)
class Route:
    """Where a labelled workload's route through Kueue leads."""

    local_queue: str
    cluster_queue: str | None
    provisioning_classes: tuple[str, ...]
    """Classes of the ProvisioningRequests its admission checks create."""
    problems: tuple[str, ...]
    """Why Kueue would never admit it; empty if it would."""

    def describe(self) -> str:
        via = f"queue {self.local_queue}"
        if self.cluster_queue:
            via += f" -> ClusterQueue {self.cluster_queue}"
        if self.provisioning_classes:
            via += f" (ProvisioningRequest {', '.join(self.provisioning_classes)})"
        return via


class KueueObjects:
    """The Kueue objects of a plan, by kind and name (LocalQueues by namespace too)."""

    def __init__(self, objects: list[Mapping[str, Any]], namespaces: Mapping[str, Mapping]):
        self.by_kind: dict[str, dict[str, Mapping[str, Any]]] = {}
        for obj in objects:
            metadata = obj.get("metadata") or {}
            key = str(metadata.get("name"))
            if obj.get("kind") == "LocalQueue":
                key = f"{metadata.get('namespace', 'default')}/{key}"
            self.by_kind.setdefault(str(obj.get("kind")), {})[key] = obj
        self.namespace_labels = namespaces

    @classmethod
    def of(cls, recording: Recording) -> KueueObjects:
        objects, namespaces = [], {}
        for resource in recording.kubernetes_objects():
            inputs = resource.inputs
            if str(inputs.get("apiVersion", "")).split("/")[0] == KUEUE_GROUP:
                objects.append(inputs)
            elif inputs.get("kind") == "Namespace":
                metadata = inputs.get("metadata") or {}
                namespaces[str(metadata.get("name"))] = metadata.get("labels") or {}
        return cls(objects, namespaces)

    def get(self, kind: str, name: str) -> Mapping[str, Any] | None:
        return self.by_kind.get(kind, {}).get(name)


def queue_name(kind: str, labels: Mapping[str, str]) -> str | None:
    """The LocalQueue a workload object is submitted to; None if Kueue leaves it alone."""
    return labels.get(kueue.QUEUE_NAME_LABEL) if kind in MANAGED_KINDS else None


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """What one pod requests per resource, as Kueue counts it: each container's requests,
    its limits standing in where a request is missing (the API's defaulting)."""
    total: dict[str, float] = {}
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, amount in amounts.items():
            try:
                total[name] = total.get(name, 0.0) + quantity.parse(amount)
            except ValueError:
                continue
    return total


def route(
    objects: KueueObjects,
    name: str,
    namespace: str,
    pod_spec: Mapping[str, Any],
    pods: int,
) -> Route:
    """The route of a workload of ``pods`` pods like ``pod_spec`` submitted to LocalQueue
    ``name`` in ``namespace``."""
    local = objects.get("LocalQueue", f"{namespace}/{name}")
    if local is None:
        return Route(name, None, (), (f"no LocalQueue {name} in namespace {namespace}",))
    cq_name = str((local.get("spec") or {}).get("clusterQueue"))
    cluster_queue = objects.get("ClusterQueue", cq_name)
    if cluster_queue is None:
        return Route(name, cq_name, (), (f"LocalQueue {name} names no ClusterQueue {cq_name}",))
    spec = cluster_queue.get("spec") or {}
    problems = [*_namespace_problems(objects, cq_name, spec, namespace)]
    checks, classes = _admission_checks(objects, spec)
    problems += checks
    problems += _quota_problems(objects, cq_name, spec, pod_requests(pod_spec), pods)
    return Route(name, cq_name, tuple(classes), tuple(problems))


def _namespace_problems(
    objects: KueueObjects, cq_name: str, spec: Mapping[str, Any], namespace: str
) -> list[str]:
    selector = spec.get("namespaceSelector")
    labels = {**objects.namespace_labels.get(namespace, {}), NAMESPACE_NAME_LABEL: namespace}
    if selector is None:
        return [f"ClusterQueue {cq_name} has no namespaceSelector, which admits no namespace"]
    if not selects(selector, labels):
        return [f"ClusterQueue {cq_name}'s namespaceSelector does not select {namespace}"]
    return []


def _admission_checks(
    objects: KueueObjects, spec: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """Problems with the checks the ClusterQueue names, and the provisioning classes of
    its ProvisioningRequest checks (v1beta2 ``admissionChecksStrategy.admissionChecks``;
    a plain list of names under ``admissionChecks`` in v1beta1)."""
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    names = [str(c.get("name")) for c in strategy] + [
        str(n) for n in spec.get("admissionChecks") or []
    ]
    problems, classes = [], []
    for check_name in names:
        check = objects.get("AdmissionCheck", check_name)
        if check is None:
            problems.append(f"AdmissionCheck {check_name} does not exist (the queue is inactive)")
            continue
        check_spec = check.get("spec") or {}
        if check_spec.get("controllerName") != kueue.PROVISIONING_CONTROLLER:
            continue
        parameters = check_spec.get("parameters") or {}
        config = objects.get("ProvisioningRequestConfig", str(parameters.get("name")))
        if parameters.get("kind") != "ProvisioningRequestConfig" or config is None:
            problems.append(
                f"AdmissionCheck {check_name} names no ProvisioningRequestConfig that exists"
            )
            continue
        classes.append(str((config.get("spec") or {}).get("provisioningClassName")))
    return problems, classes


def _quota_problems(
    objects: KueueObjects,
    cq_name: str,
    spec: Mapping[str, Any],
    requests: Mapping[str, float],
    pods: int,
) -> list[str]:
    groups = spec.get("resourceGroups") or []
    covered = {str(r) for g in groups for r in g.get("coveredResources") or []}
    missing = sorted(r for r, amount in requests.items() if amount and r not in covered)
    if missing:
        return [
            f"ClusterQueue {cq_name} does not cover {', '.join(missing)}, and Kueue admits "
            "nothing that requests an undeclared resource"
        ]
    problems = []
    for group in groups:
        flavors = [str(f.get("name")) for f in group.get("flavors") or []]
        problems += [
            f"ResourceFlavor {f} does not exist (the queue is inactive)"
            for f in flavors
            if objects.get("ResourceFlavor", f) is None
        ]
        needed = {
            r: amount * pods
            for r, amount in requests.items()
            if amount and r in (group.get("coveredResources") or [])
        }
        shortfalls = [_shortfall(flavor, needed) for flavor in group.get("flavors") or []]
        if needed and shortfalls and all(shortfalls):
            problems.append(
                f"{pods} pod(s) at once need {shortfalls[0]} of ClusterQueue {cq_name}, "
                "and Kueue admits a workload whole"
            )
    return problems


def _shortfall(flavor: Mapping[str, Any], needed: Mapping[str, float]) -> str:
    """What of ``needed`` the flavor's nominal quota cannot hold; empty if it holds it all."""
    quota = {
        str(r.get("name")): quantity.amount_or_zero(r.get("nominalQuota"))
        for r in flavor.get("resources") or []
    }
    short = [
        f"{amount:g} {resource} (quota {quota.get(resource, 0):g})"
        for resource, amount in sorted(needed.items())
        if amount > quota.get(resource, 0)
    ]
    return f"{', '.join(short)} in flavor {flavor.get('name')}" if short else ""
