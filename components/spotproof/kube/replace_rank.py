"""What ``TrainingJob(recovery=GangRecovery.REPLACE_RANK)`` adds to a gang's pods: the
memory tier and its peer replicas (``runtime.checkpointer.tiers``), which only a gang whose
surviving pods outlive a reclaim can use (``kube.jobset.replace_rank_spec``).

Each pod gets:

- the tier: an ``emptyDir`` with ``medium: Memory`` and a ``sizeLimit`` of
  :data:`~spotproof.scheduling.run_profile.TIER_COPIES` times the state the trainer states
  (or ``memory_tier_gib``), at :data:`TIER_DIR`, named by ``MEMORY_TIER_DIR``. A
  memory-backed ``emptyDir`` is a tmpfs whose "files you write count against the memory
  limit of the container that wrote them"
  (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir), so the tier's size is
  added to the container's memory request and limit (``Trainer.memory`` is what the trainer
  needs besides);
- its replica server's port, ``REPLICA_PORT``, as a named container port;
- ``POD_IP`` and ``NODE_NAME`` from the downward API (``status.podIP``, ``spec.nodeName``,
  https://kubernetes.io/docs/concepts/workloads/pods/downward-api/#downwardapi-fieldRef):
  where its peers send replicas, and which node a replica must not be held on;
- the gang's replica secret, a Kubernetes Secret the component renders from
  ``TrainingJobArgs.replica_secret``, mounted read-only, its file named by
  ``REPLICA_SECRET_FILE`` (``runtime.storage.replica_auth``: every request to a replica
  server is signed with it).
- :data:`~spotproof.catalog.labels.GANG_NETWORK_LABEL`, which leaves the pod out of the
  workload namespace's ingress rule, and a NetworkPolicy of the gang's own that admits the
  gang's pods, and them alone, on every port (``kube.network_policy`` says why every port).

``plan.simulation.memory_tiers`` checks the first four of any manifest, and
``policy.network_policies`` the last.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.catalog import jobset as jobset_facts
from spotproof.catalog.labels import GANG_NETWORK_ISOLATED, GANG_NETWORK_LABEL
from spotproof.kube import jobset
from spotproof.kube.baseline import MANAGED_BY
from spotproof.kube.network_policy import gang_traffic
from spotproof.kube.training_spec import job_spec
from spotproof.runtime import settings
from spotproof.runtime.launcher import Launcher
from spotproof.runtime.storage.replica_auth import SECRET_BYTES
from spotproof.scheduling import quantity
from spotproof.scheduling.run_profile import TIER_COPIES

TIER_VOLUME = "memory-tier"
TIER_DIR = "/var/spotproof/tier"
SECRET_VOLUME = "replica-secret"
SECRET_DIR = "/var/run/spotproof/replica"
SECRET_KEY = "secret"
SECRET_MODE = 0o440
"""Read by the owner and the group: the pod's ``fsGroup`` owns a Secret volume's files."""
REPLICA_PORT_NAME = "replica"
MIB = 1 << 20


def tier_mib(state_mib: float | None, memory_tier_gib: float | None) -> int:
    """The tier's ``sizeLimit`` in MiB: ``memory_tier_gib`` when given, else room for
    ``TIER_COPIES`` copies of the state (the trainer's own saves and its peer's replicas)."""
    if memory_tier_gib is not None:
        return math.ceil(memory_tier_gib * 1024)
    return math.ceil(TIER_COPIES * (state_mib or 0))


def memory_with_tier(memory: str, size_mib: int) -> str:
    """``memory`` (a quantity) plus the tier's ``size_mib``, in MiB."""
    return f"{math.ceil(quantity.parse(memory) / MIB) + size_mib}Mi"


def environment() -> list[dict[str, Any]]:
    """The variables the runtime reads for its memory tier."""
    downward = {settings.POD_IP.name: "status.podIP", settings.NODE_NAME.name: "spec.nodeName"}
    return [
        {"name": settings.MEMORY_TIER_DIR.name, "value": TIER_DIR},
        {"name": settings.REPLICA_PORT.name, "value": str(settings.REPLICA_PORT.default)},
        {"name": settings.REPLICA_SECRET_FILE.name, "value": f"{SECRET_DIR}/{SECRET_KEY}"},
        *(
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in downward.items()
        ),
    ]


def with_tier(job: dict[str, Any], *, secret_name: str, size_mib: int) -> dict[str, Any]:
    """``job`` (a one-pod Job ``spec``) with the tier's and the secret's volumes mounted into
    its first container and the replica port declared."""
    pod = job["template"]["spec"]
    pod["volumes"] = [
        *pod.get("volumes", []),
        {"name": TIER_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{size_mib}Mi"}},
        {
            "name": SECRET_VOLUME,
            "secret": {"secretName": secret_name, "defaultMode": SECRET_MODE},
        },
    ]
    container = pod["containers"][0]
    container["volumeMounts"] = [
        *container.get("volumeMounts", []),
        {"name": TIER_VOLUME, "mountPath": TIER_DIR},
        {"name": SECRET_VOLUME, "mountPath": SECRET_DIR, "readOnly": True},
    ]
    port = {"name": REPLICA_PORT_NAME, "containerPort": settings.REPLICA_PORT.default}
    container["ports"] = [*container.get("ports", []), port]
    return job


def refusal(job_name: str, args: Any) -> str | None:
    """What makes ``args`` (``TrainingJobArgs`` with ``REPLACE_RANK``) unrenderable, in one
    line naming what is allowed; None when nothing does."""
    where = f"TrainingJob {job_name}: recovery=GangRecovery.REPLACE_RANK"
    if args.nodes < 2:
        return f"{where} needs a gang: nodes = {args.nodes}; allowed: 2 or more"
    if args.trainer.launcher is not Launcher.TORCHRUN:
        return (
            f"{where} needs torchrun to wait for a replaced rank: trainer.launcher = "
            f"Launcher.{args.trainer.launcher.name}; allowed: Launcher.TORCHRUN"
        )
    secret = args.replica_secret
    if secret is None:
        return (
            f"{where} needs the gang's replica secret: replica_secret = None; allowed: a "
            'secret of 32 or more bytes, e.g. pulumi.Config().require_secret("replicaSecret")'
        )
    low, high = SECRET_BYTES
    if isinstance(secret, str) and not low <= len(secret.strip().encode()) <= high:
        return (
            f"{where}: replica_secret holds {len(secret.strip().encode())} bytes; allowed: "
            f"{low} to {high} (openssl rand -hex 32)"
        )
    if args.memory_tier_gib is None and args.trainer.state_mib is None:
        return (
            f"{where} sizes the memory tier from the state: trainer.state_mib = None; "
            "allowed: trainer.state_mib (MiB of state per pod) or memory_tier_gib"
        )
    if args.memory_tier_gib is not None and not args.memory_tier_gib > 0:
        return f"{where}: memory_tier_gib = {args.memory_tier_gib}; allowed: above 0"
    return None


def jobs(
    job_name: str,
    args: Any,
    env: list[dict[str, Any]],
    grace: int,
    labels: Mapping[str, str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The leader's and the workers' one-pod Job specs of a REPLACE_RANK gang: elastic
    torchrun (the leader hosting the store), the memory tier and the gang's network label
    on every pod."""
    size = tier_mib(args.trainer.state_mib, args.memory_tier_gib)
    memory = memory_with_tier(args.trainer.memory, size)
    labels = {**labels, GANG_NETWORK_LABEL: GANG_NETWORK_ISOLATED}
    env = [*env, *jobset.elastic_environment(grace), *environment()]
    jobs = []
    for leader in (True, False):
        command = jobset.elastic_command(
            job_name,
            nodes=args.nodes,
            processes_per_node=max(args.trainer.gpus, 1),
            hosts_store=leader,
            max_restarts=args.backoff_limit,
        )
        trainer = dataclasses.replace(
            args.trainer, memory=memory, command=(*command, *args.trainer.command)
        )
        one = job_spec(
            trainer,
            env,
            placement=args.placement,
            identity=args.identity,
            grace_period_seconds=grace,
            backoff_limit=args.backoff_limit,
            labels=labels,
        )
        secret = f"{job_name}-replica"
        jobs.append(with_tier(one, secret_name=secret, size_mib=size))
    return jobs[0], jobs[1]


def objects(
    name: str,
    job_name: str,
    namespace: str,
    secret: pulumi.Input[str] | None,
    parent: pulumi.Resource,
) -> list[pulumi.Resource]:
    """The gang's replica secret, and the NetworkPolicy that admits every port of its pods
    from its own pods only (the namespace's ingress rule leaves pods with the gang's network
    label out: ``kube.network_policy``)."""
    metadata = {"namespace": namespace, "labels": MANAGED_BY}
    gang = {jobset_facts.JOBSET_NAME_LABEL: job_name}
    return [
        k8s.core.v1.Secret(
            f"{name}-replica-secret",
            metadata={"name": f"{job_name}-replica", **metadata},
            string_data={SECRET_KEY: pulumi.Output.secret(secret)},
            opts=pulumi.ResourceOptions(parent=parent),
        ),
        k8s.networking.v1.NetworkPolicy(
            f"{name}-gang-network",
            metadata={"name": f"{job_name}-gang", **metadata},
            spec=gang_traffic(gang),
            opts=pulumi.ResourceOptions(parent=parent),
        ),
    ]
