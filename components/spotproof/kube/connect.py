"""What every cluster component does once its API server is up, whatever the cloud."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.fleet import FleetSpec
from spotproof.kube.addons import ControllerArgs, JobSetController, KedaController, KueueController
from spotproof.kube.baseline import MANAGED_BY, ClusterBaseline, ClusterBaselineArgs
from spotproof.kube.workload import WorkloadIdentity


@dataclass(frozen=True)
class Connection:
    provider: k8s.Provider
    baseline: ClusterBaseline
    controllers: list[pulumi.Resource] = field(default_factory=list)
    """Add-ons workloads may need installed first (the JobSet controller, Kueue): a
    ``TrainingJob`` depends on them."""
    kueue: KueueController | None = None
    """Installed where the fleet has a queued pool (``spec.kueue``)."""


def connect(
    name: str,
    kubeconfig: pulumi.Input[str],
    namespace: str,
    spec: FleetSpec,
    opts: pulumi.ResourceOptions,
) -> Connection:
    """A cluster component's Kubernetes provider, the baseline and the add-ons of ``spec``
    applied through it.

    The provider is built from the cluster's own ``kubeconfig``, never an ambient one, and
    applies server-side on every cloud alike; ``opts`` carries its parent and what it
    waits for (a node to run admission webhooks and add-ons on)."""
    provider = k8s.Provider(
        f"{name}-kubernetes", kubeconfig=kubeconfig, enable_server_side_apply=True, opts=opts
    )
    through = pulumi.ResourceOptions(parent=opts.parent, provider=provider)
    baseline = ClusterBaseline(
        f"{name}-baseline", ClusterBaselineArgs(namespace=namespace, cloud=spec.cloud), opts=through
    )
    controllers: list[pulumi.Resource] = []
    beside = pulumi.ResourceOptions(parent=opts.parent)
    if spec.jobset is not None:
        controllers.append(
            JobSetController(
                f"{name}-jobset",
                ControllerArgs(version=spec.jobset.version, cloud=spec.cloud, provider=provider),
                opts=beside,
            )
        )
    kueue = None
    if spec.kueue is not None:
        kueue = KueueController(
            f"{name}-kueue",
            ControllerArgs(version=spec.kueue.version, cloud=spec.cloud, provider=provider),
            opts=beside,
        )
        controllers.append(kueue)
    return Connection(provider, baseline, controllers, kueue)


def trainer_service_account(
    name: str, identity: WorkloadIdentity, connection: Connection, parent: pulumi.Resource
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
        # Trainers never call the Kubernetes API (see training.pod_spec).
        automount_service_account_token=False,
        opts=pulumi.ResourceOptions(
            parent=parent,
            provider=connection.provider,
            depends_on=[connection.baseline, *identity.granted_by],
        ),
    )


def batch_autoscaler(
    name: str,
    spec: FleetSpec,
    identity_values: pulumi.Input[dict[str, Any]],
    connection: Connection,
    parent: pulumi.Resource,
    *,
    ready: list[pulumi.Resource],
) -> KedaController | None:
    """KEDA, where the fleet's batch workers are scaled by it (``spec.keda``), acting as the
    identity the cloud's ``WorkQueue`` made for it (``identity_values``: the chart's
    ``podIdentity`` section), once its binding exists (``ready``)."""
    if spec.keda is None:
        return None
    return KedaController(
        f"{name}-keda",
        ControllerArgs(version=spec.keda.version, cloud=spec.cloud, provider=connection.provider),
        identity_values,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=ready),
    )
