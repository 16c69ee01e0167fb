"""Workload namespaces are isolated, and what workloads need still gets through: the
policies spotproof renders, and the NetworkPolicy semantics the plan checks them with."""

from __future__ import annotations

from typing import Any

import pytest

from spotproof.plan import PlanResult
from spotproof.policy import ingress
from spotproof.policy.disruption import selects
from spotproof.policy.network_policies import Destination, egress_allowed
from tests.support import plan_of

POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
OWN = {"kubernetes.io/metadata.name": "spotproof"}
PUBLIC_HTTPS = Destination("https", "TCP", 443, "198.51.100.7")


def _policies(plan: PlanResult) -> dict[str, dict[str, Any]]:
    return {
        r.inputs["metadata"]["name"]: r.inputs
        for r in plan.recording.of_type(POLICY)
        if r.inputs["metadata"]["namespace"] == "spotproof"
    }


def test_the_workload_namespace_denies_everything_by_default(gke_dev: PlanResult) -> None:
    deny = _policies(gke_dev)["default-deny"]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


@pytest.mark.parametrize(
    ("stack", "identity"),
    [
        ("gke-dev", [("169.254.169.254/32", 80), ("169.254.169.252/32", 988)]),
        ("eks-dev", [("169.254.170.23/32", 80)]),
        ("aks-dev", []),
    ],
)
def test_workloads_may_reach_each_other_dns_https_and_their_identity_endpoint(
    stack: str, identity: list[tuple[str, int]]
) -> None:
    spec = _policies(plan_of(stack))["allow-workload-egress"]["spec"]
    assert (spec["podSelector"], spec["policyTypes"]) == ({}, ["Egress"])
    own, dns, https, *identity_rules = spec["egress"]
    assert own == {"to": [{"podSelector": {}}]}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {p["protocol"] for p in dns["ports"]} == {"UDP", "TCP"}
    assert https == {
        "to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    assert [
        (r["to"][0]["ipBlock"]["cidr"], r["ports"][0]["port"]) for r in identity_rules
    ] == identity


def test_every_pod_but_a_gangs_own_admits_the_whole_namespace_on_every_port(
    gke_dev: PlanResult,
) -> None:
    # Every port, with no port ranges: Cilium (GKE Dataplane V2, AKS) ignores endPort.
    assert _policies(gke_dev)["allow-workload-ingress"]["spec"] == {
        "podSelector": {
            "matchExpressions": [{"key": "spotproof.dev/gang-network", "operator": "DoesNotExist"}]
        },
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
    }


@pytest.mark.parametrize(
    ("labels", "selected"),
    [({"app": "worker"}, True), ({"app": "trainer", "spotproof.dev/gang-network": "x"}, False)],
    ids=["an ordinary pod", "a gang's pod, whatever the label's value"],
)
def test_the_namespace_ingress_rule_selects_pods_without_the_gang_label(
    gke_dev: PlanResult, labels: dict[str, str], selected: bool
) -> None:
    spec = _policies(gke_dev)["allow-workload-ingress"]["spec"]
    assert selects(spec["podSelector"], labels) is selected


def test_the_namespace_rule_of_earlier_releases_is_gone(gke_dev: PlanResult) -> None:
    # allow-workload-traffic, split in two: on a stack that has it, Pulumi creates the two
    # new policies before it deletes that one (kube.network_policy).
    isolation = {n for n in _policies(gke_dev) if n.startswith(("allow-workload", "default"))}
    assert isolation == {"default-deny", "allow-workload-egress", "allow-workload-ingress"}


def test_a_pod_no_policy_isolates_for_egress_may_connect_anywhere() -> None:
    ingress_only = {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert egress_allowed([ingress_only], PUBLIC_HTTPS, OWN)


def test_an_isolated_pod_reaches_only_what_a_rule_allows() -> None:
    deny = {"podSelector": {}, "policyTypes": ["Egress"]}
    assert not egress_allowed([deny], PUBLIC_HTTPS, OWN)
    allow_dns_only = {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{"ports": [{"protocol": "UDP", "port": 53}]}],
    }
    assert not egress_allowed([deny, allow_dns_only], PUBLIC_HTTPS, OWN)
    assert egress_allowed([deny, allow_dns_only], Destination("dns", "UDP", 53, "10.0.0.10"), OWN)


def test_an_ip_block_excludes_its_except_ranges() -> None:
    policy = {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}]}],
    }
    metadata = Destination("metadata", "TCP", 80, "169.254.169.254")
    assert egress_allowed([policy], PUBLIC_HTTPS, OWN)
    assert not egress_allowed([policy], metadata, OWN)


def test_a_pod_peer_without_a_namespace_selector_is_in_the_policys_own_namespace() -> None:
    policy = {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{"to": [{"podSelector": {}}]}],
    }
    same = Destination("peer", "TCP", 29500, None, OWN, {"app": "x"})
    other = Destination("peer", "TCP", 29500, None, {"kubernetes.io/metadata.name": "b"}, {})
    assert egress_allowed([policy], same, OWN)
    assert not egress_allowed([policy], other, OWN)


def test_a_port_range_and_the_default_protocol() -> None:
    policy = {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{"ports": [{"port": 29500, "endPort": 29510}]}],
    }
    assert egress_allowed([policy], Destination("rank", "TCP", 29505, "10.1.2.3"), OWN)
    assert not egress_allowed([policy], Destination("rank", "UDP", 29505, "10.1.2.3"), OWN)
    assert not egress_allowed([policy], Destination("rank", "TCP", 29511, "10.1.2.3"), OWN)


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ({}, True),
        ({"matchLabels": {"app": "trainer"}}, True),
        ({"matchLabels": {"app": "worker"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["trainer"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["trainer"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
    ],
)
def test_label_selectors(selector: dict[str, Any], matches: bool) -> None:
    assert selects(selector, {"app": "trainer"}) is matches


UID = "batch.kubernetes.io/controller-uid"


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"matchExpressions": [{"key": UID, "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": UID, "operator": "DoesNotExist"}]}, False),
        ({"matchLabels": {UID: "0f5b6c9e"}}, None),
        ({"matchLabels": {UID: "0f5b6c9e", "app": "worker"}}, False),
    ],
    ids=["exists", "does not exist", "a value", "a value and a label it lacks"],
)
def test_a_label_every_pod_carries_with_a_value_not_known_here(
    selector: dict[str, Any], expected: bool | None
) -> None:
    """Present on every pod, so Exists holds; its value is not known, so a selector on the
    value may match all, some or none (None), unless another requirement fails outright."""
    assert ingress.matches(selector, {"app": "trainer"}, frozenset({UID})) is expected
