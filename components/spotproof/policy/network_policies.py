"""Can each workload still reach what it needs under the stack's NetworkPolicies?

A pod is isolated for egress once any policy selecting it lists ``Egress`` in its
``policyTypes``; it may then connect only where some selecting policy's egress rule
allows, and policies only add to each other
(https://kubernetes.io/docs/concepts/services-networking/network-policies/). A rule with
no ``to`` allows every destination and one with no ``ports`` every port; an ``ipBlock``
matches addresses in its ``cidr`` but not in its ``except``; a peer with a
``namespaceSelector`` and a ``podSelector`` matches pods that satisfy both; a port without
a protocol is TCP.

Every workload in a namespace must be isolated (``namespace-isolated``), and still reach
what the runtime needs (``workload-egress``): its own namespace's pods (a gang's ranks),
the cluster DNS, HTTPS to an arbitrary public address (the object store, the queue's API),
and the node's identity endpoint of its cloud (``kube.network_policy``). A policy a user
adds can only widen what spotproof's allow; a stack that replaces them with narrower ones
fails here instead of in the first pod that cannot fetch a credential.

Who reaches a gang's pods (what policies admit: ``policy.ingress``): a memory tier's
replica port the gang's own pods alone (``memory-tier-network``), and every port every
other pod of the gang, both ways where its pods are isolated for egress (``gang-network``).
spotproof's namespace admits every pod of it to every pod but those labelled
``GANG_NETWORK_LABEL``, which the gang's own policy admits (``kube.network_policy``); these
rules hold any stack or manifest to the same. A pod is judged by every label its
controllers give it (``scheduling.pod_templates``), and its namespace by all of its labels.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotproof.catalog import jobset, kubernetes_job
from spotproof.catalog.labels import GANG_NETWORK_LABEL
from spotproof.catalog.node_endpoints import IDENTITY_ENDPOINTS
from spotproof.policy.base import PlannedResource, Problem, Scope, StackRule, pod_key_path
from spotproof.policy.disruption import selects
from spotproof.policy.ingress import (
    Pods,
    Selecting,
    gang_admitted,
    matches,
    named_ports,
    outsiders_admitted,
    ports_admitted,
    ports_allowed,
)
from spotproof.policy.kubernetes import cloud_of
from spotproof.runtime import settings
from spotproof.scheduling import fit, pod_templates

NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"
NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Destination:
    """Where a pod connects: an address, or a pod of a namespace; a protocol and port."""

    what: str
    protocol: str
    port: int
    address: str | None = None
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)


def _peer_matches(peer: Mapping[str, Any], to: Destination, own: Mapping[str, str]) -> bool:
    block = peer.get("ipBlock")
    if block is not None:
        if to.address is None:
            return False
        address = ipaddress.ip_address(to.address)
        inside = address in ipaddress.ip_network(block["cidr"], strict=False)
        excluded = any(
            address in ipaddress.ip_network(cidr, strict=False) for cidr in block.get("except", [])
        )
        return inside and not excluded
    if to.address is not None:
        return False
    namespaces = peer.get("namespaceSelector")
    in_namespace = (
        selects(namespaces, to.namespace_labels)
        if namespaces is not None
        else to.namespace_labels.get(NAME_LABEL) == own.get(NAME_LABEL)
    )
    return in_namespace and selects(peer.get("podSelector"), to.pod_labels)


def _port_matches(port: Mapping[str, Any], to: Destination) -> bool:
    if port.get("protocol", "TCP") != to.protocol:
        return False
    number = port.get("port")
    if number is None:
        return True
    if not isinstance(number, int):
        return False  # a named port: the destination's container ports are not known here
    return number <= to.port <= port.get("endPort", number)


def egress_allowed(
    policies: list[Mapping[str, Any]], to: Destination, own_namespace: Mapping[str, str]
) -> bool:
    """Whether a pod that these ``policies`` select (those of its namespace whose
    ``podSelector`` matches it) may connect to ``to``."""
    egress = [
        p
        for p in policies
        if "Egress" in (p.get("policyTypes") or (["Ingress", "Egress"] if p.get("egress") else []))
    ]
    if not egress:
        return True
    for policy in egress:
        for rule in policy.get("egress") or []:
            peers_ok = not rule.get("to") or any(
                _peer_matches(peer, to, own_namespace) for peer in rule["to"]
            )
            ports_ok = not rule.get("ports") or any(_port_matches(p, to) for p in rule["ports"])
            if peers_ok and ports_ok:
                return True
    return False


def needed_destinations(
    cloud: Any, namespace: Mapping[str, str], pod: Mapping[str, str]
) -> list[Destination]:
    kube_system = {NAME_LABEL: "kube-system"}
    needed = [
        Destination(
            "its own namespace's pods (a gang's ranks)", "TCP", 29500, None, namespace, pod
        ),
        Destination("cluster DNS", "UDP", 53, None, kube_system, {"k8s-app": "kube-dns"}),
        Destination("HTTPS to the object store and cloud APIs", "TCP", 443, "198.51.100.7"),
    ]
    for cidr, port in IDENTITY_ENDPOINTS.get(cloud, ()):
        address = cidr.split("/")[0]
        needed.append(Destination(f"the identity endpoint {address}:{port}", "TCP", port, address))
    return needed


def _namespace_labels(resources: list[PlannedResource], name: str) -> dict[str, str]:
    for resource in resources:
        metadata = resource.inputs.get("metadata") or {}
        if resource.type == NAMESPACE and metadata.get("name") == name:
            return {**(metadata.get("labels") or {}), NAME_LABEL: name}
    return {NAME_LABEL: name}


def _named_policies_in(
    resources: list[PlannedResource], namespace: str
) -> list[tuple[str, Mapping[str, Any]]]:
    """The NetworkPolicies of ``namespace``: (name, spec)."""
    return [
        (str((r.inputs.get("metadata") or {}).get("name", r.name)), r.inputs.get("spec") or {})
        for r in resources
        if r.type == NETWORK_POLICY
        and (r.inputs.get("metadata") or {}).get("namespace") == namespace
    ]


def _policies_in(resources: list[PlannedResource], namespace: str) -> list[Mapping[str, Any]]:
    return [spec for _name, spec in _named_policies_in(resources, namespace)]


def _workloads(resources: list[PlannedResource]) -> Iterator[tuple[PlannedResource, str, Any]]:
    """Every pod template of a workload, but the cluster's add-ons': their namespaces and
    traffic are the platform's (``fit.is_system_workload``)."""
    for resource, namespace, template in pod_templates.workload_templates(resources):
        if not fit.is_system_workload(namespace, template.spec):
            yield resource, namespace, template


def _selecting(
    resources: list[PlannedResource], namespace: str, labels: Mapping[str, str]
) -> list[Mapping[str, Any]]:
    """The specs of the NetworkPolicies of ``namespace`` that select pods labelled so."""
    return [p for p in _policies_in(resources, namespace) if selects(p.get("podSelector"), labels)]


def namespaces_isolated(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    for resource, namespace, template in _workloads(resources):
        policies = _selecting(resources, namespace, template.metadata.get("labels") or {})
        kinds = {kind for p in policies for kind in p.get("policyTypes") or []}
        if not {"Ingress", "Egress"} <= kinds:
            message = (
                f"pods in namespace {namespace} accept and open any connection; allowed: a "
                "default-deny NetworkPolicy there (kube.network_policy.isolate_namespace)"
            )
            yield resource.name, Problem(message, pod_key_path(resource, template))


def workloads_reach_what_they_need(
    resources: list[PlannedResource],
) -> Iterator[tuple[str, str]]:
    cloud = cloud_of(resources)
    for resource, namespace, template in _workloads(resources):
        labels = template.metadata.get("labels") or {}
        namespace_labels = _namespace_labels(resources, namespace)
        policies = _selecting(resources, namespace, labels)
        for destination in needed_destinations(cloud, namespace_labels, labels):
            if not egress_allowed(policies, destination, namespace_labels):
                message = (
                    f"the NetworkPolicies of namespace {namespace} block {destination.what} "
                    f"({destination.protocol} {destination.port}), which its pods need"
                )
                yield resource.name, Problem(message, pod_key_path(resource, template))


# --- who reaches a gang's pods (policy.ingress) --------------------------------------------

MEMORY_TIER_NETWORK = "memory-tier-network"
GANG_NETWORK = "gang-network"
GANG_LABELS = {jobset.KIND: jobset.JOBSET_NAME_LABEL, "Job": kubernetes_job.JOB_NAME_LABEL}
"""The label the controller puts on every pod of one gang, and on no other pod: a JobSet's
(``catalog.jobset``), and a Job's, set by the API server since Kubernetes 1.27
(``catalog.kubernetes_job``)."""


def _pods(
    resources: list[PlannedResource], namespace: str, template: pod_templates.PodTemplate
) -> Pods:
    return Pods.of(template, _namespace_labels(resources, namespace))


def _selecting_pods(resources: list[PlannedResource], namespace: str, pods: Pods) -> Selecting:
    return Selecting.of(_policies_in(resources, namespace), pods)


def replica_ports_confined(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """A JobSet's or Job's container that keeps a memory tier serves its peers' replicas on
    ``REPLICA_PORT``: only the gang's own pods may reach it. A policy is not the whole
    defence: traffic to and from the node a pod runs on is always allowed, and what a
    policy does for pods on the host network is the plugin's to decide (the page cited at
    the top), so the server checks every request itself (``runtime.storage.replica_auth``)."""
    tier, port_name = settings.MEMORY_TIER_DIR.name, settings.REPLICA_PORT.name
    for resource, namespace, template in _workloads(resources):
        kind = str(resource.inputs.get("kind"))
        name = str((resource.inputs.get("metadata") or {}).get("name", ""))
        if kind not in GANG_LABELS:
            continue
        gang = (GANG_LABELS[kind], name)
        pods = _pods(resources, namespace, template)
        named = named_ports(template.spec)
        for container in template.spec.get("containers") or []:
            env = {str(v.get("name")): v for v in container.get("env") or []}
            if tier not in env:
                continue
            at = pod_key_path(resource, template, "resources.limits", container)
            raw = (env.get(port_name) or {}).get("value", str(settings.REPLICA_PORT.default))
            port = int(raw) if str(raw).isdigit() else 0
            selecting = _selecting_pods(resources, namespace, pods)
            if port and not gang_admitted(selecting, port, pods, named):
                ranged = gang_admitted(selecting, port, pods, named, whole_range=True)
                message = (
                    f"{kind} {namespace}/{name}: container {container.get('name')} serves its "
                    f"memory tier's replicas on TCP {port} ({port_name}), and no NetworkPolicy "
                    f"of namespace {namespace} admits the gang's own pods there"
                    + (
                        " (a rule admits them through a port range that holds it, which "
                        "Cilium narrows to its first port)"
                        if ranged
                        else ""
                    )
                    + ": its peers cannot send it replicas; fix: a NetworkPolicy that selects "
                    "the gang's pods "
                    f"and admits TCP {port} from pods labelled {gang[0]}={name} "
                    "(TrainingJob(recovery=GangRecovery.REPLACE_RANK) renders one)"
                )
                yield resource.name, Problem(message, at)
            admitted = outsiders_admitted(selecting, port, gang, namespace, named)
            if admitted:
                where = f"TCP {port}" if port else "a port of its choosing (REPLICA_PORT=0)"
                message = (
                    f"{kind} {namespace}/{name}: container {container.get('name')} serves its "
                    f"memory tier's replicas on {where} ({port_name}), and the NetworkPolicies "
                    f"of namespace {namespace} admit {'; '.join(admitted)} there: only the "
                    "gang's secret then keeps everything else out, and NetworkPolicies add up, "
                    "so a narrower one cannot take back what another admits; fix: run the gang "
                    f"where every NetworkPolicy that selects its pods admits that port only from "
                    f"pods labelled {gang[0]}={name} (spotproof's workload namespace leaves "
                    f"pods labelled {GANG_NETWORK_LABEL} to such a policy of their gang's)"
                )
                yield resource.name, Problem(message, at)


def _gangs(
    resources: list[PlannedResource],
) -> Iterator[tuple[PlannedResource, str, list[pod_templates.PodTemplate]]]:
    """Every gang of more than one pod, with its namespace and pod templates: each JobSet
    (``catalog.jobset``: one run on several nodes), and each Job whose pods carry
    ``GANG_NETWORK_LABEL`` (a Job's pods may as well be workers that never talk)."""
    grouped: dict[str, tuple[PlannedResource, str, list[pod_templates.PodTemplate]]] = {}
    for resource, namespace, template in _workloads(resources):
        grouped.setdefault(resource.urn, (resource, namespace, []))[2].append(template)
    for resource, namespace, templates in grouped.values():
        kind = resource.inputs.get("kind")
        labelled = any(GANG_NETWORK_LABEL in (t.metadata.get("labels") or {}) for t in templates)
        if sum(t.pods for t in templates) > 1 and (
            kind == jobset.KIND or (kind == "Job" and labelled)
        ):
            yield resource, namespace, templates


def gangs_reach_each_other(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """A gang's ranks rendezvous, and exchange gradients (NCCL, gloo) over connections to
    ports they pick themselves: every pod of a gang must admit every other on every TCP
    port, and, where a policy isolates its pods for egress, connect to every other on
    every TCP port, or the gang hangs at its first collective. Only a rule without ports
    allows them all, since Cilium ignores ``endPort`` (``policy.ingress.ports_admitted``)."""
    for resource, namespace, templates in _gangs(resources):
        kind = str(resource.inputs.get("kind"))
        name = str((resource.inputs.get("metadata") or {}).get("name", ""))
        gang_label = GANG_LABELS[kind]
        gang = [(template, _pods(resources, namespace, template)) for template in templates]
        for template, pods in gang:
            selecting = _selecting_pods(resources, namespace, pods)
            where = f"{kind} {namespace}/{name}" + (f"/{template.part}" if template.part else "")
            where += _left_out(resources, namespace, pods)
            for peer, peer_pods in gang:
                if peer is template and template.pods < 2:
                    continue
                ours = peer is template
                judged = (
                    (
                        ports_admitted(selecting, peer_pods),
                        "admit " + ("its pods to each other" if ours else f"pods of {peer.part}"),
                        "admits every port (a rule without ports) from",
                    ),
                    (
                        ports_allowed(selecting, peer_pods),
                        "let its pods connect "
                        + ("to each other" if ours else f"to pods of {peer.part}"),
                        "allows egress on every port (a rule without ports) to",
                    ),
                )
                for ports, what, fix in judged:
                    if ports is None:
                        continue
                    listed = f"only on {', '.join(ports)}" if ports else "on no port"
                    message = (
                        f"{where}: the NetworkPolicies of namespace {namespace} {what} {listed}, "
                        "but a gang's ranks exchange gradients (NCCL, gloo) on ports they pick "
                        "themselves, so it would hang at its first collective; allowed: a "
                        f"NetworkPolicy that selects the gang's pods and {fix} pods labelled "
                        f"{gang_label}={name}"
                    )
                    yield resource.name, Problem(message, pod_key_path(resource, template))


def _left_out(resources: list[PlannedResource], namespace: str, pods: Pods) -> str:
    """`` (labelled GANG_NETWORK_LABEL: out of NetworkPolicy …)`` where the label is what
    keeps a policy of the namespace from selecting ``pods`` (spotproof's
    ``allow-workload-ingress``, or a user's like it); else nothing."""
    if GANG_NETWORK_LABEL not in pods.labels:
        return ""
    without = {k: v for k, v in pods.labels.items() if k != GANG_NETWORK_LABEL}
    names = [
        name
        for name, spec in _named_policies_in(resources, namespace)
        if matches(spec.get("podSelector"), pods.labels, pods.unknown) is False
        and matches(spec.get("podSelector"), without, pods.unknown) is not False
    ]
    if not names:
        return ""
    which = "NetworkPolicy" if len(names) == 1 else "NetworkPolicies"
    return f" (labelled {GANG_NETWORK_LABEL}: out of {which} {', '.join(names)})"


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "namespace-isolated",
        "Workload namespaces deny traffic by default.",
        namespaces_isolated,
        scope=Scope(needs_stack=True),
    ),
    StackRule(
        "workload-egress",
        "Workloads can still reach DNS, each other, HTTPS and their identity endpoint.",
        workloads_reach_what_they_need,
        scope=Scope(needs_stack=True),
    ),
    StackRule(
        MEMORY_TIER_NETWORK,
        "A memory tier's replica port is reachable from the gang's own pods only.",
        replica_ports_confined,
        scope=Scope(needs_stack=True),
    ),
    StackRule(
        GANG_NETWORK,
        "A gang's pods admit each other on every port.",
        gangs_reach_each_other,
        scope=Scope(needs_stack=True),
    ),
)
