"""Would this pod land on this node? kube-scheduler's filters, applied to rendered objects.

The inverse of :mod:`spotproof.scheduling`: where the contract builds taints, selectors
and affinity, this reads them back from what a stack rendered (taints tolerated,
nodeSelector and required node affinity satisfied, GPUs present, CPU and memory requests
within what a node allocates) so that a hand-edited
manifest or a mutated pool is caught. ``spotproof plan`` and the policy rules both use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotproof.catalog import Cloud
from spotproof.fleet import Taint, TaintEffect
from spotproof.scheduling import GPU_RESOURCE, PLATFORM_PRIORITY, quantity, system_taint
from spotproof.scheduling.node_resources import Allocatable


@dataclass(frozen=True)
class NodeShutdown:
    """The kubelet's graceful node shutdown, as a pool sets it (GKE ``kubeletConfig``):
    non-system pods first, for ``seconds`` less ``critical_pods_seconds``, then the
    system-critical ones for the rest (kubernetes/kubernetes pkg/kubelet/nodeshutdown)."""

    seconds: int
    """The whole shutdown; 0 turns it off (pods are not signalled at all)."""
    critical_pods_seconds: int

    @property
    def pod_seconds(self) -> int:
        """What non-system pods get."""
        return max(0, self.seconds - self.critical_pods_seconds)


@dataclass(frozen=True)
class NodeShape:
    """One pool's nodes as the scheduler sees them."""

    pool: str
    labels: Mapping[str, str]
    """Labels every node of the pool carries with exactly this value."""
    taints: tuple[Taint, ...]
    gpus: int = 0
    spot: bool = False
    flex_start: bool = False
    choices: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Labels whose value the provisioner picks per node to suit the pod (Karpenter:
    instance type, family, zone, ...): a pod asking for any one of these values fits."""
    allocatable: Allocatable = field(default_factory=Allocatable)
    """CPU and memory a node offers pods, where the plan knows them
    (``spotproof.scheduling.node_resources``)."""
    shutdown: NodeShutdown | None = None
    """How a reclaimed node shuts down, where the pool says; None: the platform's way."""

    @property
    def reclaimable(self) -> bool:
        """Capacity the cloud may take back: spot, or flex-start at the end of its run."""
        return self.spot or self.flex_start


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    for tol in tolerations:
        operator = tol.get("operator") or "Equal"
        key_matches = tol.get("key") == taint.key or (not tol.get("key") and operator == "Exists")
        effect_matches = not tol.get("effect") or tol.get("effect") == taint.effect.value
        value_matches = operator == "Exists" or str(tol.get("value") or "") == taint.value
        if key_matches and effect_matches and value_matches:
            return True
    return False


def _untolerated(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> str:
    """Why ``taint`` is not tolerated, naming the near miss when a toleration has its key."""
    text = f"taint {taint.key}={taint.value}:{taint.effect.value} not tolerated"
    for tol in tolerations:
        if tol.get("key") != taint.key:
            continue
        effect, value = tol.get("effect"), str(tol.get("value") or "")
        if effect and effect != taint.effect.value:
            miss = f"effect {effect}, the taint {taint.effect.value}"
        elif (tol.get("operator") or "Equal") == "Equal" and value != taint.value:
            miss = f"value {value!r}, the taint {taint.value!r}"
        else:
            continue
        return f"{text} (the toleration of that key has {miss})"
    return text


def _value_holds(operator: str, value: str, values: list[str]) -> bool:
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator in ("Gt", "Lt") and values:
        try:
            actual, bound = int(value), int(values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return operator == "Exists"


def _expression_holds(expression: Mapping[str, Any], node: NodeShape) -> bool:
    key, operator = expression.get("key"), str(expression.get("operator"))
    values = [str(v) for v in expression.get("values") or []]
    if key in node.labels:
        return _value_holds(operator, node.labels[key], values)
    if key in node.choices:
        return any(_value_holds(operator, choice, values) for choice in node.choices[key])
    return operator in ("NotIn", "DoesNotExist")


def gpu_request(pod_spec: Mapping[str, Any]) -> int:
    """GPUs the pod needs: the largest of its init containers or the sum of its containers."""

    def gpus(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        return int(quantity.amount_or_zero(limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE))))

    regular = sum(gpus(c) for c in pod_spec.get("containers") or [])
    init = max((gpus(c) for c in pod_spec.get("initContainers") or []), default=0)
    return max(regular, init)


def pod_request(pod_spec: Mapping[str, Any], resource: str) -> float:
    """What the pod requests of ``resource`` (``cpu`` in cores, ``memory`` in bytes): the
    larger of its containers' sum and its largest init container, as the scheduler counts
    it. A container that sets only a limit requests that much (the API defaults requests
    to limits); a value that is no quantity counts as nothing (the schema checks say so)."""

    def requested(container: Mapping[str, Any]) -> float:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        return quantity.amount_or_zero(requests.get(resource, limits.get(resource)))

    regular = sum(requested(c) for c in pod_spec.get("containers") or [])
    init = max((requested(c) for c in pod_spec.get("initContainers") or []), default=0.0)
    return max(regular, init)


def _resource_misfits(pod_spec: Mapping[str, Any], node: NodeShape) -> list[str]:
    offered = node.allocatable
    reasons = []
    cpu = pod_request(pod_spec, "cpu")
    if offered.cpu_millis is not None and cpu * 1000 > offered.cpu_millis:
        reasons.append(
            f"requests {cpu:g} CPU, node's {offered.basis} CPU is {offered.cpu_millis / 1000:g}"
        )
    memory = pod_request(pod_spec, "memory")
    if offered.memory_bytes is not None and memory > offered.memory_bytes:
        reasons.append(
            f"requests {memory / 2**30:.1f} GiB of memory, node's {offered.basis} memory is "
            f"{offered.memory_bytes / 2**30:.1f} GiB"
        )
    return reasons


def misfits(pod_spec: Mapping[str, Any], node: NodeShape) -> list[str]:
    """Why a pod with ``pod_spec`` (camelCase) cannot land on ``node``; empty if it can."""
    reasons = []
    tolerations = pod_spec.get("tolerations") or []
    for taint in node.taints:
        if taint.effect is not TaintEffect.PREFER_NO_SCHEDULE and not tolerates(tolerations, taint):
            reasons.append(_untolerated(tolerations, taint))
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if not _expression_holds({"key": key, "operator": "In", "values": [value]}, node):
            reasons.append(f"nodeSelector {key}={value} not on the node")
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(
        all(_expression_holds(e, node) for e in term.get("matchExpressions") or [])
        for term in terms
    ):
        reasons.append("required node affinity not satisfied")
    needed = gpu_request(pod_spec)
    if needed > node.gpus:
        reasons.append(f"needs {needed} {GPU_RESOURCE}, node has {node.gpus}")
    return reasons + _resource_misfits(pod_spec, node)


SYSTEM_NAMESPACES = frozenset({"kube-system", "gke-managed-system", "karpenter"})
SYSTEM_PRIORITY_CLASSES = frozenset(
    {"system-cluster-critical", "system-node-critical", PLATFORM_PRIORITY.name}
)


def is_system_workload(namespace: str, pod_spec: Mapping[str, Any]) -> bool:
    """Cluster add-ons: they must run on the system pool and never on reclaimable capacity."""
    return (
        namespace in SYSTEM_NAMESPACES
        or pod_spec.get("priorityClassName") in SYSTEM_PRIORITY_CLASSES
    )


def reference_system_pod(cloud: Cloud) -> dict[str, Any]:
    """A pod like the add-ons the platform itself runs (kube-dns, metrics-server, ...):
    they tolerate the cloud's system taint and request no GPU. If it fits a spot pool, the
    platform's own add-ons would land on spot capacity too."""
    return {
        "priorityClassName": "system-cluster-critical",
        "tolerations": [{"key": system_taint(cloud).key, "operator": "Exists"}],
        "containers": [{"name": "addon", "resources": {"requests": {"cpu": "100m"}}}],
    }
