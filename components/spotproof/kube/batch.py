"""Queue-fed batch workers on reclaimable capacity: ``BatchWorkers``.

The workers are a Deployment: every pod pulls items from the work queue until it is
reclaimed, so there is no completion to wait for and nothing to restart by hand. A
reclaimed worker hands back what it has not started (``spotproof.runtime.batch``) and its
replacement, or any other worker, takes it; a worker that dies without a word loses
nothing either, its leases simply run out. Hence what the Deployment does *not* carry,
unlike a training Job:

- no PodDisruptionBudget and no ``do-not-disrupt`` / ``safe-to-evict: "false"``: evicting
  a worker costs at most its item in flight, and blocking the drain would only delay the
  hand-back until the node is gone;
- no worker before KEDA scales it: created at ``replicas: 0``, which Pulumi never sends
  again (``catalog.keda.REPLICAS_OWNED_BY_SCALER``).

What it does carry: the target's selector, tolerations and priority, the grace the
preemption path honours, the worker identity (allowed to consume the queue and to write
results under one prefix only: each cloud's ``WorkQueue``), no service-account token (the
workers never call the Kubernetes API; GKE's metadata server, or the EKS and AKS identity
webhooks' own projected token, give the cloud identity), and, with KEDA, a
``ScaledObject`` on the queue's depth whose ``TriggerAuthentication`` uses the KEDA
operator's cloud identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.catalog import Cloud, keda
from spotproof.fleet import BatchSpec
from spotproof.kube.baseline import MANAGED_BY, RESTRICTED
from spotproof.kube.network_policy import isolate_namespace
from spotproof.kube.pods import Trainer, pod_spec
from spotproof.kube.workload import (
    ServiceAccountRef,
    TargetPlacement,
    WorkloadIdentity,
    target_labels,
)
from spotproof.runtime import settings

WORKER_CONTAINER = "worker"
WORKER_SERVICE_ACCOUNT = "batch-worker"


def worker_account(batch: BatchSpec) -> ServiceAccountRef:
    """The service account the workers run as, which the worker's cloud identity trusts."""
    return ServiceAccountRef(batch.namespace, WORKER_SERVICE_ACCOUNT)


@dataclass(frozen=True)
class QueueScaler:
    """How KEDA reads a work queue's depth: a trigger of ``catalog.keda.TRIGGERS``."""

    trigger: str
    metadata: pulumi.Input[dict[str, str]]
    """The trigger's metadata, the target value (``itemsPerWorker``) included."""


@dataclass(frozen=True)
class WorkQueueBinding:
    """What batch workers need from their cloud's work queue, whatever the cloud."""

    queue_url: pulumi.Input[str]
    """``sqs://NAME``, ``pubsub://PROJECT/SUBSCRIPTION`` or ``azqueue://NAME?...``
    (``spotproof.runtime.batch.open_queue``)."""
    results_url: pulumi.Input[str]
    """The results prefix in the stack's bucket, e.g. ``gs://bucket/results``."""
    identity: WorkloadIdentity
    """The worker's: its service account and the cloud identity it acts as."""
    scaler: QueueScaler
    environment: dict[str, str] = field(default_factory=dict)
    """What the queue's client needs besides the URL (``AWS_REGION`` for SQS)."""
    ready: list[pulumi.Resource] = field(default_factory=list)
    """What must exist before the KEDA operator starts: the binding of its identity, which
    the queue's owner makes. An EKS Pod Identity association, say, is read only when a pod
    is created, so a pod created before it never gets credentials. (The workers wait for
    their own identity's ``granted_by``.)"""


@dataclass(kw_only=True)
class BatchWorkersArgs:
    batch: BatchSpec
    placement: TargetPlacement
    """``cluster.placement(batch.target)``."""
    queue: WorkQueueBinding
    """``cluster.work_queue``: the cloud's queue, results prefix and worker identity."""
    autoscaled: bool
    """Whether KEDA is installed (``spec.keda``): a ScaledObject scales the workers between
    ``minWorkers`` and ``maxWorkers``; without it ``minWorkers`` run."""
    cloud: Cloud
    """The cluster's cloud: a namespace created here lets its pods reach this cloud's
    identity endpoint and nothing it does not need (``kube.network_policy``)."""
    create_namespace: bool = False
    """Whether ``batch.namespace`` is not the cluster's workload namespace (the baseline's)
    and must be created, with the same Pod Security Standard and isolation."""
    metrics_port: int | None = None
    """Where the workers serve their metrics (``kube.pods.Trainer.metrics_port``; the image
    needs ``spotproof[metrics]``): the stack's monitoring scrapes it; None, none are."""
    ready: list[pulumi.Resource] = field(default_factory=list)
    """What must exist before anything of the workers: the namespace they run in, where the
    cluster creates it (``ClusterForWorkloads.namespaces``)."""


def workload_namespace(
    name: str,
    namespace: str,
    cloud: Cloud,
    parent: pulumi.Resource,
    moved_from: pulumi.Input[str] | None = None,
) -> k8s.core.v1.Namespace:
    """A workload namespace besides the baseline's, with the same Pod Security Standard and
    isolation (``kube.network_policy``). ``moved_from``: the URN of the component that
    created it before, so that a stack already deployed keeps its namespace (and what is in
    it) instead of Pulumi deleting it for a new one."""
    aliases = [pulumi.Alias(parent=moved_from)] if moved_from is not None else None
    child = pulumi.ResourceOptions(parent=parent, aliases=aliases)
    created = k8s.core.v1.Namespace(
        f"{name}-namespace",
        metadata={"name": namespace, "labels": {**MANAGED_BY, **RESTRICTED}},
        opts=child,
    )
    isolate_namespace(
        f"{name}-network", created.metadata.apply(lambda m: m["name"]), cloud, MANAGED_BY, child
    )
    return created


class BatchWorkers(pulumi.ComponentResource):
    """The worker Deployment, its service account and, with KEDA, its ScaledObject."""

    deployment_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: BatchWorkersArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:kube:BatchWorkers", name, None, opts)
        batch, queue = args.batch, args.queue
        account = queue.identity.service_account
        labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "batch-worker"}

        needs: list[pulumi.Resource] = list(args.ready)
        if args.create_namespace:
            needs.append(workload_namespace(name, account.namespace, args.cloud, self))
        service_account = k8s.core.v1.ServiceAccount(
            f"{name}-account",
            metadata={
                "name": account.name,
                "namespace": account.namespace,
                "labels": MANAGED_BY,
                "annotations": queue.identity.service_account_annotations,
            },
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*needs, *queue.identity.granted_by]
            ),
        )
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": name, "namespace": account.namespace, "labels": MANAGED_BY},
            spec=pulumi.Output.all(queue.queue_url, queue.results_url).apply(
                lambda urls: deployment_spec(args, labels, queue_url=urls[0], results_url=urls[1])
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[service_account],
                ignore_changes=[keda.REPLICAS_OWNED_BY_SCALER] if args.autoscaled else None,
            ),
        )
        self.deployment_name = deployment.metadata.apply(lambda m: m["name"])
        if args.autoscaled:
            scaled_object(
                name,
                account.namespace,
                batch,
                queue.scaler,
                pulumi.ResourceOptions(parent=self, depends_on=[deployment]),
            )
        self.register_outputs({"deployment_name": self.deployment_name})


def worker_environment(
    batch: BatchSpec, queue: WorkQueueBinding, *, queue_url: str, results_url: str
) -> dict[str, str]:
    """What the batch worker reads (``spotproof.runtime.settings`` defines each variable),
    and what the queue's and the identity's clients need."""
    return {
        **queue.identity.environment,
        **queue.environment,
        settings.QUEUE_URL.name: queue_url,
        settings.RESULTS_URL.name: results_url,
        settings.GRACE_SECONDS.name: str(batch.grace_period_seconds),
        settings.LEASE_SECONDS.name: str(batch.lease_seconds),
        settings.BATCH_SIZE.name: str(batch.batch_size),
        settings.MAX_DELIVERIES.name: str(batch.max_deliveries),
        settings.PROGRESS_SECONDS.name: f"{settings.PROGRESS_SECONDS.default:g}",
    }


def deployment_spec(
    args: BatchWorkersArgs, labels: dict[str, str], *, queue_url: str, results_url: str
) -> dict[str, Any]:
    batch, queue = args.batch, args.queue
    environment = worker_environment(batch, queue, queue_url=queue_url, results_url=results_url)
    worker = Trainer(
        image=batch.image,
        command=batch.command,
        cpu=batch.cpu,
        memory=batch.memory,
        gpus=batch.gpus,
        metrics_port=args.metrics_port,
    )
    pod = pod_spec(
        worker,
        [{"name": k, "value": v} for k, v in environment.items()],
        placement=args.placement,
        identity=queue.identity,
        grace_period_seconds=batch.grace_period_seconds or 30,
        restart_policy="Always",
        container=WORKER_CONTAINER,
    )
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {
                "labels": {**queue.identity.pod_labels, **labels, **target_labels(args.placement)}
            },
            "spec": pod,
        },
    }
    # With KEDA: none until it scales them (catalog.keda.REPLICAS_OWNED_BY_SCALER).
    spec["replicas"] = 0 if args.autoscaled else batch.min_workers
    return spec


def scaled_object(
    name: str,
    namespace: str,
    batch: BatchSpec,
    scaler: QueueScaler,
    opts: pulumi.ResourceOptions,
) -> k8s.apiextensions.CustomResource:
    """A ScaledObject on the Deployment ``name`` and the TriggerAuthentication it reads the
    queue with: the KEDA operator's own cloud identity (``catalog.keda.TRIGGER_IDENTITY``)."""
    authentication = k8s.apiextensions.CustomResource(
        f"{name}-trigger-auth",
        api_version=keda.API_VERSION,
        kind=keda.TRIGGER_AUTHENTICATION,
        metadata={"name": name, "namespace": namespace, "labels": MANAGED_BY},
        spec={"podIdentity": {"provider": keda.TRIGGER_IDENTITY[scaler.trigger]}},
        opts=opts,
    )
    return k8s.apiextensions.CustomResource(
        f"{name}-scaler",
        api_version=keda.API_VERSION,
        kind=keda.SCALED_OBJECT,
        metadata={"name": name, "namespace": namespace, "labels": MANAGED_BY},
        spec=pulumi.Output.from_input(scaler.metadata).apply(
            lambda metadata: {
                "scaleTargetRef": {"name": name},
                "minReplicaCount": batch.min_workers,
                "maxReplicaCount": batch.max_workers,
                "triggers": [
                    {
                        "type": scaler.trigger,
                        "metadata": dict(metadata),
                        "authenticationRef": {"name": name},
                    }
                ],
            }
        ),
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(depends_on=[authentication])
        ),
    )
