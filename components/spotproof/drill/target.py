"""The drill's target: a pod of the workload running on a spot node, read from the cluster.

``find_target`` waits, bounded, on a watch of the workload's pods (``kube_api.stream``)
until it runs, and refuses a node no platform label calls spot: reclaiming on-demand
capacity tests nothing and costs a restart. ``drill.watch`` reads the cluster with the
platform facts here too: the spot and pool labels, and a node's notices of a reclaim.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import closing
from dataclasses import asdict, dataclass, field
from typing import Any

from kubernetes import client

from spotproof.catalog import aks, labels
from spotproof.catalog import jobset as jobset_facts
from spotproof.drill import access
from spotproof.drill.errors import DrillRefused, StageTimedOut
from spotproof.drill.kube_api import Cancel, api_time, owned_time, stream

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""The Job controller labels each pod with its Job's name (Kubernetes 1.27+:
https://kubernetes.io/docs/reference/labels-annotations-taints/#batchkubernetesiojob-name)."""
JOBSET_API = (access.JOBSET_GROUP, access.JOBSET_VERSION, "jobsets")

SPOT_LABELS: tuple[tuple[str, str], ...] = (
    # GKE, Spot VMs: https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms
    (labels.GKE_SPOT_LABEL, "true"),
    # GKE, preemptible VMs: https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms
    ("cloud.google.com/gke-preemptible", "true"),
    # Karpenter (EKS, AKS node auto-provisioning): kubernetes-sigs/karpenter
    # pkg/apis/v1/labels.go@v1.14.1 (CapacityTypeLabelKey, CapacityTypeSpot)
    (labels.KARPENTER_CAPACITY_LABEL, "spot"),
    # EKS managed node groups: https://docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html
    # ("Amazon EKS adds ... eks.amazonaws.com/capacityType: SPOT")
    (labels.EKS_CAPACITY_LABEL, "SPOT"),
    # AKS spot pools: MicrosoftDocs/azure-aks-docs articles/aks/spot-node-pool.md
    (aks.SCALE_SET_PRIORITY_LABEL, aks.SPOT_PRIORITY),
)
"""``(label, value)`` pairs each platform writes on spot nodes by itself."""
POOL_LABELS = (
    labels.GKE_NODEPOOL_LABEL,
    labels.KARPENTER_NODEPOOL_LABEL,
    labels.EKS_NODEGROUP_LABEL,
    aks.AGENT_POOL_LABEL,
)
"""The label naming a node's pool on each platform, as ``catalog.labels`` models them."""
RANK_LABELS = ("jobset.sigs.k8s.io/job-global-index", "batch.kubernetes.io/job-completion-index")
"""A gang pod's rank: its child Job's index in the JobSet (kubernetes-sigs/jobset
``api/jobset/v1alpha2/jobset_types.go``, ``JobGlobalIndexKey``), then its own in an Indexed
Job (Kubernetes 1.28+, the labels reference page above)."""
DEFAULT_GRACE_SECONDS = 30
NOTICE_TAINTS = {
    "karpenter.sh/disrupted",
    "remediator.kubernetes.azure.com/unschedulable",
    "cloud.google.com/impending-node-termination",
    "aws-node-termination-handler/spot-itn",
}
"""Taints put on a node about to go; the node lifecycle controller's ``not-ready`` and
``unreachable`` are not: they follow a node already lost."""


def reclaim_notices(node: Mapping[str, Any]) -> dict[str, float | None]:
    """Each sign of a reclaim the node shows (``drill.watch`` cites each), and when it was
    written."""
    spec, meta = node.get("spec") or {}, node["metadata"]
    found: dict[str, float | None] = {}
    if spec.get("unschedulable"):
        found["cordoned (spec.unschedulable)"] = owned_time(node, "f:spec", "f:unschedulable")
    for taint in spec.get("taints") or []:
        if taint["key"] in NOTICE_TAINTS:
            how = f"taint {taint['key']}:{taint.get('effect', '')}"
            found[how] = owned_time(node, "f:spec", "f:taints")
    for condition in (node.get("status") or {}).get("conditions") or []:
        said = f"{condition.get('reason', '')} {condition.get('message', '')}"
        if condition["type"] == "Ready" and "shutting down" in said:
            found["shutdown (Ready=False)"] = api_time(condition.get("lastTransitionTime"))
    if meta.get("deletionTimestamp"):
        found["node deleting"] = api_time(meta["deletionTimestamp"])
    return found


def pool_of(node_labels: Mapping[str, str]) -> str:
    return next((node_labels[k] for k in POOL_LABELS if node_labels.get(k)), "")


def spot_label(node_labels: Mapping[str, str]) -> str | None:
    """The ``label=value`` that makes the node spot, or None."""
    return next((f"{k}={v}" for k, v in SPOT_LABELS if node_labels.get(k) == v), None)


def why_not_spot(node: Mapping[str, Any]) -> str:
    found = node["metadata"].get("labels") or {}
    has = ", ".join(f"{k}={found[k]}" for k, _ in SPOT_LABELS if k in found) or "no capacity label"
    wanted = ", ".join(f"{k}={v}" for k, v in SPOT_LABELS)
    return f"node {node['metadata']['name']}, not spot ({has}; spot is one of {wanted})"


def selector(kind: str, name: str) -> str:
    """The label selector of the workload's pods, across restarts."""
    if kind == jobset_facts.KIND:
        return f"{jobset_facts.JOBSET_NAME_LABEL}={name}"
    if kind == "Job":
        return f"{JOB_NAME_LABEL}={name}"
    raise DrillRefused(f"workload kind {kind!r}; allowed: Job, {jobset_facts.KIND}")


@dataclass(frozen=True)
class Rank:
    """One pod of the workload and the node it runs on."""

    pod: str
    node: str
    provider_id: str
    pool: str
    spot: str | None
    """The ``label=value`` that makes its node spot; None when it is not."""


@dataclass(frozen=True)
class Target(Rank):
    """The rank whose node to reclaim first, with what the drill needs of its workload."""

    namespace: str
    kind: str  # Job or JobSet
    name: str
    nodes: tuple[Rank, ...]
    """What to reclaim: one rank's, or (``ranks="all"``) one rank on each distinct node."""
    ranks: tuple[Rank, ...]
    """Every running pod of the workload, in rank order."""
    container: str
    grace_seconds: int
    """The pod's ``terminationGracePeriodSeconds``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The container's literal ``env`` values (``valueFrom`` ones are not read)."""


def _expected(api: client.ApiClient, namespace: str, kind: str, name: str) -> int:
    """How many pods run at once when the workload is up: a gang's every rank."""
    found = access.read(api, access.WORKLOAD[kind], f"{kind} {namespace}/{name}", name, namespace)
    if kind == "Job":
        return found["spec"].get("parallelism") or 1
    jobs = found.get("spec", {}).get("replicatedJobs", [])
    return sum(
        int(j.get("replicas", 1)) * int(j["template"]["spec"].get("parallelism", 1)) for j in jobs
    )


def _running(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase == "Running" and not pod["metadata"].get("deletionTimestamp")


def _rank_key(pod: Mapping[str, Any]) -> tuple[int | str, ...]:
    """A gang's rank order: the child Job's index, then the pod's completion index."""
    found = pod["metadata"].get("labels") or {}
    return (*(int(found.get(k, 0)) for k in RANK_LABELS), pod["metadata"]["name"])


def _placed(api: client.ApiClient, pod: Mapping[str, Any], cache: dict[str, Any]) -> Rank:
    if (name := pod["spec"]["nodeName"]) not in cache:
        cache[name] = access.read_node(api, name)
    found = cache[name]["metadata"].get("labels") or {}
    provider = (cache[name].get("spec") or {}).get("providerID", "")
    return Rank(pod["metadata"]["name"], name, provider, pool_of(found), spot_label(found))


def _choose(
    api: client.ApiClient,
    pods: Mapping[str, Mapping[str, Any]],
    cache: dict[str, Any],
    expected: int,
    ranks: str,
) -> tuple[tuple[Rank, ...], tuple[Rank, ...], str, bool]:
    """``(chosen, every rank, why not yet, refused)``: chosen is empty until the workload
    runs whole with the node(s) to reclaim on spot; ``refused`` when it runs on other nodes."""
    running = sorted(filter(_running, pods.values()), key=_rank_key)
    if not running or len(running) < expected:
        return (), (), f"{len(running)} of {max(expected, 1)} pod(s) Running", False
    placed = tuple(_placed(api, p, cache) for p in running)
    others = [r for r in placed if r.spot is None]
    if ranks == "one":
        chosen = tuple(r for r in placed if r.spot)[:1]
    else:
        # The first rank on each node, in rank order.
        chosen = () if others else tuple({r.node: r for r in reversed(placed)}.values())[::-1]
    if chosen:
        return chosen, placed, "", False
    why = f"pod {others[0].pod} runs on {why_not_spot(cache[others[0].node])}"
    return (), placed, why, True


def find_target(
    api: client.ApiClient,
    namespace: str,
    kind: str,
    name: str,
    *,
    ranks: str = "one",
    container: str | None = None,
    timeout: float = 900.0,
    window: int = 60,
) -> Target:
    """Waits up to ``timeout`` seconds for the workload to run with a pod on a spot node
    (``ranks="all"``: every node of the gang spot) and returns it. A workload that runs whole
    on other capacity is refused at once (DrillRefused, naming the node and its capacity
    labels): a running pod does not move, so waiting would not change it. One not running
    at all when the wait ends times the stage out (StageTimedOut)."""
    if ranks not in ("one", "all"):
        raise DrillRefused(f"ranks {ranks!r}; allowed: one, all")
    workload, label_selector = f"{kind} {namespace}/{name}", selector(kind, name)
    expected = _expected(api, namespace, kind, name)
    pods: dict[str, dict[str, Any]] = {}
    cache: dict[str, dict[str, Any]] = {}
    why, refused = f"0 of {max(expected, 1)} pod(s) Running", False
    events = stream(
        Cancel(), access.PODS.bind(api), namespace, label_selector=label_selector,
        window=window, deadline=time.monotonic() + timeout,
    )  # fmt: skip
    with closing(events):
        for kind_of, obj in events:
            if kind_of == "LISTED":
                pods = {p["metadata"]["name"]: p for p in obj.get("items") or []}
            elif kind_of == "DELETED":
                pods.pop(obj["metadata"]["name"], None)
            else:
                pods[obj["metadata"]["name"]] = obj
            chosen, placed, why, refused = _choose(api, pods, cache, expected, ranks)
            if refused:
                raise DrillRefused(f"{workload}: {why}; a drill reclaims spot capacity only")
            if chosen:
                trainer = _trainer(pods[chosen[0].pod], container)
                facts = {"namespace": namespace, "kind": kind, "name": name}
                return Target(**asdict(chosen[0]), **facts, nodes=chosen, ranks=placed, **trainer)
    raise StageTimedOut(f"target: {workload} not running on a node within {timeout:g} s ({why})")


def _trainer(pod: Mapping[str, Any], container: str | None) -> dict[str, Any]:
    """The container's name, its literal env, and the pod's grace period."""
    containers = pod["spec"]["containers"]
    found = [c for c in containers if c["name"] == container] if container else containers
    if not found:
        names = ", ".join(c["name"] for c in containers)
        raise DrillRefused(
            f"pod {pod['metadata']['name']} has no container {container!r}; allowed: {names}"
        )
    env = {e["name"]: e["value"] for e in found[0].get("env") or [] if "value" in e}
    grace = int(pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    return {"container": found[0]["name"], "grace_seconds": grace, "env": env}
