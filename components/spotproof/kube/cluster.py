"""What every cloud's ``HybridCluster`` hands the workload layer, and the part of building
it that is the same on GKE, EKS and AKS.

:class:`ClusterForWorkloads` declares what a cluster hands its workloads once, for the
three clouds and for ``spotproof.program``. Each cloud's ``HybridCluster`` derives from it,
creates what only its cloud has (the cluster, its pools, the checkpoint bucket, the work
queue) and leaves the rest to it: the Kubernetes provider and what is applied through it
once the API server is up, the trainer's service account, KEDA for the batch workers, and
the registered outputs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as k8s

from spotproof.fleet import BatchSpec, FleetSpec, PoolClass, SmokeTest
from spotproof.kube.addons import ControllerArgs, JobSetController, KedaController, KueueController
from spotproof.kube.baseline import MANAGED_BY, ClusterBaseline, ClusterBaselineArgs
from spotproof.kube.batch import WorkQueueBinding, worker_account, workload_namespace
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, WorkloadIdentity

TRAINER_SERVICE_ACCOUNT = "spotproof-trainer"


def trainer_account(smoke: SmokeTest | None) -> ServiceAccountRef:
    """The service account trainers run as, which the bucket's identity trusts: in the
    smoke test's namespace, or the default one when the stack has no smoke test."""
    return ServiceAccountRef((smoke or SmokeTest()).namespace, TRAINER_SERVICE_ACCOUNT)


class CheckpointStorage(Protocol):
    """What workloads need of a cloud's ``CheckpointBucket``."""

    url: pulumi.Output[str]
    """``gs://``, ``s3://`` or ``az://`` and the bucket (or container)."""
    identity: WorkloadIdentity
    """The trainer's service account and the cloud identity that may write checkpoints."""


class QueueForWorkers(Protocol):
    """What the cluster needs of a cloud's ``WorkQueue``."""

    binding: WorkQueueBinding
    keda_identity: pulumi.Output[dict[str, Any]]
    """The KEDA chart's ``podIdentity`` values: the identity that reads the queue's depth."""


class ClusterForWorkloads(pulumi.ComponentResource, ABC):
    """A cluster as its workloads see it, whatever the cloud.

    Children are Kubernetes objects too; they use :attr:`provider`, built from the
    cluster's own kubeconfig, never an ambient one.
    """

    cluster_name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    """A secret, as it names the endpoint."""
    provider: k8s.Provider
    baseline: ClusterBaseline
    controllers: list[pulumi.Resource]
    """What a ``TrainingJob`` needs installed first: the JobSet controller and, where the
    fleet queues work, Kueue and its queues."""
    bucket: CheckpointStorage
    pool_names: list[str]
    """The system pool's name (``system`` on every cloud), then the GPU pools'."""
    workload_identity: WorkloadIdentity
    """The trainer's service account and the cloud identity it acts as: the bucket's."""
    trainer_account: k8s.core.v1.ServiceAccount
    """That service account, created with the cluster (whether or not it runs a smoke test)."""
    work_queue: WorkQueueBinding | None
    """With ``spotproof:batch``: the cloud's work queue, results prefix and worker identity."""
    autoscaler: pulumi.Resource | None
    """KEDA, where it scales the batch workers."""
    namespaces: list[pulumi.Resource]
    """What creates each workload namespace: the baseline (the trainer's), and with
    ``spotproof:batch`` in a namespace of its own, that one. Anything namespaced in them
    waits for these."""
    monitoring_outputs: Mapping[str, pulumi.Input[Any]] | None = None
    """With ``spotproof:monitoring`` on: what the cloud's ``Monitoring`` component tells
    its user (where the rules and the dashboard are), exported as the stack output
    ``monitoring``."""
    drill_grant: Mapping[str, pulumi.Input[str]] | None = None
    """With ``spotproof:drill``: where the cloud's drill grant is, keyed as the stack output
    ``drill`` is (``spotproof.drill.grants.output_keys``); None without it."""

    @abstractmethod
    def placement(self, target: PoolClass) -> TargetPlacement:
        """What a workload aimed at ``target`` needs to know about the pools that serve it."""

    def _connect(
        self,
        name: str,
        spec: FleetSpec,
        *,
        cluster_name: pulumi.Output[str],
        kubeconfig: pulumi.Output[str],
        depends_on: list[pulumi.Resource],
    ) -> KueueController | None:
        """:attr:`cluster_name` and :attr:`kubeconfig`, the Kubernetes provider built from
        that kubeconfig, and the baseline and the add-ons of ``spec`` applied through it.
        Returns Kueue, where ``spec`` installs it, for the cloud's own queues.

        The provider applies server-side on every cloud alike. It waits for ``depends_on``:
        admission webhooks and add-ons need a node to run on."""
        self.cluster_name, self.kubeconfig = cluster_name, kubeconfig
        self.provider = k8s.Provider(
            f"{name}-kubernetes",
            kubeconfig=kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )
        self.baseline = ClusterBaseline(
            f"{name}-baseline",
            ClusterBaselineArgs(
                namespace=trainer_account(spec.smoke_test).namespace, cloud=spec.cloud
            ),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        self.controllers = []
        beside = pulumi.ResourceOptions(parent=self)
        if spec.jobset is not None:
            self.controllers.append(
                JobSetController(
                    f"{name}-jobset",
                    ControllerArgs(
                        version=spec.jobset.version, cloud=spec.cloud, provider=self.provider
                    ),
                    opts=beside,
                )
            )
        if spec.kueue is None:
            return None
        kueue = KueueController(
            f"{name}-kueue",
            ControllerArgs(version=spec.kueue.version, cloud=spec.cloud, provider=self.provider),
            opts=beside,
        )
        self.controllers.append(kueue)
        return kueue

    def _trainer_and_batch(
        self,
        name: str,
        spec: FleetSpec,
        bucket: CheckpointStorage,
        work_queue: Callable[[BatchSpec, ServiceAccountRef], QueueForWorkers],
    ) -> None:
        """The trainer's service account, bound to ``bucket``'s identity, and with
        ``spotproof:batch`` the cloud's work queue for the workers' service account
        (``work_queue``) and KEDA scaling them. Needs :meth:`_connect` first."""
        self._require("_connect", "provider")
        self.bucket = bucket
        self.workload_identity = bucket.identity
        self.trainer_account = self._trainer_service_account(name, bucket.identity)
        self.work_queue, self.autoscaler = None, None
        self.namespaces = [self.baseline]
        if (
            spec.batch is not None
            and spec.batch.namespace != trainer_account(spec.smoke_test).namespace
        ):
            # Created with the cluster, not with the workers: what else lives in it (the
            # monitoring's scrape configuration) waits for it here. Before 0.2 it was the
            # BatchWorkers component's, which program.batch_workers names "<stack>-batch".
            workers = pulumi.create_urn(f"{spec.stack}-batch", "spotproof:kube:BatchWorkers")
            self.namespaces.append(
                workload_namespace(
                    f"{name}-batch", spec.batch.namespace, spec.cloud, self, moved_from=workers
                )
            )
        if spec.batch is not None:
            work = work_queue(spec.batch, worker_account(spec.batch))
            self.work_queue = work.binding
            self.autoscaler = self._batch_autoscaler(
                name, spec, work.keda_identity, ready=work.binding.ready
            )

    def _register(self, gpu_pool_names: list[str], **more: pulumi.Input[str]) -> None:
        """:attr:`pool_names`, the system pool first, and the outputs every cluster
        registers, with the cloud's own (``more``). Last: after :meth:`_connect` and
        :meth:`_trainer_and_batch`."""
        self._require("_trainer_and_batch", "trainer_account")
        self.pool_names = ["system", *gpu_pool_names]
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "kubeconfig": self.kubeconfig,
                **more,
                "bucket_url": self.bucket.url,
                "pool_names": self.pool_names,
            }
        )

    def _require(self, step: str, sets: str) -> None:
        # A cloud's HybridCluster calls the steps in order; one skipped would otherwise
        # surface as an AttributeError far from the cause.
        if not hasattr(self, sets):
            raise TypeError(f"{type(self).__name__} must call {step} first")

    def _trainer_service_account(
        self, name: str, identity: WorkloadIdentity
    ) -> k8s.core.v1.ServiceAccount:
        """The service account every trainer on the cluster runs as (``identity``'s), with the
        annotations its cloud binds it by, in the baseline's namespace. A cluster creates it
        whether or not the stack has a smoke test: a user's ``TrainingJob`` runs as it too.

        It is created after what binds and grants ``identity`` (``granted_by``), and so is
        every workload that depends on it."""
        account = identity.service_account
        return k8s.core.v1.ServiceAccount(
            f"{name}-trainer",
            metadata={
                "name": account.name,
                "namespace": account.namespace,
                "labels": MANAGED_BY,
                "annotations": identity.service_account_annotations,
            },
            # Trainers never call the Kubernetes API (see pods.pod_spec).
            automount_service_account_token=False,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=self.provider,
                depends_on=[self.baseline, *identity.granted_by],
            ),
        )

    def _batch_autoscaler(
        self,
        name: str,
        spec: FleetSpec,
        identity_values: pulumi.Input[dict[str, Any]],
        *,
        ready: list[pulumi.Resource],
    ) -> KedaController | None:
        """KEDA, where the fleet's batch workers are scaled by it (``spec.keda``), acting as
        the identity the cloud's ``WorkQueue`` made for it (``identity_values``: the chart's
        ``podIdentity`` section), once its binding exists (``ready``)."""
        if spec.keda is None:
            return None
        return KedaController(
            f"{name}-keda",
            ControllerArgs(version=spec.keda.version, cloud=spec.cloud, provider=self.provider),
            identity_values,
            opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
        )
