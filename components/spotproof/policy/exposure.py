"""What of a stack the internet can reach: the Kubernetes API and the nodes' addresses.

Each cloud opens both unless told otherwise: GKE gives nodes external IPs and the API a
public endpoint for any address, EKS opens the public endpoint to ``0.0.0.0/0``
(``publicAccessCidrs``' default), AKS's API server answers any address. A stack restricts
the API to named networks or makes it private (``spotproof:apiAccess``) and keeps nodes
on private addresses; these rules flag a stack, or a change to one, that re-opens either.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.policy.base import ResourceRule

GKE_CLUSTER = "gcp:container/cluster:Cluster"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
EC2_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
AKS_CLUSTER = "azure-native:containerservice:ManagedCluster"
AKS_AGENT_POOL = "azure-native:containerservice:AgentPool"
EVERYWHERE = "0.0.0.0/0"
FIX = "allowed: spotproof:apiAccess.authorizedNetworks (named CIDRs) or privateEndpoint: true"


def _open_ranges(cidrs: list[Any]) -> list[str]:
    """The ranges of ``cidrs`` that span the whole IPv4 internet (a /0, however written)."""
    found = []
    for cidr in cidrs:
        try:
            if ipaddress.ip_network(str(cidr), strict=False).prefixlen == 0:
                found.append(str(cidr))
        except ValueError:
            continue
    return found


def gke_api_restricted(inputs: Mapping[str, Any]) -> Iterator[str]:
    """A private endpoint needs the authorized-networks block too: without it the provider
    sends ``enabled: false`` (terraform-provider-google
    ``expandMasterAuthorizedNetworksConfig``) and GKE answers "Master authorized networks
    must be enabled if private endpoint is enabled" (GoogleCloudPlatform/magic-modules#8338);
    it also refuses Google Cloud's public ranges beside a private endpoint."""
    authorized = inputs.get("masterAuthorizedNetworksConfig")
    if (inputs.get("privateClusterConfig") or {}).get("enablePrivateEndpoint"):
        if authorized is None:
            yield (
                "a private endpoint without masterAuthorizedNetworksConfig is refused by GKE "
                "at pulumi up (the provider sends it disabled); allowed: the block, with "
                "gcpPublicCidrsAccessEnabled false"
            )
        elif authorized.get("gcpPublicCidrsAccessEnabled"):
            yield "GKE refuses gcpPublicCidrsAccessEnabled beside a private endpoint"
        return
    if not authorized:
        yield f"the API's public endpoint accepts every address; {FIX}"
        return
    blocks = [block.get("cidrBlock") for block in authorized.get("cidrBlocks") or []]
    if opened := _open_ranges(blocks):
        yield f"authorized network {opened[0]} opens the API to everyone; {FIX}"
    if authorized.get("gcpPublicCidrsAccessEnabled"):
        yield "gcpPublicCidrsAccessEnabled lets any Google Cloud VM of any project reach the API"


def gke_private_nodes(inputs: Mapping[str, Any]) -> Iterator[str]:
    if not (inputs.get("privateClusterConfig") or {}).get("enablePrivateNodes"):
        yield (
            "nodes get external IPs; allowed: privateClusterConfig.enablePrivateNodes true "
            "(they reach the internet through Cloud NAT)"
        )


def gke_pool_private(inputs: Mapping[str, Any]) -> Iterator[str]:
    if (inputs.get("networkConfig") or {}).get("enablePrivateNodes") is False:
        yield "networkConfig.enablePrivateNodes false gives this pool's nodes external IPs"


def eks_api_restricted(inputs: Mapping[str, Any]) -> Iterator[str]:
    vpc = inputs.get("vpcConfig") or {}
    if vpc.get("endpointPublicAccess") is False:
        return
    cidrs = vpc.get("publicAccessCidrs") or [EVERYWHERE]  # EKS's default when unset
    if opened := _open_ranges(cidrs):
        yield f"the API's public endpoint accepts {opened[0]}; {FIX}"


def eks_nodes_private(inputs: Mapping[str, Any]) -> Iterator[str]:
    """Unset, a node's public IP follows its subnet's ``MapPublicIpOnLaunch``, which the
    plan cannot see for subnets a stack names: only an explicit false is private."""
    value = (inputs.get("spec") or {}).get("associatePublicIPAddress")
    if value is True:
        yield "associatePublicIPAddress gives Karpenter's nodes public IPs; allowed: false"
    elif value is None:
        yield (
            "associatePublicIPAddress is unset, so a node in a public subnet gets a public IP; "
            "allowed: false"
        )


def aks_api_restricted(inputs: Mapping[str, Any]) -> Iterator[str]:
    profile = inputs.get("apiServerAccessProfile") or {}
    if profile.get("enablePrivateCluster"):
        return
    ranges = profile.get("authorizedIPRanges") or []
    if not ranges:
        yield f"the API server accepts every address; {FIX}"
    elif opened := _open_ranges(ranges):
        yield f"authorized range {opened[0]} opens the API to everyone; {FIX}"
    for pool in inputs.get("agentPoolProfiles") or []:
        if pool.get("enableNodePublicIP"):
            yield f"agent pool {pool.get('name')} gives each node a public IP"


def aks_pool_private(inputs: Mapping[str, Any]) -> Iterator[str]:
    if inputs.get("enableNodePublicIP"):
        yield "enableNodePublicIP gives each node of this pool a public IP"


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "gke-api-restricted",
        "The Kubernetes API is private or open to named networks only.",
        GKE_CLUSTER,
        gke_api_restricted,
    ),
    ResourceRule(
        "eks-api-restricted",
        "The Kubernetes API is private or open to named networks only.",
        EKS_CLUSTER,
        eks_api_restricted,
    ),
    ResourceRule(
        "aks-api-restricted",
        "The Kubernetes API is private or open to named networks only.",
        AKS_CLUSTER,
        aks_api_restricted,
    ),
    ResourceRule(
        "gke-private-nodes", "Nodes have no external IPs.", GKE_CLUSTER, gke_private_nodes
    ),
    ResourceRule(
        "gke-pool-private-nodes",
        "No pool overrides private nodes.",
        GKE_NODE_POOL,
        gke_pool_private,
    ),
    ResourceRule(
        "eks-nodes-private",
        "Karpenter's nodes get no public IPs.",
        EC2_NODE_CLASS,
        eks_nodes_private,
    ),
    ResourceRule(
        "aks-pool-private-nodes",
        "Agent pools give nodes no public IPs.",
        AKS_AGENT_POOL,
        aks_pool_private,
    ),
)
