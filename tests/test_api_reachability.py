"""Every stack is deployable in one `pulumi up` from where its runner is: the plan refuses
a stack whose Kubernetes objects would be created through an endpoint the runner cannot
reach, and GKE's private stacks reach their control plane through its DNS endpoint."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.fleet import SpecError, fleet_from_config
from spotproof.plan import PlanResult, check, run_plan
from spotproof.plan.recording.recorder import reveal
from tests.support import stack_config
from tests.test_gke_existing_network import EXISTING

pytestmark = pytest.mark.processes

CLUSTER = "gcp:container/cluster:Cluster"
PROVIDER = "pulumi:providers:kubernetes"


def _reachability(plan: PlanResult) -> list[tuple[str, str]]:
    result = check(plan.spec, plan.recording)
    return [(v.resource, v.message) for v in result.violations if v.policy == "api-reachable"]


def _server(plan: PlanResult) -> dict[str, Any]:
    [provider] = plan.recording.of_type(PROVIDER)
    return yaml.safe_load(reveal(provider.inputs["kubeconfig"]))["clusters"][0]["cluster"]


def _with_access(stack: str, access: dict[str, Any], **more: Any) -> dict[str, Any]:
    config = stack_config(stack)
    config["spotproof:apiAccess"] = access
    config.update({f"spotproof:{key}": value for key, value in more.items()})
    return config


def test_gke_always_sends_authorized_networks_so_a_private_endpoint_is_accepted(
    gke_prod: PlanResult,
) -> None:
    cluster = gke_prod.recording.one(CLUSTER, "gke-prod").inputs
    assert cluster["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert cluster["masterAuthorizedNetworksConfig"] == {
        "cidrBlocks": [],
        "gcpPublicCidrsAccessEnabled": False,
    }


def test_a_private_gke_stack_is_deployed_through_the_control_planes_dns_endpoint(
    gke_prod: PlanResult,
) -> None:
    cluster = gke_prod.recording.one(CLUSTER, "gke-prod").inputs
    assert cluster["controlPlaneEndpointsConfig"] == {
        "dnsEndpointConfig": {"allowExternalTraffic": True}
    }
    # A publicly trusted certificate: the kubeconfig names no cluster CA.
    assert _server(gke_prod) == {"server": "https://gke-0ff1ine.us-central1.gke.goog"}
    assert _reachability(gke_prod) == []


def test_a_gke_dns_endpoint_closed_to_outside_traffic_is_unreachable(
    gke_prod: PlanResult,
) -> None:
    cluster = gke_prod.recording.one(CLUSTER, "gke-prod").inputs
    cluster["controlPlaneEndpointsConfig"]["dnsEndpointConfig"]["allowExternalTraffic"] = False
    [(resource, message)] = _reachability(gke_prod)
    assert resource == "gke-prod-kubernetes"
    assert "its DNS endpoint takes no traffic from outside the network" in message


def test_a_gke_provider_on_the_private_ip_endpoint_is_unreachable(gke_prod: PlanResult) -> None:
    [provider] = gke_prod.recording.of_type(PROVIDER)
    provider.inputs["kubeconfig"] = reveal(provider.inputs["kubeconfig"]).replace(
        "gke-0ff1ine.us-central1.gke.goog", "10.0.0.2"
    )
    [(_, message)] = _reachability(gke_prod)
    assert "connects to https://10.0.0.2, the private IP endpoint" in message


def test_a_gke_runner_inside_an_existing_network_uses_the_ip_endpoint(
    make_project: Callable[..., Path],
) -> None:
    access = {"privateEndpoint": True, "runnerInNetwork": True}
    config = _with_access("gke-dev", access, network={"existing": EXISTING})
    plan = run_plan("gke-test", make_project(config))
    assert _server(plan)["server"] == "https://203.0.113.10"
    assert "certificate-authority-data" in _server(plan)
    assert _reachability(plan) == []


def test_a_runner_inside_a_network_this_run_creates_is_refused(
    make_project: Callable[..., Path],
) -> None:
    config = _with_access("eks-dev", {"privateEndpoint": True, "runnerInNetwork": True})
    plan = run_plan("eks-test", make_project(config, stack="eks-test"))
    [(_, message)] = _reachability(plan)
    assert "this run creates that network, so nothing is inside it yet" in message
    assert "(network.subnets)" in message


def test_a_private_eks_stack_in_existing_subnets_deploys_from_inside_them(
    eks_prod: PlanResult,
) -> None:
    assert eks_prod.spec.api_access.runner_in_network
    assert _reachability(eks_prod) == []


def test_a_private_eks_stack_with_the_runner_outside_is_refused(
    make_project: Callable[..., Path],
) -> None:
    config = _with_access("eks-prod", {"privateEndpoint": True})
    plan = run_plan("eks-test", make_project(config, stack="eks-test"))
    [(_, message)] = _reachability(plan)
    assert "the API answers only inside the cluster's network, where pulumi up does not run" in (
        message
    )


@pytest.mark.parametrize("inside", [False, True])
def test_a_private_aks_cluster_is_refused_whoever_runs_it(
    make_project: Callable[..., Path], inside: bool
) -> None:
    access = {"privateEndpoint": True, "runnerInNetwork": inside}
    plan = run_plan("aks-test", make_project(_with_access("aks-dev", access), stack="aks-test"))
    [(resource, message)] = _reachability(plan)
    assert resource == "aks-test-kubernetes"
    assert "AKS private cluster's API answers only inside the VNet AKS creates" in message


def test_a_runner_in_network_without_a_private_endpoint_is_refused_in_one_line() -> None:
    access = {"authorizedNetworks": ["203.0.113.0/24"], "runnerInNetwork": True}
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", _with_access("gke-dev", access))
    assert str(raised.value).startswith(
        "spotproof:apiAccess.runnerInNetwork = True: only says where pulumi up reaches a "
        "private endpoint from"
    )
