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

Nothing may connect *into* the namespace from outside it. Within it every pod may reach
every other on every port, a gang's replica and rendezvous ports (:data:`GANG_ONLY_PORTS`)
included: leaving those out of the namespace's rule would take port ranges (``endPort``),
which Cilium, the dataplane of GKE's Dataplane V2 and of AKS clusters spotproof builds,
accepts and silently ignores, keeping only the first port of each range
(cilium/cilium#28684; the Kubernetes page: a plugin without ``endPort`` support applies
the rule to ``port`` alone), which would cut every workload off from every other. A
gang's own policy (:func:`gang_traffic`) admits those ports from its pods; keeping the
rest of the namespace out of them needs the namespace's ingress rule to leave the gang's
pods out, which is not built yet, so the replica server's signed requests
(``runtime.storage.replica_auth``) are what keeps the namespace's other pods out, and
``spotproof plan`` says so (``policy.network_policies``, ``memory-tier-network``).
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
"""The TCP ports a gang's own policy (:func:`gang_traffic`) admits from its pods: a memory
tier's replica server and the ``c10d`` rendezvous store of a gang whose ranks are replaced
one at a time."""


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
        "ingress": [{"from": [same_namespace]}],
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
