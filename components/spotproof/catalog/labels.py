"""Labels the platforms put on nodes by themselves: modelled, never declared.

The plan's fit check needs them (a pod selecting ``cloud.google.com/gke-spot`` must find
it on a spot node), and workloads select on some of them; the pools cannot declare them
because the APIs reserve their prefixes.

One label here is spotproof's own, :data:`GANG_NETWORK_LABEL`: the components put it on
pods and the plan reads it, and this module is the one both import without Pulumi.
"""

from __future__ import annotations

OS_LABEL = "kubernetes.io/os"
"""The kubelet sets it on every node, to its operating system
(https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-os). Modelled
on GKE pools, which run GKE's default Linux image (no ``imageType``), and EKS managed node
groups, which run the EKS-optimized Amazon Linux AMI: kube-state-metrics selects on it."""
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GKE_FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
GKE_COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
"""The label a pod selects a GKE ComputeClass by, and the key of the NoSchedule taint a
pool spotproof creates for a class carries with it: GKE requires both on a node pool it
did not create before it uses the pool for the class
(https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes,
"manually created node pools"). Unlike GKE's other ``cloud.google.com/`` labels, a pool
declares this one itself."""

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Not a node label: the API server sets it on every namespace to its name (Kubernetes
1.22+: https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-metadata-name),
so a namespace selector can name one namespace."""

GANG_NETWORK_LABEL = "spotproof.dev/gang-network"
"""Pod label on every pod of a gang whose own NetworkPolicy admits its traffic
(``TrainingJob(recovery=GangRecovery.REPLACE_RANK)``, value :data:`GANG_NETWORK_ISOLATED`).
The workload namespace's ingress rule selects only pods without it (``DoesNotExist``,
whatever the value), so such a pod is reached from its own gang alone
(``kube.network_policy``); the plan's ``gang-network`` rule checks that its gang still
reaches it on every port."""
GANG_NETWORK_ISOLATED = "isolated"

KARPENTER_NODEPOOL_LABEL = "karpenter.sh/nodepool"
"""Karpenter puts it on every node it launches; nothing else carries it."""
KARPENTER_CAPACITY_LABEL = "karpenter.sh/capacity-type"
EKS_NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
EKS_CAPACITY_LABEL = "eks.amazonaws.com/capacityType"


def eks_injected_labels(node_group: str) -> dict[str, str]:
    """Labels EKS puts on a managed node group's nodes (ON_DEMAND: the system group)."""
    return {OS_LABEL: "linux", EKS_NODEGROUP_LABEL: node_group, EKS_CAPACITY_LABEL: "ON_DEMAND"}


def gke_injected_labels(
    pool_name: str, accelerator: str | None, *, spot: bool, flex_start: bool
) -> dict[str, str]:
    """Labels GKE puts on a node pool's nodes. They live under the reserved
    ``cloud.google.com/`` prefix, which the GKE API refuses in a pool's own labels, so they
    are modelled here rather than declared."""
    labels = {OS_LABEL: "linux", GKE_NODEPOOL_LABEL: pool_name}
    if accelerator:
        labels[GKE_ACCELERATOR_LABEL] = accelerator
    if spot:
        labels[GKE_SPOT_LABEL] = "true"
    if flex_start:
        labels[GKE_FLEX_START_LABEL] = "true"
    return labels
