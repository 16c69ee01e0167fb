"""A training gang on Kubernetes: one JobSet for a run on several nodes.

A multi-node run is one JobSet with one replicated Job of ``nodes`` Indexed pods. What
makes a reclaim cost nothing from the failure budget, while crashes still count:

- the child Job has ``backoffLimit: 0`` and a ``podFailurePolicy`` that fails it with
  reason ``PodFailurePolicy`` when a pod carries ``DisruptionTarget`` (the kubelet's
  graceful shutdown, an eviction by a drain, the pod garbage collector after the node is
  gone: https://kubernetes.io/docs/concepts/workloads/pods/disruptions/) or exits
  ``PREEMPTED`` after its final save;
- the JobSet's first failure-policy rule restarts the whole gang on that reason with
  ``RestartJobSetAndIgnoreMaxRestarts``; any other failure (a crash: the Job fails with
  ``BackoffLimitExceeded``) falls through to the default ``RestartJobSet``, counted
  against ``maxRestarts`` (kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``,
  ``site/static/examples/failure-policy/host-maintenance-event-model.yaml``);
- a configuration error (exit ``BAD_CONFIG`` from the trainer itself, with
  ``Launcher.NONE``) fails its child Job by the first ``podFailurePolicy`` rule, and the
  JobSet's first rule, matching that rule's failure message, fails the whole run at once
  (https://kubernetes.io/docs/tasks/job/pod-failure-policy/ gives the message, "Container
  main for pod default/... failed with exit code 42 matching FailJob rule at index 0";
  JobSet matches ``onJobFailureMessagePatterns`` as RE2 expressions against it,
  ``pkg/controllers/failure_policy.go``). Under torchrun the pod exits 1 whatever the
  trainer returned, so there a configuration error counts as a crash;
- ranks stopped by a peer wait to be torn down rather than fail their own Job first
  (``spotproof.runtime.checkpointer.gang``), since the controller acts on the first rule
  that matches any failed child Job (``catalog.jobset.FIRST_MATCHING_RULE_WINS``).

The rendezvous: the controller creates a headless Service named after the JobSet and gives
each pod a hostname (``catalog.jobset.pod_hostname``), so every rank reaches rank 0's pod at
``<jobset>-<job>-0-0.<jobset>``. torchrun runs there with a fixed ``--nnodes``, the
``static`` rendezvous hosted by node rank 0 (the pod's completion index), and
``--max-restarts=0``: a lost node cannot come back inside a pod, so every restart is the JobSet's,
of the whole gang; its shutdown timeout is the pod's grace less what torchrun needs to
leave, so a final save gets the grace and not torchrun's default 30 s. It is started through
``runtime.launcher.LAUNCH_SCRIPT``, so a rank stopped by SIGTERM exits ``PREEMPTED``
(torchrun itself would exit 1, which a reclaim that adds no ``DisruptionTarget`` could not
be told from a crash by); ``runtime.launcher`` says why each of these matters.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from spotproof.catalog import jobset, kubernetes_job
from spotproof.runtime import elastic, exit_codes, launcher, settings
from spotproof.runtime.checkpointer.gang import PEER_WAIT_SECONDS


class GangRecovery(StrEnum):
    """What a reclaim of one node of a gang restarts."""

    RESTART_GANG = "restart-gang"
    """Every pod: one replicated Job whose reclaimed pod fails it, and the JobSet recreates
    the whole gang without spending ``maxRestarts`` (the module docstring)."""
    REPLACE_RANK = "replace-rank"
    """Only the reclaimed rank's pod, unless it is the leader's: :func:`replace_rank_spec`."""


WORKERS = "workers"
"""The replicated Job's name: pods are ``<jobset>-workers-<0>-<rank>``."""
LEADER = "leader"
"""Under :attr:`GangRecovery.REPLACE_RANK`, the one-pod replicated Job that hosts torchrun's
rendezvous store: ``<jobset>-leader-0-0``."""
MASTER_PORT = 29500
"""Where rank 0 listens when the trainer forms the process group itself."""
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
"""The pod's index in an Indexed Job, for the downward API."""
RECLAIM_RULE = "ReclaimRestartsFree"
BAD_CONFIG_RULE = "BadConfigFailsAtOnce"


def child_pod_failure_policy(container: str) -> dict[str, Any]:
    """A configuration error (rule 0) and reclaims fail the child Job with reason
    ``PodFailurePolicy``; everything else counts toward ``backoffLimit: 0`` and fails it
    as a crash. The order is a contract with :func:`bad_config_pattern`."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": container,
                    "operator": "In",
                    "values": [exit_codes.BAD_CONFIG],
                },
            },
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": container,
                    "operator": "In",
                    "values": [exit_codes.PREEMPTED],
                },
            },
        ]
    }


def bad_config_pattern(container: str) -> str:
    """The child Job's failure message when rule 0 of :func:`child_pod_failure_policy`
    failed it, as an RE2 expression."""
    return (
        rf"^Container {container} for pod \S+ failed with exit code {exit_codes.BAD_CONFIG} "
        r"matching FailJob rule at index 0$"
    )


def rendezvous_host(name: str) -> str:
    """Rank 0's pod, through the headless Service the controller creates."""
    return f"{jobset.pod_hostname(name, WORKERS, 0, 0)}.{name}"


NODE_RANK = "NODE_RANK"
"""The pod's completion index, for torchrun's ``--node-rank`` (expanded by the kubelet)."""


def torchrun(name: str, nodes: int, processes_per_node: int) -> list[str]:
    """torchrun for one pod of the gang, started through the launch script; the trainer's
    own command follows."""
    return launcher.wrapped(
        launcher.torchrun(
            nodes=nodes,
            processes_per_node=processes_per_node,
            node_rank=f"$({NODE_RANK})",
            master_addr=rendezvous_host(name),
        )
    )


def torchrun_environment(grace_seconds: int) -> list[dict[str, Any]]:
    """What torchrun reads: the pod's node rank for its command line, and the shutdown
    timeout that lets its workers use the pod's ``grace_seconds`` (torchrun's default of
    30 s would SIGKILL a longer final save, ``runtime.launcher``)."""
    return [
        {"name": NODE_RANK, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        *(
            {"name": name, "value": value}
            for name, value in launcher.shutdown_environment(grace_seconds).items()
        ),
    ]


def gang_environment(name: str, nodes: int) -> list[dict[str, Any]]:
    """What a trainer that forms its own process group (one process per pod) reads: its
    rank is the pod's completion index."""
    return [
        {"name": settings.WORLD_SIZE.name, "value": str(nodes)},
        {"name": settings.RANK.name, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
        {"name": settings.MASTER_ADDR.name, "value": rendezvous_host(name)},
        {"name": settings.MASTER_PORT.name, "value": str(MASTER_PORT)},
    ]


def jobset_spec(
    name: str, job: Mapping[str, Any], *, nodes: int, max_restarts: int, container: str
) -> dict[str, Any]:
    """A JobSet ``spec`` running ``job`` (a one-pod Job ``spec``) on ``nodes`` pods."""
    child = {key: value for key, value in job.items() if key != "ttlSecondsAfterFinished"}
    child.update(
        completionMode="Indexed",
        completions=nodes,
        parallelism=nodes,
        backoffLimit=0,
        podFailurePolicy=child_pod_failure_policy(container),
    )
    return {
        "network": {"enableDNSHostnames": True},
        "failurePolicy": {
            "maxRestarts": max_restarts,
            "rules": [
                {
                    "name": BAD_CONFIG_RULE,
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                    "onJobFailureMessagePatterns": [bad_config_pattern(container)],
                },
                {
                    "name": RECLAIM_RULE,
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                },
            ],
        },
        "ttlSecondsAfterFinished": job.get("ttlSecondsAfterFinished"),
        "replicatedJobs": [{"name": WORKERS, "replicas": 1, "template": {"spec": child}}],
    }


# --- REPLACE_RANK: a gang whose ranks are replaced one at a time -------------------------

JOIN_TIMEOUT_SECONDS = 900
"""How long the surviving ranks' agents wait for a reclaimed rank's replacement to join
(``join_timeout`` of torchrun's ``c10d`` rendezvous, ``runtime.elastic.elastic_torchrun``):
a new node (a spot VM's start, up to a few minutes), the image pulled onto it, and torchrun
started. Longer, and a rank that never comes back holds the gang's GPUs idle that long."""
TEARDOWN_WAIT_SECONDS = int(PEER_WAIT_SECONDS)
"""How long a rank's launch script holds back its agent's failure, waiting for the JobSet's
restart to tear it down (``runtime.launcher.TEARDOWN_WAIT_ENV``): when the leader's node is
reclaimed every other agent fails at once, and reported first those failures would restart
the gang as a crash (``catalog.jobset.FIRST_MATCHING_RULE_WINS``). As long as
``runtime.checkpointer.gang.PEER_WAIT_SECONDS``, which is longer than the slowest way a
reclaimed pod's Job fails: the unreachable taint's 300 s before the taint manager evicts."""


def rendezvous_endpoint(name: str) -> str:
    """The leader's pod, through the headless Service, on the ``c10d`` store's port."""
    host = jobset.pod_hostname(name, LEADER, 0, 0)
    return f"{host}.{name}:{elastic.RENDEZVOUS_STORE_PORT}"


def elastic_command(
    name: str, *, nodes: int, processes_per_node: int, hosts_store: bool, max_restarts: int
) -> list[str]:
    """torchrun for one pod of a :attr:`GangRecovery.REPLACE_RANK` gang, started through the
    launch script; the trainer's own command follows. No ``--local-addr``: the pod's own
    name (``<jobset>-<job>-0-<index>.<jobset>``) is stable per index, so a replacement gets
    its predecessor's rank."""
    return launcher.wrapped(
        elastic.elastic_torchrun(
            nodes=nodes,
            processes_per_node=processes_per_node,
            endpoint=rendezvous_endpoint(name),
            hosts_store=hosts_store,
            run_id=name,
            max_restarts=max_restarts,
            join_timeout=JOIN_TIMEOUT_SECONDS,
        )
    )


def elastic_environment(grace_seconds: int) -> list[dict[str, Any]]:
    """``runtime.elastic.elastic_environment`` as a container's ``env``."""
    variables = elastic.elastic_environment(
        grace_seconds, TEARDOWN_WAIT_SECONDS, JOIN_TIMEOUT_SECONDS
    )
    return [{"name": key, "value": value} for key, value in variables.items()]


def rank_replacing_pod_failure_policy(container: str) -> dict[str, Any]:
    """A worker's reclaim is ignored: its Job (``Indexed``) creates a pod for that index again
    without counting the failure (``catalog.kubernetes_job.IGNORE``,
    ``REPLACED_PER_INDEX``), so the Job stays active and the JobSet does nothing
    (``catalog.jobset.ACTS_ON_FAILED_JOBS_ONLY``). Anything else counts toward
    ``backoffLimit: 0``, fails the Job with ``BackoffLimitExceeded`` and takes the JobSet's
    default ``RestartJobSet``, counted against ``maxRestarts``: a crash."""
    return {
        "rules": [
            {
                "action": kubernetes_job.IGNORE,
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": kubernetes_job.IGNORE,
                "onExitCodes": {
                    "containerName": container,
                    "operator": "In",
                    "values": [exit_codes.PREEMPTED],
                },
            },
        ]
    }


def replace_rank_spec(
    name: str,
    leader: Mapping[str, Any],
    workers: Mapping[str, Any],
    *,
    nodes: int,
    max_restarts: int,
    container: str,
) -> dict[str, Any]:
    """A JobSet ``spec`` of two replicated Jobs, from one-pod Job ``spec`` s: ``leader`` (one
    pod, hosting the rendezvous store) under :func:`jobset_spec`'s child policy, so its
    reclaim restarts the whole gang without spending ``maxRestarts``; and ``workers``
    (``nodes - 1`` Indexed pods) under :func:`rank_replacing_pod_failure_policy`, so a
    worker's reclaim replaces that pod alone while the others keep theirs (and their memory
    tier). ``catalog.jobset.REPLICATED_JOBS_DIFFER``: the webhook takes two templates, and
    the headless Service names the pods of both."""
    spec = jobset_spec(name, leader, nodes=1, max_restarts=max_restarts, container=container)
    [first] = spec["replicatedJobs"]
    first["name"] = LEADER
    child = {key: value for key, value in workers.items() if key != "ttlSecondsAfterFinished"}
    child.update(
        completionMode="Indexed",
        completions=nodes - 1,
        parallelism=nodes - 1,
        backoffLimit=0,
        podFailurePolicy=rank_replacing_pod_failure_policy(container),
    )
    spec["replicatedJobs"].append({"name": WORKERS, "replicas": 1, "template": {"spec": child}})
    return spec
