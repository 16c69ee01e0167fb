"""Workloads in a plan and the scheduling check: will each one run, and where?

For every workload the check asks :func:`spotproof.scheduling.fit.misfits` against every
node shape of the plan, then judges the answer:

- a workload targeting a pool class must fit at least one pool of that class;
- a system workload must fit the system pool and *no* reclaimable (spot, flex-start) pool;
- the platform's own add-ons, modelled by a reference pod, must do the same.

DaemonSets are exempt: node agents are meant to run on every node.

Workloads come from the rendered Kubernetes objects and, where a cloud installs pods the
plan cannot render offline, from the placement values the program passes: a managed
add-on's configuration (EKS CoreDNS) and a Helm chart's values (the Karpenter controller).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from spotproof import scheduling
from spotproof.catalog import DEFAULT_CLOUD, jobset, kueue
from spotproof.fleet.pools import PoolClass
from spotproof.plan.cloud import every_plan
from spotproof.plan.model import Workload
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.nodes import EXISTING_SYSTEM_POOL
from spotproof.policy import Problem, Violation
from spotproof.policy.kubernetes import cloud_of
from spotproof.scheduling import fit, pod_templates

FIT_POLICY = "scheduling-fit"
SYSTEM_OFF_SPOT_POLICY = "system-off-spot"
KEYS_POLICY = "scheduling-keys"
MISSPELT = 0.9
"""How alike (difflib's ratio) a key no pool has and one a pool has are when the first
is taken for a misspelling: ``spotproof.dev/capacty``/``spotproof.dev/capacity`` is 0.98."""


_PLACEMENT_VALUES = ("tolerations", "nodeSelector", "affinity", "priorityClassName")
HELM_CHART = "kubernetes:helm.sh/v4:Chart"
CHART_PLACEMENT_KEY = {jobset.CHART: "controller", kueue.CHART: "controllerManager"}
"""Charts that nest their controller's placement under one key of their values
(``charts/jobset/values.yaml``, ``charts/kueue/values.yaml``); others keep it at the top."""


def workloads(recording: Recording) -> list[Workload]:
    found = []
    for resource in recording.kubernetes_objects():
        metadata = resource.inputs.get("metadata") or {}
        for template in pod_templates.pod_templates(resource.inputs):
            name = metadata.get("name", resource.name)
            found.append(
                Workload(
                    resource.name,
                    resource.inputs["kind"],
                    metadata.get("namespace", "default"),
                    f"{name}/{template.part}" if template.part else name,
                    template.spec,
                    template.metadata,
                    template.pods,
                    metadata.get("labels") or {},
                    resource.inputs.get("spec") or {},
                    pod_spec_path=pod_templates.pod_spec_path(resource.inputs, template.part),
                )
            )
    found += _installed_workloads(recording)
    if recording.cluster:
        found = [replace(w, cluster=recording.cluster) for w in found]
    return sorted(found, key=lambda w: (w.kind, w.namespace, w.name))


def placed_pod(values: Mapping[str, Any], priority: str) -> dict[str, Any]:
    """A pod spec carrying the placement a chart or add-on is configured with."""
    pod: dict[str, Any] = {k: values[k] for k in _PLACEMENT_VALUES if values.get(k)}
    pod.setdefault("priorityClassName", priority)
    pod["containers"] = [{"name": "main", "resources": {"requests": {"cpu": "100m"}}}]
    return pod


def _installed_workloads(recording: Recording) -> list[Workload]:
    """Pods a managed add-on (``CloudPlan.installed_workloads``) or a Helm chart will run,
    placed as the program configured."""
    found = [w for plan in every_plan() for w in plan.installed_workloads(recording)]
    for chart in recording.of_type(HELM_CHART):
        values = chart.inputs.get("values") or {}
        nested = CHART_PLACEMENT_KEY.get(str(chart.inputs.get("chart")))
        if nested:
            values = values.get(nested) or {}
        if any(key in values for key in _PLACEMENT_VALUES):
            found.append(
                Workload(
                    chart.name,
                    "Chart",
                    str(chart.inputs.get("namespace") or "default"),
                    str(chart.inputs.get("name") or chart.name),
                    placed_pod(values, ""),
                )
            )
    return found


def _class_of(node: fit.NodeShape) -> str | None:
    return node.labels.get(scheduling.POOL_CLASS_LABEL)


def _stray_tolerations(pod_spec: Mapping[str, Any], nodes: list[fit.NodeShape]) -> list[str]:
    """Tolerations of a pod that fits none of ``nodes`` whose key no taint of theirs has
    (``provisioning-tier=preemptible`` written for another cluster's spot pools, say), each
    with the taints those nodes carry that the pod does not tolerate: what it was meant to
    tolerate. A near miss of a key is said by :func:`misspelt_keys` instead."""
    keys = {taint.key for node in nodes for taint in node.taints}
    untolerated = sorted(
        {
            f"{t.key}={t.value}:{t.effect.value}"
            for node in nodes
            for t in node.taints
            if not fit.tolerates(pod_spec.get("tolerations") or [], t)
        }
    )
    if not untolerated:
        return []
    found = []
    for toleration in pod_spec.get("tolerations") or []:
        key = toleration.get("key")
        close = difflib.get_close_matches(str(key), sorted(keys), n=1, cutoff=MISSPELT)
        if not key or key in keys or close:
            continue
        value = f"={toleration['value']}" if toleration.get("value") else ""
        effect = f":{toleration['effect']}" if toleration.get("effect") else ""
        found.append(
            f"its toleration {key}{value}{effect} matches no taint of these pools, which carry "
            f"{', '.join(untolerated)}"
        )
    return found


def _why_not(pod_spec: Mapping[str, Any], nodes: list[fit.NodeShape]) -> str:
    return "; ".join(f"{n.pool}: {', '.join(fit.misfits(pod_spec, n))}" for n in nodes)


def check_workload(
    workload: Workload, nodes: list[fit.NodeShape], *, system: bool
) -> list[Violation]:
    fits = [n for n in nodes if not fit.misfits(workload.pod_spec, n)]
    if system:
        violations = []
        reclaimable = [n.pool for n in fits if n.reclaimable]
        if reclaimable:
            violations.append(
                Violation(
                    SYSTEM_OFF_SPOT_POLICY,
                    workload.resource,
                    f"system workload {workload.label} can land on reclaimable pool(s) "
                    f"{', '.join(reclaimable)}",
                    workload.first_key_path("tolerations", "nodeSelector", "affinity"),
                )
            )
        if not any(_class_of(n) == PoolClass.SYSTEM for n in fits):
            system_pools = [n for n in nodes if _class_of(n) == PoolClass.SYSTEM]
            violations.append(
                Violation(
                    FIT_POLICY,
                    workload.resource,
                    f"system workload {workload.label} fits no system pool"
                    + (f" ({_why_not(workload.pod_spec, system_pools)})" if system_pools else ""),
                    _refused_key_path(workload, system_pools, strays=0),
                )
            )
        return violations

    # A workload that accepts a fallback class must fit a pool of each class it accepts,
    # or the fallback it was given is an illusion.
    violations = []
    for target in workload.targets or [None]:
        candidates = [n for n in nodes if target is None or _class_of(n) == target]
        if any(n in fits for n in candidates):
            continue
        wanted = f"pool of class {target.value}" if target else "pool"
        detail = (
            _why_not(workload.pod_spec, candidates) if candidates else f"the plan has no {wanted}"
        )
        strays = _stray_tolerations(workload.pod_spec, candidates)
        detail += "".join(f"; {stray}" for stray in strays)
        violations.append(
            Violation(
                FIT_POLICY,
                workload.resource,
                f"{workload.label} fits no {wanted}: {detail}",
                _refused_key_path(workload, candidates, len(strays)),
            )
        )
    return violations


_REFUSING_WORDS = (
    ("nodeSelector ", "nodeSelector"),
    ("taint ", "tolerations"),
    ("affinity", "affinity"),
    ("needs ", "containers"),
)
"""A word of ``fit.misfits``' reasons -> the pod spec's key the reason refuses it on (a
CPU or memory request that does not fit is no one key of the pod)."""


def _refused_key_path(workload: Workload, nodes: list[fit.NodeShape], strays: int) -> str | None:
    """Where a finding that ``workload`` fits none of ``nodes`` is about: the key those
    pools refused it on most often (its tolerations also for each of ``strays``, a
    toleration that matches no taint), of those its pod spec sets; ties in the order of
    :data:`_REFUSING_WORDS`."""
    refused = [r for n in nodes for r in fit.misfits(workload.pod_spec, n)]
    counts = {
        key: sum(r.count(word) for r in refused) + (strays if key == "tolerations" else 0)
        for word, key in _REFUSING_WORDS
    }
    return workload.first_key_path(*sorted(counts, key=lambda key: -counts[key]))


def check(recording: Recording, nodes: list[fit.NodeShape]) -> list[Violation]:
    """The scheduling check over a whole plan."""
    violations = []
    for workload in workloads(recording):
        system = fit.is_system_workload(workload.namespace, workload.pod_spec)
        violations += check_workload(workload, nodes, system=system)
        violations += [
            Violation(
                KEYS_POLICY,
                workload.resource,
                f"{workload.label}: {problem}",
                workload.key_path(problem.key_path),
            )
            for problem in misspelt_keys(workload.pod_spec, nodes)
        ]
    violations += check_workload(reference_add_on(recording, nodes), nodes, system=True)
    return violations


WELL_KNOWN_NODE_LABELS = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "cloud.google.com/machine-family",
        "cloud.google.com/gke-provisioning",
        "cloud.google.com/gke-os-distribution",
        "cloud.google.com/gke-gpu",
        "cloud.google.com/gke-accelerator-count",
        "cloud.google.com/compute-class",
        "karpenter.k8s.aws/instance-category",
        "karpenter.k8s.aws/instance-generation",
        "karpenter.k8s.aws/instance-size",
    }
)
"""Labels nodes carry that the plan's pool shapes do not model: never taken for a
misspelling (https://kubernetes.io/docs/reference/labels-annotations-taints/; GKE's and
Karpenter's well-known node labels)."""


def misspelt_keys(pod_spec: Mapping[str, Any], nodes: list[fit.NodeShape]) -> list[Problem]:
    """Keys a pod tolerates or selects on that no pool has, where a pool has one very like
    it: a misspelling, which would otherwise surface only as "fits no pool". A key like
    none of the fleet's (``kubernetes.io/hostname``) is left alone."""
    taint_keys = {taint.key for node in nodes for taint in node.taints}
    label_keys = {key for node in nodes for key in (*node.labels, *node.choices)}
    label_keys |= WELL_KNOWN_NODE_LABELS
    asked = [
        ("toleration key", "tolerations", str(t.get("key")), taint_keys)
        for t in pod_spec.get("tolerations") or []
        if t.get("key")
    ]
    asked += [
        ("nodeSelector key", "nodeSelector", str(k), label_keys)
        for k in pod_spec.get("nodeSelector") or {}
    ]
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    asked += [
        ("node affinity key", "affinity", str(expression.get("key")), label_keys)
        for term in required.get("nodeSelectorTerms") or []
        for expression in term.get("matchExpressions") or []
    ]
    problems = []
    for what, where, key, known in asked:
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=MISSPELT)
        if key not in known and close and close[0] not in WELL_KNOWN_NODE_LABELS:
            place = "taint of any pool" if what == "toleration key" else "label of any pool's nodes"
            problems.append(Problem(f"{what} {key} is no {place}; did you mean {close[0]}?", where))
    return list(dict.fromkeys(problems))


def reference_add_on(recording: Recording, nodes: Sequence[fit.NodeShape] = ()) -> Workload:
    """A pod modelled on the platform's own add-ons, for the plan's cloud. On a cluster
    spotproof did not create they also tolerate the taints its stack describes on its
    system pool (``spotproof:existingCluster.systemPool``): that cluster's add-ons run."""
    cloud = cloud_of(recording.resources) or DEFAULT_CLOUD
    pod = dict(fit.reference_system_pod(cloud))
    # Only a described cluster's: a fleet's system pool must suit the platform's add-ons as
    # they are (a CriticalAddonsOnly taint on a GKE system pool leaves them homeless).
    system_keys = {t.key for n in nodes if n.pool == EXISTING_SYSTEM_POOL for t in n.taints}
    known = {t.get("key") for t in pod["tolerations"]}
    pod["tolerations"] = [
        *pod["tolerations"],
        *({"key": key, "operator": "Exists"} for key in sorted(system_keys - known)),
    ]
    return Workload(
        "platform-add-ons",
        "Pod",
        "kube-system",
        "reference-add-on",
        pod,
        cluster=recording.cluster,
    )


def placements(recording: Recording, nodes: list[fit.NodeShape]) -> dict[str, list[str]]:
    """Which pools each workload fits (and the platform's add-ons), for the report."""
    return {
        w.label: [n.pool for n in nodes if not fit.misfits(w.pod_spec, n)]
        for w in [*workloads(recording), reference_add_on(recording, nodes)]
    }
