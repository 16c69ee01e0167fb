"""gang-network on a user's manifests: every pod of a gang admits every other, and where it
is isolated for egress connects to every other, on every TCP port, judged by every label
the controllers give its pods and every label of its namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.test_memory_tier_manifests import (
    GANG_NETWORK,
    OWN_NAMESPACE,
    _findings,
    _gang_with_tier,
    _in_own_namespace,
)

GANG = {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"}}


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": OWN_NAMESPACE},
        "spec": spec,
    }


def _jobset_admitting(*peers: dict[str, Any]) -> list[dict[str, Any]]:
    """The example gang in a namespace of its own, whose one policy admits ``peers`` on
    every port."""
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"][0]["from"] = list(peers)
    return documents


def _job_admitting(peer: dict[str, Any]) -> list[dict[str, Any]]:
    """A two-pod Job labelled as a gang, whose one policy admits pods matching ``peer`` on
    every port."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "g", "namespace": OWN_NAMESPACE},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"spotproof.dev/gang-network": "isolated", "app": "g"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "t",
                            "image": "busybox@sha256:" + "a" * 64,
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"memory": "1Gi"},
                            },
                        }
                    ],
                },
            },
        },
    }
    policy = _policy(
        "p",
        {
            "podSelector": {"matchLabels": {"app": "g"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": peer}]}],
        },
    )
    return [job, policy]


def _gang_messages(tmp_path: Path, *documents: dict[str, Any]) -> list[str]:
    return _findings(tmp_path, *documents).get(GANG_NETWORK, [])


# --- the labels the controllers give a gang's pods -----------------------------------------------


def test_a_jobset_policy_admitting_its_replicated_job_by_name_lets_the_ranks_reach_each_other(
    tmp_path: Path,
) -> None:
    workers = {"matchLabels": {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}}
    assert _gang_messages(tmp_path, *_jobset_admitting({"podSelector": workers})) == []


def test_a_job_peer_selected_by_the_legacy_job_name_label_is_admitted(tmp_path: Path) -> None:
    """The API server still sets ``job-name`` beside ``batch.kubernetes.io/job-name``."""
    assert _gang_messages(tmp_path, *_job_admitting({"matchLabels": {"job-name": "g"}})) == []


def test_a_peer_selected_by_a_uid_known_only_on_the_cluster_is_not_reported(
    tmp_path: Path,
) -> None:
    """The Job's uid is picked at creation: whether a selector on it matches the gang is
    unknown here, so it is not reported."""
    peer = {"matchLabels": {"batch.kubernetes.io/controller-uid": "0f5b6c9e"}}
    assert _gang_messages(tmp_path, *_job_admitting(peer)) == []


def test_a_peer_selected_by_the_index_of_one_child_job_of_several_is_not_reported(
    tmp_path: Path,
) -> None:
    """With two child Jobs, ``job-index: "0"`` selects the pods of one: which pairs that
    leaves out is not judged, so it is not reported."""
    documents = _jobset_admitting(
        {"podSelector": {"matchLabels": {"jobset.sigs.k8s.io/job-index": "0"}}}
    )
    documents[0]["spec"]["replicatedJobs"][0]["replicas"] = 2
    assert _gang_messages(tmp_path, *documents) == []


def test_a_peer_selected_by_an_index_the_only_child_job_has_not_is_reported(
    tmp_path: Path,
) -> None:
    """With one child Job, every pod has ``job-index: "0"``: a selector on "1" matches none."""
    peer = {"podSelector": {"matchLabels": {"jobset.sigs.k8s.io/job-index": "1"}}}
    [message] = _gang_messages(tmp_path, *_jobset_admitting(peer))
    assert "admit its pods to each other on no port" in message


def test_a_peer_whose_namespace_is_selected_by_a_label_of_its_own_is_admitted(
    tmp_path: Path,
) -> None:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": OWN_NAMESPACE, "labels": {"team": "ml"}},
    }
    peer = {"namespaceSelector": {"matchLabels": {"team": "ml"}}, "podSelector": GANG}
    assert _gang_messages(tmp_path, namespace, *_jobset_admitting(peer)) == []


# --- egress -----------------------------------------------------------------------------------


def _egress_to_gang(ports: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The gang admitting itself on every port, and a policy that isolates its pods for
    egress: DNS and HTTPS anywhere, and the gang on ``ports`` (None: every port)."""
    to_gang: dict[str, Any] = {"to": [{"podSelector": GANG}]}
    if ports is not None:
        to_gang["ports"] = ports
    everywhere = [
        {"protocol": "UDP", "port": 53},
        {"protocol": "TCP", "port": 53},
        {"protocol": "TCP", "port": 443},
    ]
    egress = _policy(
        "egress",
        {
            "podSelector": GANG,
            "policyTypes": ["Egress"],
            "egress": [{"ports": everywhere}, to_gang],
        },
    )
    return [*_in_own_namespace(_gang_with_tier()), egress]


def test_a_gang_isolated_for_egress_that_may_reach_itself_on_one_port_alone_is_reported(
    tmp_path: Path,
) -> None:
    """gloo's and NCCL's own ports, the c10d store's and the replica port are all shut."""
    [message] = _gang_messages(tmp_path, *_egress_to_gang([{"protocol": "TCP", "port": 29500}]))
    assert message == (
        f"JobSet {OWN_NAMESPACE}/llm-pretrain/workers: the NetworkPolicies of namespace "
        f"{OWN_NAMESPACE} let its pods connect to each other only on UDP 53, TCP 53, TCP 443, "
        "TCP 29500, but a gang's ranks exchange gradients (NCCL, gloo) on ports they pick "
        "themselves, so it would hang at its first collective; allowed: a NetworkPolicy that "
        "selects the gang's pods and allows egress on every port (a rule without ports) to "
        "pods labelled jobset.sigs.k8s.io/jobset-name=llm-pretrain"
    )


def test_a_gang_isolated_for_egress_that_may_reach_itself_on_every_port_is_not_reported(
    tmp_path: Path,
) -> None:
    assert _gang_messages(tmp_path, *_egress_to_gang(None)) == []


def test_an_egress_range_of_every_port_does_not_count(tmp_path: Path) -> None:
    """Cilium narrows a range to its first port (cilium/cilium#28684)."""
    ports = [{"protocol": "TCP", "port": 1, "endPort": 65535}]
    [message] = _gang_messages(tmp_path, *_egress_to_gang(ports))
    assert "TCP 1-65535 (a range, which Cilium narrows to 1)" in message


# --- the message -------------------------------------------------------------------------------


def test_a_rule_for_a_protocol_alone_is_named_as_every_port_of_it(tmp_path: Path) -> None:
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"][0]["ports"] = [{"protocol": "UDP"}]
    [message] = _gang_messages(tmp_path, *documents)
    assert "admit its pods to each other only on UDP (every port), but" in message


def test_the_gang_label_is_named_only_where_it_leaves_the_pods_out_of_a_policy(
    tmp_path: Path,
) -> None:
    """Outside spotproof's namespace no policy selects by the label: the message does not
    speak of it."""
    documents = _job_admitting({"matchLabels": {"app": "g"}})
    documents[1]["spec"]["ingress"][0]["ports"] = [{"protocol": "TCP", "port": 29500}]
    [message] = _gang_messages(tmp_path, *documents)
    assert message.startswith(
        f"Job {OWN_NAMESPACE}/g: the NetworkPolicies of namespace {OWN_NAMESPACE} admit its "
        "pods to each other only on TCP 29500,"
    )
