"""NetworkPolicies that isolate a workload namespace: deny everything, then allow what
training and batch work need.

A policy selecting every pod with both policy types and no rules denies all traffic to
and from them; further policies only add what they allow
(https://kubernetes.io/docs/concepts/services-networking/network-policies/). What a
trainer or a batch worker needs:

- **each other**, any port: the ranks of a gang meet at ``MASTER_ADDR:MASTER_PORT`` and
  exchange gradients over connections of their own;
- **DNS**: the cluster DNS pods (``k8s-app: kube-dns`` in ``kube-system``, the namespace
  found by its ``kubernetes.io/metadata.name`` label, which Kubernetes sets on every
  namespace), UDP and TCP 53. GKE also answers DNS on the node, at NodeLocal DNSCache's
  ``169.254.20.10`` (on by default on Standard clusters from 1.34) and, with Cloud DNS, at
  the metadata server (``169.254.169.254``), both on the host network, where a pod
  selector cannot reach them;
- **HTTPS anywhere**: the object store, the queue's API and the identity provider's token
  endpoint sit behind public names on changing addresses, which a NetworkPolicy cannot
  name (it has no DNS names);
- **the node's identity endpoint**, on the host network too:
  GKE's metadata server for Workload Identity, ``169.254.169.254`` port 80 with Dataplane
  V2 and ``169.254.169.252`` port 988 otherwise ("About Workload Identity Federation for
  GKE", https://cloud.google.com/kubernetes-engine/docs/concepts/workload-identity);
  the EKS Pod Identity agent, ``169.254.170.23`` port 80, which pods call for credentials
  (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-how-it-works.html). AKS
  workload identity needs none: the token is a projected file, exchanged over HTTPS.

Nothing may connect *into* the namespace from outside it, and within it nothing may reach
:data:`GANG_ONLY_PORTS` (a memory tier's replica server, torchrun's rendezvous store): those
only a gang's own pods may reach, by a policy of the gang's (:func:`gang_traffic`). Policies
add up, so the namespace's own rule must leave those ports out for a narrower one to mean
anything (``policy.network_policies``, ``memory-tier-network``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.catalog import Cloud
from spotproof.catalog.node_endpoints import HOST_DNS, IDENTITY_ENDPOINTS
from spotproof.runtime import settings
from spotproof.runtime.elastic import RENDEZVOUS_STORE_PORT

DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
EVERYWHERE = "0.0.0.0/0"
GANG_ONLY_PORTS = (settings.REPLICA_PORT.default, RENDEZVOUS_STORE_PORT)
"""TCP ports no pod of a namespace reaches merely by being there: a memory tier's replica
server and the ``c10d`` rendezvous store of a gang whose ranks are replaced one at a time."""


def _ports_but(closed: tuple[int, ...]) -> list[dict[str, Any]]:
    """Every port of every protocol but TCP ``closed``: TCP as ranges (``endPort``), UDP and
    SCTP whole (a port entry with no ``port`` matches them all, the page cited above)."""
    ranges, start = [], 1
    for port in sorted(set(closed)):
        if port > start:
            ranges.append((start, port - 1))
        start = port + 1
    ranges.append((start, 65535))
    tcp = [
        {"protocol": "TCP", "port": low, **({"endPort": high} if high > low else {})}
        for low, high in ranges
    ]
    return [*tcp, {"protocol": "UDP"}, {"protocol": "SCTP"}]


def gang_traffic(gang: Mapping[str, str], ports: tuple[int, ...]) -> dict[str, Any]:
    """The ``spec`` of a policy that admits TCP ``ports`` of the pods labelled ``gang`` from
    those pods alone."""
    selector = {"matchLabels": dict(gang)}
    return {
        "podSelector": selector,
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"podSelector": selector}],
                "ports": [{"protocol": "TCP", "port": port} for port in ports],
            }
        ],
    }


def _to(cidr: str) -> dict[str, Any]:
    return {"ipBlock": {"cidr": cidr}}


def allowed_traffic(cloud: Cloud, pods: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``spec`` of the policy that allows what workloads need (see the module): for
    every pod of the namespace, or with ``pods`` (labels) for those pods alone, which then
    reach and admit only each other there (one job in a namespace that is not spotproof's,
    beside whatever else runs in it)."""
    selector = {"matchLabels": dict(pods)} if pods else {}
    same_namespace = {"podSelector": selector}
    cluster_dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    egress: list[dict[str, Any]] = [
        {"to": [same_namespace]},
        {"to": [cluster_dns, *(_to(cidr) for cidr in HOST_DNS[cloud])], "ports": DNS_PORTS},
        {"to": [_to(EVERYWHERE)], "ports": [{"protocol": "TCP", "port": 443}]},
        *(
            {"to": [_to(cidr)], "ports": [{"protocol": "TCP", "port": port}]}
            for cidr, port in IDENTITY_ENDPOINTS[cloud]
        ),
    ]
    return {
        "podSelector": selector,
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [same_namespace], "ports": _ports_but(GANG_ONLY_PORTS)}],
        "egress": egress,
    }


DENY_ALL = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def isolate_namespace(
    name: str,
    namespace: pulumi.Input[str],
    cloud: Cloud,
    labels: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> list[k8s.networking.v1.NetworkPolicy]:
    """``default-deny`` and ``allow-workload-traffic`` in ``namespace``."""
    return [
        k8s.networking.v1.NetworkPolicy(
            f"{name}-{policy_name}",
            metadata={"name": policy_name, "namespace": namespace, "labels": labels},
            spec=spec,
            opts=opts,
        )
        for policy_name, spec in (
            ("default-deny", DENY_ALL),
            ("allow-workload-traffic", allowed_traffic(cloud)),
        )
    ]
