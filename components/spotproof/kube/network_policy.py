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

Nothing may connect *into* the namespace from outside it (but a stack's metrics collector,
to the ``metrics`` port alone, by a policy of its monitoring's: ``gke.monitoring``,
``eks.monitoring``, ``aks.monitoring``). Within it, who may connect to a pod depends on
whether it carries :data:`~spotproof.catalog.labels.GANG_NETWORK_LABEL`:

- a pod of a gang that keeps a memory tier (``TrainingJob(recovery=GangRecovery.
  REPLACE_RANK)``, ``kube.replace_rank``) carries it, and only its own gang's pods reach
  it (:func:`gang_traffic`), on every port: its replica server and ``c10d`` rendezvous
  store are for the gang alone, and its ranks exchange gradients (NCCL, gloo) on ports
  they pick themselves, so the gang's policy lists no ports;
- every other pod is reached from every pod of the namespace, on every port.

Hence two allow policies: ``allow-workload-egress`` (every pod: the egress above) and
``allow-workload-ingress`` (the pods *without* the label, a ``DoesNotExist`` expression:
ingress from the namespace). Policies add up (the page above), so a gang's pods must be
left out of the namespace's ingress rule; a narrower policy of their own could not take
back what that rule admits. Leaving only the gang's ports out of the namespace's rule
instead would take port ranges (``endPort``), which Cilium, the dataplane of GKE's
Dataplane V2 and of the AKS clusters spotproof builds, accepts and silently ignores,
keeping only the first port of each range (cilium/cilium#28684; the Kubernetes page: a
plugin without ``endPort`` support applies the rule to ``port`` alone), which would cut
every workload off from every other. A label selector needs no ports at all. The replica
server still checks every request (``runtime.storage.replica_auth``): a policy binds
neither the node nor pods on its host network.

A stack deployed before this split has one ``allow-workload-traffic`` policy instead. The
two that replace it have new names, hence new URNs: Pulumi creates them first and deletes
a resource the program no longer registers only at the end of the update
(https://www.pulumi.com/docs/iac/concepts/how-pulumi-works/), so the namespace is never
without its allow rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.catalog import Cloud
from spotproof.catalog.labels import GANG_NETWORK_LABEL, NAMESPACE_NAME_LABEL
from spotproof.catalog.node_endpoints import HOST_DNS, IDENTITY_ENDPOINTS

DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
EVERYWHERE = "0.0.0.0/0"


def gang_traffic(gang: Mapping[str, str]) -> dict[str, Any]:
    """The ``spec`` of a policy that admits every port of the pods labelled ``gang`` from
    those pods alone (see the module for why every port)."""
    selector = {"matchLabels": dict(gang)}
    return {
        "podSelector": selector,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": selector}]}],
    }


def _to(cidr: str) -> dict[str, Any]:
    return {"ipBlock": {"cidr": cidr}}


def _egress(cloud: Cloud, peers: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The egress rules of the module: ``peers`` (the pods of the namespace it reaches),
    DNS, HTTPS anywhere and the node's identity endpoint."""
    cluster_dns = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    return [
        {"to": [dict(peers)]},
        {"to": [cluster_dns, *(_to(cidr) for cidr in HOST_DNS[cloud])], "ports": DNS_PORTS},
        {"to": [_to(EVERYWHERE)], "ports": [{"protocol": "TCP", "port": 443}]},
        *(
            {"to": [_to(cidr)], "ports": [{"protocol": "TCP", "port": port}]}
            for cidr, port in IDENTITY_ENDPOINTS[cloud]
        ),
    ]


def allowed_egress(cloud: Cloud, pods: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``spec`` of the policy that lets workloads reach what they need (see the
    module): every pod of the namespace, or with ``pods`` (labels) those pods alone, which
    then reach only each other there."""
    selector = {"matchLabels": dict(pods)} if pods else {}
    return {
        "podSelector": selector,
        "policyTypes": ["Egress"],
        "egress": _egress(cloud, {"podSelector": selector}),
    }


def allowed_ingress() -> dict[str, Any]:
    """The ``spec`` of the policy that admits every pod of the namespace, on every port, to
    every pod of it but a gang's own (:data:`GANG_NETWORK_LABEL`, see the module)."""
    return {
        "podSelector": {
            "matchExpressions": [{"key": GANG_NETWORK_LABEL, "operator": "DoesNotExist"}]
        },
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
    }


def allowed_traffic(cloud: Cloud, pods: Mapping[str, str]) -> dict[str, Any]:
    """The ``spec`` of one policy that isolates the pods labelled ``pods`` alone: they
    reach what :func:`allowed_egress` allows and admit only each other, on every port
    (one job in a namespace that is not spotproof's, beside whatever else runs in it)."""
    selector = {"matchLabels": dict(pods)}
    return {
        **allowed_egress(cloud, pods),
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": selector}]}],
    }


DENY_ALL = {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def isolate_namespace(
    name: str,
    namespace: pulumi.Input[str],
    cloud: Cloud,
    labels: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> list[k8s.networking.v1.NetworkPolicy]:
    """``default-deny``, ``allow-workload-egress`` and ``allow-workload-ingress`` in
    ``namespace``."""
    return [
        k8s.networking.v1.NetworkPolicy(
            f"{name}-{policy_name}",
            metadata={"name": policy_name, "namespace": namespace, "labels": labels},
            spec=spec,
            opts=opts,
        )
        for policy_name, spec in (
            ("default-deny", DENY_ALL),
            ("allow-workload-egress", allowed_egress(cloud)),
            ("allow-workload-ingress", allowed_ingress()),
        )
    ]
