"""``TrainingJob(recovery=GangRecovery.REPLACE_RANK)``: a gang whose reclaimed worker is
replaced alone, with the memory tier rendered on every pod; rendered under mocks and read
back by the plan's own checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from spotproof.check import check, load_all
from spotproof.kube import GangRecovery, TrainingJob, TrainingJobArgs
from spotproof.kube.training import Launcher, Trainer
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, WorkloadIdentity
from spotproof.plan.simulation import memory_tiers
from spotproof.runtime.launcher import LAUNCH_SCRIPT
from spotproof.testing import Recording, record
from tests.support import plan_of
from tests.test_training_job import IDENTITY, SPOT_ON_GKE, TRAINER

JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
SECRET = "kubernetes:core/v1:Secret"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
STATEFUL = dataclasses.replace(TRAINER, state_mib=2048)
REPLICA_SECRET = "0123456789abcdef" * 4
GANG = "jobset.sigs.k8s.io/jobset-name"


def _render(
    trainer: Trainer = STATEFUL,
    identity: WorkloadIdentity = IDENTITY,
    placement: TargetPlacement = SPOT_ON_GKE,
    **options: Any,
) -> Recording:
    arguments: dict[str, Any] = {
        "nodes": 4,
        "recovery": GangRecovery.REPLACE_RANK,
        "replica_secret": REPLICA_SECRET,
        **options,
    }

    def program() -> None:
        TrainingJob(
            "llm-pretrain",
            TrainingJobArgs(
                trainer=trainer,
                placement=placement,
                identity=identity,
                checkpoint_url=pulumi.Output.from_input("gs://acme-ckpt/checkpoints/llm"),
                **arguments,
            ),
        )

    return record(program, stack="research", project="ml")


def _spec(recording: Recording) -> dict[str, Any]:
    [jobset] = recording.of_type(JOBSET)
    return jobset.inputs["spec"]


def _jobs(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r["template"]["spec"] for r in spec["replicatedJobs"]}


def _container(job: dict[str, Any]) -> dict[str, Any]:
    [container] = job["template"]["spec"]["containers"]
    return container


def test_the_gang_is_a_leader_job_of_one_pod_and_a_workers_job_of_the_rest() -> None:
    spec = _spec(_render())
    assert [r["name"] for r in spec["replicatedJobs"]] == ["leader", "workers"]
    assert all(r["replicas"] == 1 for r in spec["replicatedJobs"])
    jobs = _jobs(spec)
    assert (jobs["leader"]["completions"], jobs["leader"]["parallelism"]) == (1, 1)
    workers = jobs["workers"]
    assert workers["completionMode"] == "Indexed"
    assert workers["completions"] == workers["parallelism"] == 3
    assert jobs["leader"]["backoffLimit"] == workers["backoffLimit"] == 0


def test_a_workers_reclaim_is_ignored_so_its_job_replaces_that_pod_alone() -> None:
    rules = _jobs(_spec(_render()))["workers"]["podFailurePolicy"]["rules"]
    assert rules == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "Ignore",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]},
        },
    ]


def test_the_leaders_reclaim_fails_its_job_and_restarts_the_gang_for_free() -> None:
    spec = _spec(_render(backoff_limit=5))
    rules = _jobs(spec)["leader"]["podFailurePolicy"]["rules"]
    assert {r["action"] for r in rules} == {"FailJob"}
    assert {"type": "DisruptionTarget", "status": "True"} in rules[1]["onPodConditions"]
    assert spec["failurePolicy"]["maxRestarts"] == 5
    assert spec["failurePolicy"]["rules"][1] == {
        "name": "ReclaimRestartsFree",
        "action": "RestartJobSetAndIgnoreMaxRestarts",
        "onJobFailureReasons": ["PodFailurePolicy"],
    }


def test_every_pod_runs_warm_torchrun_on_the_leaders_store_and_only_the_leader_hosts_it() -> None:
    """spotproof's torchrun (``runtime.warm_torchrun``): every survivor restarts its workers
    when a rank is replaced, and they start forked warm."""
    jobs = _jobs(_spec(_render(backoff_limit=5)))
    for name, hosts in (("leader", "true"), ("workers", "false")):
        command = _container(jobs[name])["command"]
        assert command[:4] == ["/bin/sh", "-c", LAUNCH_SCRIPT, "spotproof-launch"]
        assert command[4:] == [
            "spotproof-torchrun",
            "--nnodes=4:4",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint=llm-pretrain-leader-0-0.llm-pretrain:29400",
            "--rdzv-id=llm-pretrain",
            *command[10:11],
            "--max-restarts=5",
            "--no-python",
            *TRAINER.command,
        ]
        conf = dict(item.split("=") for item in command[10].split("=", 1)[1].split(","))
        assert (conf["is_host"], conf["join_timeout"]) == (hosts, "900")
        # The client's connect timeout too: the leader may come back minutes after the rest.
        assert conf["read_timeout"] == "900"


def test_every_pod_waits_to_be_torn_down_and_keeps_its_workers_store_apart() -> None:
    for job in _jobs(_spec(_render())).values():
        env = {e["name"]: e.get("value") for e in _container(job)["env"]}
        assert env["SPOTPROOF_TEARDOWN_WAIT"] == "600"
        assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
        assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "12"


def test_a_rank_stopped_by_a_lost_peer_waits_as_long_as_its_agent_waits_for_the_replacement() -> (
    None
):
    for job in _jobs(_spec(_render())).values():
        env = {e["name"]: e.get("value") for e in _container(job)["env"]}
        command = _container(job)["command"]
        conf = dict(item.split("=") for item in command[10].split("=", 1)[1].split(","))
        assert env["PEER_WAIT_SECONDS"] == conf["join_timeout"] == "900"


def test_every_pod_keeps_its_memory_tier_on_a_sized_memory_backed_empty_dir() -> None:
    for job in _jobs(_spec(_render())).values():
        pod = job["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        # Six copies of the 2048 MiB the trainer states: its own saves and its peer's.
        assert volumes["memory-tier"] == {
            "name": "memory-tier",
            "emptyDir": {"medium": "Memory", "sizeLimit": "12288Mi"},
        }
        container = _container(job)
        assert {"name": "memory-tier", "mountPath": "/var/spotproof/tier"} in container[
            "volumeMounts"
        ]
        env = {e["name"]: e for e in container["env"]}
        assert env["MEMORY_TIER_DIR"]["value"] == "/var/spotproof/tier"


def test_the_memory_limit_holds_the_tier_on_top_of_what_the_trainer_asks() -> None:
    for job in _jobs(_spec(_render(memory_tier_gib=10))).values():
        resources = _container(job)["resources"]
        # 32Gi of the trainer's own and a 10 GiB tier, whose files count against the limit.
        assert resources["limits"]["memory"] == resources["requests"]["memory"] == "43008Mi"
        tier = {v["name"]: v for v in job["template"]["spec"]["volumes"]}["memory-tier"]
        assert tier["emptyDir"]["sizeLimit"] == "10240Mi"


def test_every_pod_gets_its_address_node_and_replica_port() -> None:
    for job in _jobs(_spec(_render())).values():
        container = _container(job)
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert env["REPLICA_PORT"]["value"] == "9471"
        assert {"name": "replica", "containerPort": 9471} in container["ports"]


def test_the_replica_secret_is_a_secret_of_the_component_mounted_read_only() -> None:
    recording = _render()
    [secret] = recording.of_type(SECRET)
    assert secret.inputs["metadata"]["name"] == "llm-pretrain-replica"
    assert secret.inputs["metadata"]["namespace"] == "ml"
    assert secret.parent is not None and "TrainingJob" in secret.parent
    for job in _jobs(_spec(recording)).values():
        pod = job["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["replica-secret"]["secret"]["secretName"] == "llm-pretrain-replica"
        container = _container(job)
        mount = {
            "name": "replica-secret",
            "mountPath": "/var/run/spotproof/replica",
            "readOnly": True,
        }
        assert mount in container["volumeMounts"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["REPLICA_SECRET_FILE"] == "/var/run/spotproof/replica/secret"


def test_a_policy_admits_the_gangs_own_pods_on_every_port() -> None:
    """Every port: the ranks exchange gradients (NCCL, gloo) on ports they pick themselves,
    besides the replica server's 9471 and the rendezvous store's 29400."""
    [policy] = _render().of_type(NETWORK_POLICY)
    gang = {"matchLabels": {GANG: "llm-pretrain"}}
    assert policy.inputs["metadata"]["name"] == "llm-pretrain-gang"
    assert policy.inputs["spec"] == {
        "podSelector": gang,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": gang}]}],
    }


def test_every_pod_of_the_gang_is_labelled_out_of_the_namespaces_ingress_rule() -> None:
    for job in _jobs(_spec(_render())).values():
        labels = job["template"]["metadata"]["labels"]
        assert labels["spotproof.dev/gang-network"] == "isolated"


def test_a_gang_that_restarts_whole_keeps_the_namespaces_ingress_rule() -> None:
    # No policy of its own admits its ranks: the namespace's rule must.
    recording = _render(recovery=GangRecovery.RESTART_GANG, replica_secret=None)
    [job] = _jobs(_spec(recording)).values()
    assert "spotproof.dev/gang-network" not in job["template"]["metadata"]["labels"]


def test_on_an_existing_cluster_the_gangs_own_policy_is_all_its_pods_admit() -> None:
    """The Job's own policy there allows egress alone, so the gang's own policy, which
    admits pods by their JobSet's label, is the only one that admits anything to its pods."""
    recording = _render(placement=TargetPlacement.on_existing_cluster("gke"))
    policies = {
        r.inputs["metadata"]["name"]: r.inputs["spec"] for r in recording.of_type(NETWORK_POLICY)
    }
    assert set(policies) == {"llm-pretrain", "llm-pretrain-gang"}
    own = policies["llm-pretrain"]
    assert own["policyTypes"] == ["Egress"] and "ingress" not in own
    assert policies["llm-pretrain-gang"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {GANG: "llm-pretrain"}}}]}
    ]


def _network_findings(recording: Recording, tmp_path: Path, stack: str) -> list[str]:
    """``spotproof check`` of the rendered JobSet and policies against ``stack``: what the
    rules on a gang's tier, restarts and network say of it."""
    documents = [
        {k: v for k, v in r.inputs.items()}
        for r in [*recording.of_type(JOBSET), *recording.of_type(NETWORK_POLICY)]
    ]
    path = tmp_path / "gang.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    judged = ("reclaim-counted", "gang-restart", "gang-network")
    return [
        f"{f.policy}: {f.message}"
        for f in check(load_all([path]), plan_of(stack)).findings
        if f.policy.startswith("memory-tier") or f.policy in judged
    ]


def test_on_an_existing_cluster_the_plan_finds_the_gang_confined(tmp_path: Path) -> None:
    recording = _render(placement=TargetPlacement.on_existing_cluster("gke"))
    assert _network_findings(recording, tmp_path, "gke-dev") == []


@pytest.mark.parametrize("stack", ["gke-dev", "gke-prod"])
def test_the_plan_finds_the_rendered_gang_confined_roomy_and_secret(
    tmp_path: Path, stack: str
) -> None:
    """In spotproof's namespace: the tier has room, its secret is mounted, the reclaims
    count as reclaims, the namespace's rule leaves the gang's pods to the gang's own
    policy, which admits the gang on every port and nothing else (gke-prod: the metrics
    scrape reaches the metrics port alone)."""
    identity = dataclasses.replace(IDENTITY, service_account=ServiceAccountRef("spotproof", "t"))
    assert _network_findings(_render(identity=identity), tmp_path, stack) == []


def test_a_gang_that_replaces_reclaimed_workers_keeps_its_tier_worth_keeping() -> None:
    assert memory_tiers.replaces_reclaimed_pods_alone(_spec(_render()))
    restart_gang = _render(recovery=GangRecovery.RESTART_GANG, replica_secret=None)
    assert not memory_tiers.replaces_reclaimed_pods_alone(_spec(restart_gang))


@pytest.mark.parametrize(
    ("trainer", "options", "says"),
    [
        (STATEFUL, {"nodes": 1}, "needs a gang: nodes = 1; allowed: 2 or more"),
        (
            dataclasses.replace(STATEFUL, launcher=Launcher.NONE),
            {},
            "trainer.launcher = Launcher.NONE; allowed: Launcher.TORCHRUN",
        ),
        (STATEFUL, {"replica_secret": None}, "replica_secret = None; allowed: a secret"),
        (STATEFUL, {"replica_secret": "short"}, "holds 5 bytes; allowed: 32 to 4096"),
        (TRAINER, {}, "trainer.state_mib = None; allowed: trainer.state_mib"),
        (STATEFUL, {"nodes": 40, "job_name": "a" * 45}, "too long a name for a gang of 40"),
    ],
    ids=["one node", "no launcher", "no secret", "short secret", "no size", "long name"],
)
def test_what_replace_rank_cannot_render_is_refused_in_one_line(
    trainer: Trainer, options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValueError, match=says) as raised:
        _render(trainer, **options)
    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith("TrainingJob ")


def test_the_leaders_pod_name_fits_where_the_longest_workers_does() -> None:
    # <name>-workers-0-2-abcde is the longest of a four-node gang: 63 with a 45-letter name.
    _render(job_name="a" * 45)


def test_restart_gang_renders_what_it_always_did() -> None:
    default = _render(recovery=GangRecovery.RESTART_GANG, replica_secret=None)
    [jobset] = default.of_type(JOBSET)
    stated = _render(replica_secret=None, recovery="restart-gang")
    assert _spec(stated) == jobset.inputs["spec"]
    assert [r["name"] for r in jobset.inputs["spec"]["replicatedJobs"]] == ["workers"]
    assert default.of_type(SECRET) == default.of_type(NETWORK_POLICY) == []
    env = {e["name"] for e in _container(_jobs(jobset.inputs["spec"])["workers"])["env"]}
    assert "MEMORY_TIER_DIR" not in env


def test_the_budget_still_covers_every_pod_of_the_gang() -> None:
    [budget] = _render().of_type(PDB)
    assert budget.inputs["spec"] == {
        "minAvailable": 4,
        "selector": {"matchLabels": {GANG: "llm-pretrain"}},
    }
