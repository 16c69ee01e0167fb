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
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.catalog.labels import NAMESPACE_NAME_LABEL
from spotproof.policy.disruption import selects
from spotproof.scheduling import pod_templates


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


def _isolating(policies: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Those of ``policies`` that isolate the pods they select for ingress."""
    return [p for p in policies if "Ingress" in (p.get("policyTypes") or ["Ingress"])]


def _admits_peer(peer: Mapping[str, Any], labels: Mapping[str, str], namespace: str) -> bool:
    if peer.get("ipBlock") is not None:
        return False  # pod addresses change with every replacement
    namespaces = peer.get("namespaceSelector")
    if namespaces is not None and not selects(namespaces, {NAMESPACE_NAME_LABEL: namespace}):
        return False
    return selects(peer.get("podSelector"), labels)


def _rules_from(
    policies: list[Mapping[str, Any]], labels: Mapping[str, str], namespace: str
) -> Iterator[Mapping[str, Any]]:
    """The ingress rules of ``policies`` that admit some port from a pod labelled
    ``labels`` of ``namespace``."""
    for policy in policies:
        for rule in policy.get("ingress") or []:
            peers = rule.get("from") or []
            if not peers or any(_admits_peer(peer, labels, namespace) for peer in peers):
                yield rule


def _admits_port(rule: Mapping[str, Any], port: int, named: Mapping[str, int]) -> bool:
    """Whether an ingress rule admits TCP ``port`` (0: any port the server may pick) of a
    pod whose containers declare the TCP ports ``named`` (:func:`named_ports`)."""
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
        elif number <= port <= spec.get("endPort", number):
            return True
    return False


# --- one port: a memory tier's replica port --------------------------------------------------


def gang_admitted(
    policies: list[Mapping[str, Any]],
    port: int,
    labels: Mapping[str, str],
    namespace: str,
    named: Mapping[str, int],
) -> bool:
    """Whether the ``policies`` selecting a pod (whose containers declare the TCP ports
    ``named``) admit its TCP ``port`` from a pod labelled ``labels`` of ``namespace`` (a
    peer of its gang): always when none isolates it for ingress, else when some rule
    admitting that port has a peer matching such a pod."""
    ingress = _isolating(policies)
    return not ingress or any(
        _admits_port(rule, port, named) for rule in _rules_from(ingress, labels, namespace)
    )


def outsiders_admitted(
    policies: list[Mapping[str, Any]],
    port: int,
    gang: tuple[str, str],
    namespace: str,
    named: Mapping[str, int],
) -> list[str]:
    """What, besides the gang's own pods (those labelled ``gang``), the ``policies``
    selecting a pod (whose containers declare the TCP ports ``named``) admit to its TCP
    ``port``; empty when only the gang reaches it."""
    ingress = _isolating(policies)
    if not ingress:
        return ["every source: no NetworkPolicy isolates its pods for ingress"]
    found: list[str] = []
    for policy in ingress:
        for rule in policy.get("ingress") or []:
            if not _admits_port(rule, port, named):
                continue
            peers = rule.get("from") or []
            if not peers:
                found.append("every source")
            found += [_describe(peer) for peer in peers if not _gang_only(peer, gang, namespace)]
    return found


def _gang_only(peer: Mapping[str, Any], gang: tuple[str, str], namespace: str) -> bool:
    """Whether an ingress peer is the gang's own pods and nothing else: a pod selector
    that requires the gang's label, in the policy's own namespace (no ``ipBlock``, which
    pod addresses are reused from, and no other namespace)."""
    if peer.get("ipBlock") is not None:
        return False
    namespaces = peer.get("namespaceSelector")
    if namespaces is not None and namespaces != {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}:
        return False
    return _requires(peer.get("podSelector"), *gang)


def _requires(selector: Mapping[str, Any] | None, key: str, value: str) -> bool:
    """Whether ``selector`` matches only pods whose label ``key`` is ``value``."""
    selector = selector or {}
    if (selector.get("matchLabels") or {}).get(key) == value:
        return True
    return any(
        e.get("key") == key and e.get("operator") == "In" and list(e.get("values") or []) == [value]
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


def ports_admitted(
    policies: list[Mapping[str, Any]], labels: Mapping[str, str], namespace: str
) -> list[str] | None:
    """What the ``policies`` selecting a pod admit of it from a pod labelled ``labels`` of
    ``namespace``: None for every TCP port (no policy isolates it for ingress, or a rule
    admitting that pod lists no port), else each port admitted, in words (empty: none)."""
    ingress = _isolating(policies)
    if not ingress:
        return None
    found: list[str] = []
    for rule in _rules_from(ingress, labels, namespace):
        if _every_port(rule):
            return None
        found += [w for w in map(_port_words, rule["ports"]) if w not in found]
    return found


def _every_port(rule: Mapping[str, Any]) -> bool:
    """Whether an ingress rule admits every TCP port: no ``ports``, or a TCP entry without
    a ``port``. A range does not count, whatever it spans: Cilium (GKE Dataplane V2, AKS)
    accepts ``endPort`` and ignores it, admitting the first port alone (cilium/cilium#28684;
    the Kubernetes page: a plugin without ``endPort`` support applies ``port`` alone)."""
    ports = rule.get("ports")
    return not ports or any(
        p.get("protocol", "TCP") == "TCP" and p.get("port") is None for p in ports
    )


def _port_words(port: Mapping[str, Any]) -> str:
    protocol, number, end = port.get("protocol", "TCP"), port.get("port"), port.get("endPort")
    if end is not None:
        return f"{protocol} {number}-{end} (a range, which Cilium narrows to {number})"
    return f"{protocol} port named {number}" if isinstance(number, str) else f"{protocol} {number}"
