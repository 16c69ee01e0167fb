"""What the NetworkPolicies selecting a pod admit to it, and from whom: the ingress half
of the semantics ``policy.network_policies`` judges a stack's pods by.

A pod no policy isolates for ingress (none selecting it lists ``Ingress`` in its
``policyTypes``, or omits them, which means ``Ingress``) accepts every connection; once
isolated, it accepts what some selecting policy's ingress rule admits, policies adding up,
so no policy takes back what another admits. A rule with no ``from`` admits every source
and one with no ``ports`` every port; a peer with only a ``podSelector`` is a pod of the
policy's own namespace; a port without a protocol is TCP; a named port is the port of that
name on the pod the policy admits to
(https://kubernetes.io/docs/concepts/services-networking/network-policies/).

The pods of a template carry labels whose value is not known for each of them before they
run (``PodTemplate.unknown_labels``: a uid, a child Job's index): a selector on one of
those may select them all, some or none (:func:`matches`). Each question below is then
answered on the side that cannot report what is not so: what a gang's pods need counts as
admitted (and a pod as isolated only by a policy that surely selects it), what outsiders
reach only where it surely is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import jobset, kubernetes_job
from spotproof.catalog.labels import NAMESPACE_NAME_LABEL
from spotproof.policy.disruption import matches
from spotproof.scheduling import pod_templates


@dataclass(frozen=True)
class Pods:
    """The pods of one template, as a NetworkPolicy's selectors see them."""

    labels: Mapping[str, str]
    """Every label they carry whose value is known for each (``PodTemplate.metadata``)."""
    namespace_labels: Mapping[str, str]
    """Every label of their namespace, its name label included."""
    unknown: frozenset[str] = frozenset()
    """The labels they carry whose value is not (``PodTemplate.unknown_labels``)."""

    @classmethod
    def of(cls, template: pod_templates.PodTemplate, namespace_labels: Mapping[str, str]) -> Pods:
        labels = template.metadata.get("labels") or {}
        return cls(labels, namespace_labels, template.unknown_labels)


@dataclass(frozen=True)
class Selecting:
    """The NetworkPolicies of a pod's namespace that select it: ``surely`` those that
    select every pod of its template, ``maybe`` those whose selector depends on a label
    whose value is not known (:func:`matches`)."""

    surely: tuple[Mapping[str, Any], ...]
    maybe: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, policies: list[Mapping[str, Any]], pods: Pods) -> Selecting:
        """Those of ``policies`` (specs of the pods' namespace) that select ``pods``."""
        judged = [(p, matches(p.get("podSelector"), pods.labels, pods.unknown)) for p in policies]
        return cls(
            tuple(p for p, selected in judged if selected is True),
            tuple(p for p, selected in judged if selected is None),
        )

    @property
    def every(self) -> tuple[Mapping[str, Any], ...]:
        return self.surely + self.maybe


def named_ports(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """The TCP ports a pod's containers declare by name: name -> number."""
    return {
        str(port["name"]): port["containerPort"]
        for container in pod_templates.containers(pod_spec)
        for port in container.get("ports") or []
        if port.get("name")
        and port.get("protocol", "TCP") == "TCP"
        and isinstance(port.get("containerPort"), int)
    }


def _isolating(policies: tuple[Mapping[str, Any], ...]) -> list[Mapping[str, Any]]:
    """Those of ``policies`` that isolate the pods they select for ingress."""
    return [p for p in policies if "Ingress" in (p.get("policyTypes") or ["Ingress"])]


def _egress_isolating(policies: tuple[Mapping[str, Any], ...]) -> list[Mapping[str, Any]]:
    """Those of ``policies`` that isolate the pods they select for egress: ``Egress`` in
    their ``policyTypes``, or, without ``policyTypes``, an egress rule (the page cited at
    the top)."""
    return [
        p
        for p in policies
        if "Egress" in (p.get("policyTypes") or (["Ingress", "Egress"] if p.get("egress") else []))
    ]


def _reaches(peer: Mapping[str, Any], pods: Pods) -> bool:
    """Whether a rule's peer (``from`` or ``to``) may be ``pods``, of the policy's own
    namespace: a selector on a label whose value is not known may (:func:`matches`)."""
    if peer.get("ipBlock") is not None:
        return False  # pod addresses change with every replacement
    namespaces = peer.get("namespaceSelector")
    if namespaces is not None and not matches(namespaces, pods.namespace_labels):
        return False
    return matches(peer.get("podSelector"), pods.labels, pods.unknown) is not False


def _rules_from(policies: list[Mapping[str, Any]], pods: Pods) -> Iterator[Mapping[str, Any]]:
    """The ingress rules of ``policies`` that may admit some port from ``pods``."""
    for policy in policies:
        for rule in policy.get("ingress") or []:
            peers = rule.get("from") or []
            if not peers or any(_reaches(peer, pods) for peer in peers):
                yield rule


def _rules_to(policies: list[Mapping[str, Any]], pods: Pods) -> Iterator[Mapping[str, Any]]:
    """The egress rules of ``policies`` that may allow some port of ``pods``."""
    for policy in policies:
        for rule in policy.get("egress") or []:
            peers = rule.get("to") or []
            if not peers or any(_reaches(peer, pods) for peer in peers):
                yield rule


def _admits_port(
    rule: Mapping[str, Any], port: int, named: Mapping[str, int], *, whole_range: bool
) -> bool:
    """Whether an ingress rule admits TCP ``port`` (0: any port the server may pick) of a
    pod whose containers declare the TCP ports ``named`` (:func:`named_ports`). A range
    (``endPort``) admits its first port alone unless ``whole_range``: Cilium (GKE Dataplane
    V2, AKS) accepts ``endPort`` and ignores it (cilium/cilium#28684), while plugins that
    honour it (Calico, the EKS VPC CNI) admit the whole range."""
    ports = rule.get("ports")
    if not ports:
        return True
    for spec in ports:
        number = spec.get("port")
        if spec.get("protocol", "TCP") != "TCP":
            continue
        if port == 0 or number is None:
            return True
        if isinstance(number, str):
            if named.get(number) == port:
                return True
        elif number <= port <= (spec.get("endPort", number) if whole_range else number):
            return True
    return False


# --- one port: a memory tier's replica port --------------------------------------------------


def gang_admitted(
    selecting: Selecting,
    port: int,
    peer: Pods,
    named: Mapping[str, int],
    *,
    whole_range: bool = False,
) -> bool:
    """Whether the policies ``selecting`` a pod (whose containers declare the TCP ports
    ``named``) may admit its TCP ``port`` from ``peer`` (the gang's pods): always when none
    surely isolates it for ingress, else when some rule admitting that port may admit them.
    A range admits its first port alone unless ``whole_range`` (:func:`_admits_port`): the
    peers must reach it on every plugin."""
    if not _isolating(selecting.surely):
        return True
    return any(
        _admits_port(rule, port, named, whole_range=whole_range)
        for rule in _rules_from(_isolating(selecting.every), peer)
    )


def outsiders_admitted(
    selecting: Selecting,
    port: int,
    gang: tuple[str, str],
    namespace: str,
    named: Mapping[str, int],
) -> list[str]:
    """What, besides the gang's own pods (those labelled ``gang``), the policies
    ``selecting`` a pod (whose containers declare the TCP ports ``named``) surely admit to
    its TCP ``port``; empty when only the gang reaches it. A range admits all its ports
    here: some plugins honour it."""
    if not _isolating(selecting.every):
        return ["every source: no NetworkPolicy isolates its pods for ingress"]
    found: list[str] = []
    for policy in _isolating(selecting.surely):
        for rule in policy.get("ingress") or []:
            if not _admits_port(rule, port, named, whole_range=True):
                continue
            peers = rule.get("from") or []
            if not peers:
                found.append("every source")
            found += [_describe(peer) for peer in peers if not _gang_only(peer, gang, namespace)]
    return found


UID_LABELS = (
    jobset.JOBSET_UID_LABEL,
    kubernetes_job.CONTROLLER_UID_LABEL,
    kubernetes_job.LEGACY_CONTROLLER_UID_LABEL,
)
"""Labels holding the uid of a pod's JobSet or Job: a selector on one value of them selects
the pods of one JobSet or Job, the gang's own or another's, which is not known here."""


def _gang_only(peer: Mapping[str, Any], gang: tuple[str, str], namespace: str) -> bool:
    """Whether an ingress peer may be the gang's own pods and nothing else: a pod selector
    that requires the gang's label, or one value of a uid label (:data:`UID_LABELS`), in
    the policy's own namespace (no ``ipBlock``, which pod addresses are reused from, and no
    other namespace)."""
    if peer.get("ipBlock") is not None:
        return False
    namespaces = peer.get("namespaceSelector")
    if namespaces is not None and namespaces != {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}:
        return False
    pods = peer.get("podSelector")
    return _requires(pods, *gang) or any(_requires(pods, key, None) for key in UID_LABELS)


def _requires(selector: Mapping[str, Any] | None, key: str, value: str | None) -> bool:
    """Whether ``selector`` matches only pods whose label ``key`` is ``value`` (None: one
    value, whichever)."""
    selector = selector or {}
    labels = selector.get("matchLabels") or {}
    if key in labels and (value is None or labels[key] == value):
        return True
    return any(
        e.get("key") == key
        and e.get("operator") == "In"
        and len(e.get("values") or []) == 1
        and (value is None or list(e["values"]) == [value])
        for e in selector.get("matchExpressions") or []
    )


def _describe(peer: Mapping[str, Any]) -> str:
    if peer.get("ipBlock") is not None:
        return f"ipBlock {peer['ipBlock'].get('cidr')}"
    pods = peer.get("podSelector") or {}
    who = f"pods matching {json.dumps(pods, sort_keys=True)}" if pods else "every pod"
    namespaces = peer.get("namespaceSelector")
    if namespaces is None:
        return f"{who} of the namespace"
    return f"{who} of namespaces matching {json.dumps(namespaces, sort_keys=True)}"


# --- every port: a gang's ranks ---------------------------------------------------------------


def ports_admitted(selecting: Selecting, peer: Pods) -> list[str] | None:
    """What the policies ``selecting`` a pod may admit of it from ``peer``: None for every
    TCP port (none surely isolates it for ingress, or a rule that may admit ``peer`` lists
    no port), else each port admitted, in words (empty: none)."""
    if not _isolating(selecting.surely):
        return None
    return _ports(_rules_from(_isolating(selecting.every), peer))


def ports_allowed(selecting: Selecting, peer: Pods) -> list[str] | None:
    """What the policies ``selecting`` a pod may let it connect to on ``peer``, as
    :func:`ports_admitted` for egress."""
    if not _egress_isolating(selecting.surely):
        return None
    return _ports(_rules_to(_egress_isolating(selecting.every), peer))


def _ports(rules: Iterator[Mapping[str, Any]]) -> list[str] | None:
    found: list[str] = []
    for rule in rules:
        if _every_port(rule):
            return None
        found += [w for w in map(_port_words, rule["ports"]) if w not in found]
    return found


def _every_port(rule: Mapping[str, Any]) -> bool:
    """Whether a rule admits every TCP port: no ``ports``, or a TCP entry without a
    ``port``. A range does not count, whatever it spans: Cilium (GKE Dataplane V2, AKS)
    accepts ``endPort`` and ignores it, admitting the first port alone (cilium/cilium#28684;
    the Kubernetes page: a plugin without ``endPort`` support applies ``port`` alone)."""
    ports = rule.get("ports")
    return not ports or any(
        p.get("protocol", "TCP") == "TCP" and p.get("port") is None for p in ports
    )


def _port_words(port: Mapping[str, Any]) -> str:
    protocol, number, end = port.get("protocol", "TCP"), port.get("port"), port.get("endPort")
    if number is None:
        return f"{protocol} (every port)"
    if end is not None:
        return f"{protocol} {number}-{end} (a range, which Cilium narrows to {number})"
    return f"{protocol} port named {number}" if isinstance(number, str) else f"{protocol} {number}"
