"""A gang's memory tier on a cluster: spotproof renders none (a JobSet restart recreates
every pod, and the strategy that keeps them cannot be rendered), and the plan flags a
hand-written one that a restart would find empty, that has no room in its pod, or whose
peers cannot reach it."""

from __future__ import annotations

import copy
import dataclasses
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from spotproof import cli
from spotproof.check import check, load_all
from spotproof.kube import TrainingJob, TrainingJobArgs
from spotproof.kube.training import Trainer
from spotproof.plan.recording.manifests import schema_errors
from spotproof.plan.recording.recorder import Resource
from spotproof.plan.schemas.jobset import errors
from spotproof.plan.simulation import controller_versions
from spotproof.testing import record
from tests.support import REPO, plan_of
from tests.test_training_job import IDENTITY, SPOT_ON_GKE, TRAINER

GANG = REPO / "examples" / "pretrain-jobset.yaml"
GANG_NETWORK = "gang-network"
GANG_NETWORK_LABEL = "spotproof.dev/gang-network"
TIER = "/var/spotproof/tier"
DOWNWARD = [
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
]


SECRET_DIR = "/var/run/spotproof/replica"
SECRET_ENV = [{"name": "REPLICA_SECRET_FILE", "value": f"{SECRET_DIR}/secret"}]
SECRET_MOUNT = {"name": "replica-secret", "mountPath": SECRET_DIR, "readOnly": True}
SECRET_VOLUME = {"name": "replica-secret", "secret": {"secretName": "llm-pretrain-replica"}}
OWN_NAMESPACE = "llm"


def _gang_with_tier(
    *,
    size_limit: str | None = "12Gi",
    memory: str = "32Gi",
    state_mib: str = "2048",
    env: list[dict[str, Any]] | None = None,
    mounted: bool = True,
    secret: list[dict[str, Any]] | None = None,
    secret_volume: dict[str, Any] | None = SECRET_VOLUME,
) -> dict[str, Any]:
    """The shipped example gang with a memory tier: ``TIER`` on a memory-backed emptyDir,
    and its replica secret on a Secret volume."""
    [jobset, _budget] = yaml.safe_load_all(GANG.read_text())
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["metadata"] = {"annotations": {"spotproof.dev/state-mib": state_mib}}
    pod = template["spec"]
    [trainer] = pod["containers"]
    trainer["env"] += [{"name": "MEMORY_TIER_DIR", "value": f"{TIER}/run"}]
    trainer["env"] += DOWNWARD if env is None else env
    trainer["env"] += SECRET_ENV if secret is None else secret
    trainer["resources"] = {
        "requests": {"cpu": "4", "memory": memory},
        "limits": {"memory": memory, "nvidia.com/gpu": "1"},
    }
    empty_dir: dict[str, Any] = {"medium": "Memory"}
    if size_limit is not None:
        empty_dir["sizeLimit"] = size_limit
    trainer["volumeMounts"] = [SECRET_MOUNT]
    if mounted:
        trainer["volumeMounts"].append({"name": "tier", "mountPath": TIER})
    pod["volumes"] = [{"name": "tier", "emptyDir": empty_dir}]
    pod["volumes"] += [] if secret_volume is None else [secret_volume]
    return jobset


def _in_own_namespace(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    """``jobset`` in a namespace of its own whose NetworkPolicies admit its pods' replica
    port from the gang's pods only, as the plan asks."""
    jobset["metadata"]["namespace"] = OWN_NAMESPACE
    gang = {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"}}
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "gang-only", "namespace": OWN_NAMESPACE},
        "spec": {
            "podSelector": gang,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": gang}]}],
        },
    }
    return [jobset, policy]


def _findings(
    tmp_path: Path, *documents: dict[str, Any], stack: str = "gke-dev"
) -> dict[str, list[str]]:
    """``spotproof check`` of ``documents`` against ``stack``: the messages of each
    memory-tier rule and of ``gang-network``."""
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    found: dict[str, list[str]] = {}
    for finding in check(load_all([path]), plan_of(stack)).findings:
        if finding.policy.startswith("memory-tier") or finding.policy == GANG_NETWORK:
            found.setdefault(finding.policy, []).append(finding.message)
    return found


def _labelled(jobset: dict[str, Any]) -> dict[str, Any]:
    """``jobset`` with its pods labelled out of spotproof's namespace-wide ingress rule, and
    with the target class every spotproof workload carries (which the stacks' metrics
    scrapes select)."""
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["metadata"]["labels"] = {
        GANG_NETWORK_LABEL: "isolated",
        "spotproof.dev/target-class": "spot-gpu",
    }
    return jobset


def _in_place(jobset: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(jobset)
    changed["spec"]["failurePolicy"]["restartStrategy"] = "InPlaceRestart"
    return changed


# --- what spotproof renders -----------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_training_job_refuses_a_memory_tier_in_one_line(nodes: int) -> None:
    trainer: Trainer = dataclasses.replace(TRAINER, env={"MEMORY_TIER_DIR": "/dev/shm/tier"})

    def program() -> None:
        TrainingJob(
            "llm-pretrain",
            TrainingJobArgs(
                trainer=trainer,
                placement=SPOT_ON_GKE,
                identity=IDENTITY,
                checkpoint_url=pulumi.Output.from_input("gs://acme-ckpt/checkpoints/llm"),
                nodes=nodes,
            ),
        )

    with pytest.raises(ValueError) as raised:
        record(program, stack="research", project="ml")
    assert str(raised.value) == (
        "TrainingJob llm-pretrain: MEMORY_TIER_DIR needs pods that outlive a reclaim, and a "
        "gang restart recreates them (a JobSet restarts by Recreate); allowed: a trainer env "
        "without it, and recovery=GangRecovery.REPLACE_RANK, which renders the memory tier itself"
    )


# --- the restart strategy -------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [None, "Recreate", "BlockingRecreate"])
def test_a_gang_whose_restarts_recreate_its_pods_is_flagged_for_keeping_a_tier(
    tmp_path: Path, strategy: str | None
) -> None:
    jobset = _gang_with_tier()
    if strategy is not None:
        jobset["spec"]["failurePolicy"]["restartStrategy"] = strategy
    [message] = _findings(tmp_path, jobset)["memory-tier-restart"]
    assert message.startswith(
        "JobSet spotproof/llm-pretrain/workers: container trainer keeps a memory tier "
        f"(MEMORY_TIER_DIR) but the JobSet restarts by {strategy or 'Recreate'}, which deletes "
        "every pod and its memory"
    )


def test_a_gang_with_a_tier_that_fits_and_reaches_its_peers_is_flagged_for_nothing_else(
    tmp_path: Path,
) -> None:
    found = _findings(tmp_path, *_in_own_namespace(_gang_with_tier()))
    assert list(found) == ["memory-tier-restart"]


def test_the_gang_without_a_tier_is_not_flagged(tmp_path: Path) -> None:
    [jobset, _budget] = yaml.safe_load_all(GANG.read_text())
    assert _findings(tmp_path, jobset) == {}


def test_in_place_restart_is_refused_for_the_gate_the_chart_cannot_turn_on() -> None:
    [error] = errors(_in_place(_gang_with_tier()), lambda job: schema_errors(job, "1.33"))
    assert error == (
        "spec.failurePolicy.restartStrategy: 'InPlaceRestart' not allowed: the webhook refuses "
        "it while the controller's InPlaceRestart feature gate is off (alpha, off by default), "
        "and the JobSet chart has no value that turns it on (allowed: BlockingRecreate, Recreate)"
    )


def test_in_place_restart_on_a_jobset_release_without_it_is_reported_by_version() -> None:
    plan = plan_of("gke-dev")
    inputs = _in_place(_gang_with_tier())
    plan.recording.resources.append(
        Resource(
            "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet",
            "llm-pretrain",
            "urn:pulumi:gke-dev::p::JobSet::llm-pretrain",
            None,
            True,
            inputs,
        )
    )
    older = dataclasses.replace(plan.spec.jobset, version="0.10.1")
    [message] = [
        v.message
        for v in controller_versions.check(
            dataclasses.replace(plan.spec, jobset=older), plan.recording
        )
    ]
    assert message.startswith(
        "JobSet spotproof/llm-pretrain: spec.failurePolicy.restartStrategy InPlaceRestart is "
        "accepted by JobSet from 0.11.0 on, and the stack installs 0.10.1"
    )
    assert controller_versions.check(plan.spec, plan.recording) == []


def test_a_tier_on_no_volume_is_flagged_as_lost_with_its_container(tmp_path: Path) -> None:
    messages = _findings(tmp_path, _gang_with_tier(mounted=False))["memory-tier-restart"]
    assert (
        "JobSet spotproof/llm-pretrain/workers: container trainer keeps its memory tier at "
        f"{TIER}/run, on no volume: the container's own filesystem is lost whenever it "
        "restarts; fix: mount an emptyDir with medium Memory there"
    ) in messages


# --- room in the pod ------------------------------------------------------------------------


def test_a_memory_backed_tier_without_a_size_limit_is_flagged(tmp_path: Path) -> None:
    [message] = _findings(tmp_path, _gang_with_tier(size_limit=None))["memory-tier-room"]
    assert message == (
        "JobSet spotproof/llm-pretrain/workers: container trainer's memory tier (emptyDir "
        "tier, medium Memory) has no sizeLimit: it may grow to the container's whole memory "
        "limit and get the trainer OOM-killed; fix: a sizeLimit of at least 12288Mi"
    )


def test_a_size_limit_below_the_copies_the_tier_holds_is_flagged(tmp_path: Path) -> None:
    [message] = _findings(tmp_path, _gang_with_tier(size_limit="8Gi"))["memory-tier-room"]
    assert message.endswith(
        "has a sizeLimit of 8192Mi, less than the 12288Mi it holds (6 copies of the 2048 MiB "
        "of state the pod states: its own saves and its peer's replicas); fix: raise the "
        "sizeLimit"
    )


@pytest.mark.parametrize(("memory", "flagged"), [("13Gi", True), ("14Gi", False)])
def test_a_memory_limit_must_hold_the_tier_above_the_trainers_copy_of_its_state(
    tmp_path: Path, memory: str, flagged: bool
) -> None:
    found = _findings(tmp_path, _gang_with_tier(memory=memory)).get("memory-tier-room", [])
    if not flagged:
        assert found == []
        return
    [message] = found
    assert message.endswith(
        "its files count against the container's memory limit, and 13312Mi does not hold its "
        "sizeLimit of 12288Mi and the trainer's 2048 MiB host copy of its state; fix: a memory "
        "limit of at least 14336Mi plus what the trainer needs besides"
    )


# --- reaching the peers ---------------------------------------------------------------------


def test_a_gang_tier_without_its_address_and_node_from_the_downward_api_is_flagged(
    tmp_path: Path,
) -> None:
    wrong = [{"name": "POD_IP", "value": "10.0.0.7"}]
    messages = _findings(tmp_path, _gang_with_tier(env=wrong))["memory-tier-peers"]
    assert sorted(m.split(" does not set ")[1].split(":")[0] for m in messages) == [
        "NODE_NAME from the downward API's spec.nodeName",
        "POD_IP from the downward API's status.podIP",
    ]


# --- who may reach the replica server --------------------------------------------------------


def test_a_gang_tier_without_a_replica_secret_is_flagged(tmp_path: Path) -> None:
    [message] = _findings(tmp_path, _gang_with_tier(secret=[]))["memory-tier-secret"]
    assert message == (
        "JobSet spotproof/llm-pretrain/workers: container trainer keeps a memory tier but sets "
        "no REPLICA_SECRET_FILE: the trainer refuses to start without the gang's replica "
        "secret, which keeps everything but the gang out of its replica server; fix: mount a "
        "Secret holding 32 or more random bytes (openssl rand -hex 32) and set "
        "REPLICA_SECRET_FILE to the path of its file"
    )


@pytest.mark.parametrize(
    "volume",
    [None, {"name": "replica-secret", "emptyDir": {}}],
    ids=["no volume", "an emptyDir"],
)
def test_a_replica_secret_on_no_secret_volume_is_flagged(
    tmp_path: Path, volume: dict[str, Any] | None
) -> None:
    jobset = _gang_with_tier(secret_volume=volume)
    [message] = _findings(tmp_path, jobset)["memory-tier-secret"]
    assert f"REPLICA_SECRET_FILE={SECRET_DIR}/secret, which is on no Secret volume" in message


def test_a_replica_secret_in_a_projected_secret_is_taken(tmp_path: Path) -> None:
    projected = {
        "name": "replica-secret",
        "projected": {"sources": [{"secret": {"name": "llm-pretrain-replica"}}]},
    }
    found = _findings(tmp_path, *_in_own_namespace(_gang_with_tier(secret_volume=projected)))
    assert "memory-tier-secret" not in found


def test_a_replica_port_in_spotproofs_namespace_is_open_to_every_pod_of_it_and_flagged(
    tmp_path: Path,
) -> None:
    """spotproof's namespace admits every pod of it on every port to every pod without
    the gang label (allow-workload-ingress), so a gang there without it is reachable by
    the rest of the namespace on its replica port, and only its secret keeps them out."""
    [message] = _findings(tmp_path, _gang_with_tier())["memory-tier-network"]
    assert message.startswith(
        "JobSet spotproof/llm-pretrain: container trainer serves its memory tier's replicas on "
        "TCP 9471 (REPLICA_PORT), and the NetworkPolicies of namespace spotproof admit every "
        "pod of the namespace there"
    )
    assert message.endswith(
        "(spotproof's workload namespace leaves pods labelled spotproof.dev/gang-network to "
        "such a policy of their gang's)"
    )


@pytest.mark.parametrize("stack", ["gke-dev", "gke-prod", "eks-prod", "aks-prod"])
def test_a_labelled_gang_with_its_own_policy_in_spotproofs_namespace_is_confined(
    tmp_path: Path, stack: str
) -> None:
    """The label leaves its pods out of the namespace's ingress rule; its own policy admits
    the gang on every port; the monitoring's scrape admits its collector to the metrics
    port alone (prod stacks), which is not the replica port."""
    [jobset, policy] = _in_own_namespace(_labelled(_gang_with_tier()))
    jobset["metadata"]["namespace"] = policy["metadata"]["namespace"] = "spotproof"
    found = _findings(tmp_path, jobset, policy, stack=stack)
    assert "memory-tier-network" not in found and GANG_NETWORK not in found


@pytest.mark.parametrize("stack", ["gke-prod", "eks-prod", "aks-prod"])
def test_the_metrics_scrape_reaches_a_labelled_gangs_pods_on_their_metrics_port_alone(
    tmp_path: Path, stack: str
) -> None:
    """Only where the trainer named its replica port ``metrics`` would the scrape from the
    monitoring's collectors reach it: the scrape selects the gang's pods."""
    [jobset, policy] = _in_own_namespace(_labelled(_gang_with_tier()))
    jobset["metadata"]["namespace"] = policy["metadata"]["namespace"] = "spotproof"
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 9471}]
    [message] = _findings(tmp_path, jobset, policy, stack=stack)["memory-tier-network"]
    assert "admit every pod of the namespace" not in message


def test_a_labelled_gang_without_a_policy_of_its_own_is_cut_off_from_itself(
    tmp_path: Path,
) -> None:
    found = _findings(tmp_path, _labelled(_gang_with_tier()))
    [message] = found[GANG_NETWORK]
    assert message == (
        "JobSet spotproof/llm-pretrain/workers (labelled spotproof.dev/gang-network: out of "
        "NetworkPolicy allow-workload-ingress): the NetworkPolicies of namespace spotproof admit "
        "its pods to each other on no port, but a gang's ranks exchange gradients (NCCL, gloo) on "
        "ports they pick themselves, so it would hang at its first collective; allowed: a "
        "NetworkPolicy that selects the gang's pods and admits every port (a rule without "
        "ports) from pods labelled jobset.sigs.k8s.io/jobset-name=llm-pretrain"
    )
    [replicas] = found["memory-tier-network"]
    assert "no NetworkPolicy of namespace spotproof admits the gang's own pods there" in replicas


@pytest.mark.parametrize(
    ("ports", "says"),
    [
        ([{"protocol": "TCP", "port": 9471}, {"protocol": "TCP", "port": 29400}], "TCP 9471, "),
        (
            [{"protocol": "TCP", "port": 1, "endPort": 65535}],
            "TCP 1-65535 (a range, which Cilium narrows to 1)",
        ),
    ],
    ids=["the replica and rendezvous ports", "a range of every port"],
)
def test_a_gang_policy_that_lists_ports_leaves_the_ranks_cut_off_from_each_other(
    tmp_path: Path, ports: list[dict[str, Any]], says: str
) -> None:
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"][0]["ports"] = ports
    [message] = _findings(tmp_path, *documents)[GANG_NETWORK]
    assert f"admit its pods to each other only on {says}" in message


def test_without_a_stack_a_gangs_network_is_not_judged(tmp_path: Path) -> None:
    """Policies add up: the stack's own may admit what the files' do not."""
    documents = _in_own_namespace(_labelled(_gang_with_tier()))
    documents[1]["spec"]["ingress"][0]["ports"] = [{"protocol": "TCP", "port": 9471}]
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    assert GANG_NETWORK not in {f.policy for f in check(load_all([path]), None).findings}


def test_a_named_port_admits_the_port_of_that_name_on_the_gangs_pods(tmp_path: Path) -> None:
    """A metrics scrape from another namespace, on the named port ``metrics``: it reaches
    the replica port only where the trainer names that port so."""
    documents = _in_own_namespace(_gang_with_tier())
    scrape = {
        "from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "collector"}}}],
        "ports": [{"protocol": "TCP", "port": "metrics"}],
    }
    documents[1]["spec"]["ingress"].append(scrape)
    pod = documents[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    [trainer] = pod["containers"]
    trainer["ports"] = [{"name": "metrics", "containerPort": 9464}]
    assert "memory-tier-network" not in _findings(tmp_path, *documents)
    trainer["ports"] = [{"name": "metrics", "containerPort": 9471}]
    [message] = _findings(tmp_path, *documents)["memory-tier-network"]
    assert '{"matchLabels": {"app": "collector"}} of namespaces matching {} there' in message


def test_a_replica_port_the_gangs_own_policies_shut_its_peers_out_of_is_flagged(
    tmp_path: Path,
) -> None:
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"][0]["ports"] = [{"protocol": "TCP", "port": 8080}]
    [message] = _findings(tmp_path, *documents)["memory-tier-network"]
    assert message == (
        f"JobSet {OWN_NAMESPACE}/llm-pretrain: container trainer serves its memory tier's "
        f"replicas on TCP 9471 (REPLICA_PORT), and no NetworkPolicy of namespace "
        f"{OWN_NAMESPACE} admits the gang's own pods there: its peers cannot send it "
        "replicas; fix: a NetworkPolicy that selects the gang's pods and admits TCP 9471 from "
        "pods labelled jobset.sigs.k8s.io/jobset-name=llm-pretrain "
        "(TrainingJob(recovery=GangRecovery.REPLACE_RANK) renders one)"
    )


def test_a_replica_port_every_pod_of_the_namespace_may_reach_is_flagged(tmp_path: Path) -> None:
    """NetworkPolicies add up: a policy admitting every pod of the namespace on the replica
    port cannot be taken back by a narrower one."""
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"].append({"from": [{"podSelector": {}}]})
    [message] = _findings(tmp_path, *documents)["memory-tier-network"]
    assert "admit every pod of the namespace there" in message


@pytest.mark.parametrize(
    ("peer", "says"),
    [
        ({"podSelector": {"matchLabels": {"app": "trainer"}}}, 'pods matching {"matchLabels"'),
        ({"ipBlock": {"cidr": "10.0.0.0/8"}}, "ipBlock 10.0.0.0/8"),
        (
            {
                "namespaceSelector": {},
                "podSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"}},
            },
            "of namespaces matching {}",
        ),
    ],
    ids=["a label of the user's", "an address range", "any namespace"],
)
def test_a_replica_port_admitted_from_more_than_the_gang_is_flagged(
    tmp_path: Path, peer: dict[str, Any], says: str
) -> None:
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"].append({"from": [peer], "ports": [{"port": 9471}]})
    [message] = _findings(tmp_path, *documents)["memory-tier-network"]
    assert says in message.split(" there: ")[0]


def test_an_ingress_rule_for_another_port_leaves_the_replica_port_confined(
    tmp_path: Path,
) -> None:
    documents = _in_own_namespace(_gang_with_tier())
    metrics = {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 9464}]}
    documents[1]["spec"]["ingress"].append(metrics)
    assert "memory-tier-network" not in _findings(tmp_path, *documents)


def test_a_gang_with_a_tier_and_no_replica_secret_fails_the_check_command(tmp_path: Path) -> None:
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump(_gang_with_tier(secret=[])))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["check", str(path), "--stack", "gke-dev"])
    assert code == 1 and "memory-tier-secret" in out.getvalue() + err.getvalue()


# --- who the rules take the gang's peers to be -------------------------------------------------


def test_a_peer_selected_by_its_replicated_job_reaches_the_replica_port(tmp_path: Path) -> None:
    """The JobSet controller labels every pod of a replicated Job with its name, so its peers
    reach the port; other JobSets' replicated Jobs of that name would too, which is said."""
    documents = _in_own_namespace(_gang_with_tier())
    workers = {"matchLabels": {"jobset.sigs.k8s.io/replicatedjob-name": "workers"}}
    documents[1]["spec"]["ingress"][0]["from"] = [{"podSelector": workers}]
    [message] = _findings(tmp_path, *documents)["memory-tier-network"]
    assert "no NetworkPolicy" not in message
    assert 'admit pods matching {"matchLabels": {"jobset.sigs.k8s.io/replicatedjob-name"' in message


def test_a_peer_whose_namespace_is_selected_by_a_label_of_its_own_reaches_the_replica_port(
    tmp_path: Path,
) -> None:
    """A namespace selector is matched against every label of the namespace, not its name
    alone; other namespaces of that label would be admitted too, which is said."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": OWN_NAMESPACE, "labels": {"team": "ml"}},
    }
    documents = _in_own_namespace(_gang_with_tier())
    gang = documents[1]["spec"]["podSelector"]
    documents[1]["spec"]["ingress"][0]["from"] = [
        {"namespaceSelector": {"matchLabels": {"team": "ml"}}, "podSelector": gang}
    ]
    [message] = _findings(tmp_path, namespace, *documents)["memory-tier-network"]
    assert "no NetworkPolicy" not in message
    assert 'of namespaces matching {"matchLabels": {"team": "ml"}} there' in message


def test_a_replica_port_admitted_only_through_a_range_is_flagged_as_cilium_narrows_it(
    tmp_path: Path,
) -> None:
    """Cilium (GKE Dataplane V2, AKS) ignores endPort (cilium/cilium#28684): a rule for TCP
    9000-10000 admits 9000 alone there, so the gang's peers never reach 9471."""
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"][0]["ports"] = [
        {"protocol": "TCP", "port": 9000, "endPort": 10000}
    ]
    [message] = _findings(tmp_path, *documents)["memory-tier-network"]
    assert message.startswith(
        f"JobSet {OWN_NAMESPACE}/llm-pretrain: container trainer serves its memory tier's "
        f"replicas on TCP 9471 (REPLICA_PORT), and no NetworkPolicy of namespace {OWN_NAMESPACE} "
        "admits the gang's own pods there (a rule admits them through a port range that holds "
        "it, which Cilium narrows to its first port): its peers cannot send it replicas"
    )


def test_a_range_that_admits_outsiders_to_the_replica_port_is_flagged(tmp_path: Path) -> None:
    """Plugins that honour endPort (Calico, the EKS VPC CNI) admit the whole range: a range
    holding the replica port opens it to whom the rule admits."""
    documents = _in_own_namespace(_gang_with_tier())
    documents[1]["spec"]["ingress"].append(
        {"from": [{"podSelector": {}}], "ports": [{"port": 9000, "endPort": 10000}]}
    )
    messages = _findings(tmp_path, *documents)["memory-tier-network"]
    assert any("admit every pod of the namespace there" in m for m in messages)


def test_a_replica_port_admitted_from_pods_of_one_uid_is_not_reported_as_open(
    tmp_path: Path,
) -> None:
    """A uid names one JobSet, the gang's own or another's, which is not known before it
    runs: the peer is not reported as more than the gang."""
    documents = _in_own_namespace(_gang_with_tier())
    uid = {"matchLabels": {"jobset.sigs.k8s.io/jobset-uid": "6f1c2a4e"}}
    documents[1]["spec"]["ingress"].append(
        {"from": [{"podSelector": uid}], "ports": [{"port": 9471}]}
    )
    assert "memory-tier-network" not in _findings(tmp_path, *documents)
