"""What of a stack the internet can reach: the Kubernetes API only from the networks a
stack names (or not at all), nodes on private addresses behind NAT, a network of the
cluster's own, and NetworkPolicy enforced on every cloud."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.fleet import SpecError, fleet_from_config
from spotproof.plan import PlanResult, run_plan
from tests.support import stack_config

GKE_CLUSTER = "gcp:container/cluster:Cluster"


def _config(stack: str, **changes: Any) -> dict[str, Any]:
    config = stack_config(stack)
    for key, value in changes.items():
        if value is None:
            config.pop(f"spotproof:{key}", None)
        else:
            config[f"spotproof:{key}"] = value
    return config


@pytest.mark.parametrize(
    ("access", "says"),
    [
        (None, "spotproof:apiAccess = None: is required"),
        ({}, "names no network that may reach the API"),
        ({"authorizedNetworks": ["0.0.0.0/0"]}, "opens the API to the whole internet"),
        ({"authorizedNetworks": ["203.0.113.7/24"]}, "host bits set"),
        ({"authorizedNetworks": ["vpn"]}, "not an IPv4 network"),
        (
            {"authorizedNetworks": ["203.0.113.0/24"], "privateEndpoint": True},
            "has no effect without a public endpoint",
        ),
        ({"publicEndpoint": True}, "unknown field"),
    ],
)
def test_a_stack_must_say_who_may_reach_the_api_and_never_everyone(access: Any, says: str) -> None:
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", _config("gke-dev", apiAccess=access))
    assert says in str(raised.value) and "\n" not in str(raised.value)
    assert "allowed:" in str(raised.value)


def test_gke_network_ranges_must_not_overlap() -> None:
    config = _config("gke-dev", network={"servicesCidr": "10.16.0.0/20"})
    with pytest.raises(SpecError, match=r"servicesCidr = '10.16.0.0/20': overlaps .*podsCidr"):
        fleet_from_config("gke-dev", config)


def test_gke_api_answers_only_the_named_networks_not_google_clouds(gke_dev: PlanResult) -> None:
    cluster = gke_dev.recording.one(GKE_CLUSTER, "gke-dev").inputs
    assert cluster["masterAuthorizedNetworksConfig"] == {
        "cidrBlocks": [{"cidrBlock": "203.0.113.0/24", "displayName": "spotproof-0"}],
        "gcpPublicCidrsAccessEnabled": False,
    }
    assert cluster["privateClusterConfig"] == {
        "enablePrivateNodes": True,
        "enablePrivateEndpoint": False,
    }


def test_a_private_gke_endpoint_has_no_public_address_and_private_nodes(
    gke_prod: PlanResult,
) -> None:
    cluster = gke_prod.recording.one(GKE_CLUSTER, "gke-prod").inputs
    assert cluster["privateClusterConfig"] == {
        "enablePrivateNodes": True,
        "enablePrivateEndpoint": True,
    }
    assert "masterIpv4CidrBlock" not in cluster["privateClusterConfig"]  # PSC needs none


def test_gke_cluster_gets_a_network_of_its_own_with_nat_for_private_nodes(
    gke_dev: PlanResult,
) -> None:
    network = gke_dev.recording.one("gcp:compute/network:Network", "gke-dev-network-vpc")
    subnetwork = gke_dev.recording.one(
        "gcp:compute/subnetwork:Subnetwork", "gke-dev-network-nodes"
    ).inputs
    nat = gke_dev.recording.one("gcp:compute/routerNat:RouterNat", "gke-dev-network-nat").inputs
    cluster = gke_dev.recording.one(GKE_CLUSTER, "gke-dev").inputs
    assert network.inputs["autoCreateSubnetworks"] is False
    assert (subnetwork["ipCidrRange"], subnetwork["privateIpGoogleAccess"]) == (
        "10.10.0.0/20",
        True,
    )
    assert subnetwork["secondaryIpRanges"] == [
        {"rangeName": "pods", "ipCidrRange": "10.16.0.0/14"},
        {"rangeName": "services", "ipCidrRange": "10.20.0.0/20"},
    ]
    assert (nat["natIpAllocateOption"], nat["sourceSubnetworkIpRangesToNat"]) == (
        "AUTO_ONLY",
        "ALL_SUBNETWORKS_ALL_IP_RANGES",
    )
    assert cluster["network"] == "projects/spotproof-dev/global/networks/gke-dev"
    assert cluster["subnetwork"].endswith("/regions/us-central1/subnetworks/gke-dev-nodes")
    assert cluster["ipAllocationPolicy"] == {
        "clusterSecondaryRangeName": "pods",
        "servicesSecondaryRangeName": "services",
    }


def test_gke_enforces_network_policy_with_dataplane_v2_and_boots_nap_nodes_securely(
    gke_dev: PlanResult,
) -> None:
    cluster = gke_dev.recording.one(GKE_CLUSTER, "gke-dev").inputs
    assert cluster["datapathProvider"] == "ADVANCED_DATAPATH"
    assert "networkPolicy" not in cluster  # refused beside Dataplane V2
    defaults = cluster["clusterAutoscaling"]["autoProvisioningDefaults"]
    assert defaults["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableIntegrityMonitoring": True,
    }


def test_eks_public_endpoint_answers_only_the_named_networks(eks_dev: PlanResult) -> None:
    vpc = eks_dev.recording.one("aws:eks/cluster:Cluster", "eks-dev").inputs["vpcConfig"]
    assert (vpc["endpointPublicAccess"], vpc["endpointPrivateAccess"]) == (True, True)
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_a_private_eks_endpoint_is_reachable_inside_the_vpc_only(eks_prod: PlanResult) -> None:
    vpc = eks_prod.recording.one("aws:eks/cluster:Cluster", "eks-prod").inputs["vpcConfig"]
    assert (vpc["endpointPublicAccess"], vpc["endpointPrivateAccess"]) == (False, True)
    assert "publicAccessCidrs" not in vpc


def test_eks_vpc_cni_enforces_network_policy(eks_dev: PlanResult) -> None:
    addon = eks_dev.recording.one("aws:eks/addon:Addon", "eks-dev-vpc-cni").inputs
    assert addon["addonName"] == "vpc-cni"
    assert addon["configurationValues"] == '{"enableNetworkPolicy": "true"}'


def test_aks_api_server_answers_only_the_named_ranges(aks_dev: PlanResult) -> None:
    cluster = aks_dev.recording.one(
        "azure-native:containerservice:ManagedCluster", "aks-dev"
    ).inputs
    assert cluster["apiServerAccessProfile"] == {"authorizedIPRanges": ["203.0.113.0/24"]}
    assert cluster["networkProfile"]["networkPolicy"] == "cilium"


def test_a_private_aks_cluster_has_no_public_api_server(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("aks-prod")
    config["spotproof:apiAccess"] = {"privateEndpoint": True}
    plan = run_plan("aks-test", make_project(config, stack="aks-test"))
    cluster = plan.recording.one("azure-native:containerservice:ManagedCluster", "aks-test")
    assert cluster.inputs["apiServerAccessProfile"] == {"enablePrivateCluster": True}
