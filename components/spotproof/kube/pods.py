"""The pod every spotproof workload runs in: the user's container (:class:`Trainer`) and
the pod around it (:func:`pod_spec`), shared by the smoke Job, ``TrainingJob`` and the
batch workers' Deployment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spotproof import scheduling
from spotproof.kube.workload import TargetPlacement, WorkloadIdentity
from spotproof.runtime import settings
from spotproof.runtime.launcher import Launcher
from spotproof.runtime.metrics import names as metric_names

TRAINER_CONTAINER = "trainer"


@dataclass(frozen=True, kw_only=True)
class Trainer:
    """The user's training container."""

    image: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    """Its own configuration; ``CHECKPOINT_URL`` and ``GRACE_SECONDS`` are added."""
    cpu: str = "4"
    memory: str = "16Gi"
    """Requested, and the memory limit too (a quantity: ``16Gi``)."""
    gpus: int = 1
    """``nvidia.com/gpu`` per pod; 0 for CPU work."""
    launcher: Launcher = Launcher.TORCHRUN
    """How a pod of a multi-node run starts it; a one-node run starts ``command`` as is."""
    state_mib: float | None = None
    step_seconds: float | None = None
    """MiB of state per pod, seconds per step: what the plan sizes checkpoints by."""
    metrics_port: int | None = None
    """The port the container serves Prometheus metrics on (spotproof's runtime does when
    ``METRICS_PORT`` is set: ``runtime.metrics``, the ``metrics`` extra in the image). Set,
    the pod gets ``METRICS_PORT`` and a container port named ``metrics`` that the stack's
    scrape configuration selects; None, neither."""


RUN_AS = 10001
"""The user and group trainers run as (the image's ``USER``): above 10000, clear of the
UIDs a node's own accounts use, so a container escape does not land as one of them."""
SCRATCH_SIZE_LIMIT = "1Gi"
"""The scratch ``/tmp``'s cap. Checkpoints stream from memory to the store and never touch it; it
holds what libraries spill (torch's caches, temporary files). Without a cap a runaway writer fills
the node's disk and gets every pod on it evicted; with one the kubelet evicts only this pod, which
the Job replaces (https://kubernetes.io/docs/concepts/storage/volumes/#emptydir)."""


def pod_spec(
    trainer: Trainer,
    env: list[dict[str, Any]],
    *,
    placement: TargetPlacement,
    identity: WorkloadIdentity,
    grace_period_seconds: int,
    restart_policy: str = "Never",
    container: str = TRAINER_CONTAINER,
) -> dict[str, Any]:
    """The pod every spotproof workload runs in, in Kubernetes spelling: the target's
    selector, tolerations and priority, the identity's service account, the grace the
    preemption path honours, GPU limits, a non-root read-only container with a scratch
    ``/tmp``. ``env`` is the whole environment of the container."""
    limits = {"memory": trainer.memory}
    if trainer.gpus:
        # A quantity, as the API spells it: a string, not a number.
        limits[scheduling.GPU_RESOURCE] = str(trainer.gpus)
    ports = []
    if trainer.metrics_port is not None:
        if all(item["name"] != settings.METRICS_PORT.name for item in env):
            env = [*env, {"name": settings.METRICS_PORT.name, "value": str(trainer.metrics_port)}]
        ports = [{"name": metric_names.PORT_NAME, "containerPort": trainer.metrics_port}]
    spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "serviceAccountName": identity.service_account.name,
        # No Kubernetes API token: nothing in the pod calls the API, and a stolen token is
        # a foothold. The cloud identity does not depend on it: EKS Pod Identity and Azure
        # workload identity inject projected tokens of their own whatever this says (their
        # webhooks: aws/amazon-eks-pod-identity-webhook pkg/handler/handler.go,
        # Azure/azure-workload-identity pkg/webhook/webhook.go), and GKE's metadata server
        # needs none; the setting governs only the kube-api-access volume
        # (https://kubernetes.io/docs/tasks/configure-pod-container/configure-service-account/).
        "automountServiceAccountToken": False,
        **where_to_run(placement),
        "terminationGracePeriodSeconds": grace_period_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": container,
                "image": trainer.image,
                "command": list(trainer.command),
                "env": env,
                **({"ports": ports} if ports else {}),
                "resources": {
                    "requests": {"cpu": trainer.cpu, "memory": trainer.memory},
                    "limits": limits,
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": SCRATCH_SIZE_LIMIT}}],
    }
    return spec


def where_to_run(placement: TargetPlacement) -> dict[str, Any]:
    """The pod fields that aim a pod at ``placement``, in Kubernetes spelling: the
    contract's priority, tolerations (the contract's and the platform's own taints),
    ``nodeSelector`` and, where it needs one, node affinity. Every pod aimed at a pool
    class takes them from here, so a trainer and anything that must land where the trainer
    lands (``kube.spares``) cannot drift apart."""
    where = scheduling.placement(
        placement.target, placement.accelerators, placement.fallback, placement.compute_class
    )
    fields: dict[str, Any] = {
        "priorityClassName": where.priority_class_name,
        "tolerations": [
            *(dict(t) for t in where.tolerations),
            *(scheduling.toleration_for(t) for t in placement.platform_taints),
        ],
        "nodeSelector": where.node_selector,
    }
    if where.node_affinity:
        fields["affinity"] = {"nodeAffinity": where.node_affinity}
    return fields
