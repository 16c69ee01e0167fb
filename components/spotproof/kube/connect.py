"""What every cluster component does once its API server is up, whatever the cloud."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from spotproof.kube.addons import ControllerArgs, JobSetController, KueueController
from spotproof.kube.baseline import ClusterBaseline, ClusterBaselineArgs
from spotproof.spec import FleetSpec


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
        f"{name}-baseline", ClusterBaselineArgs(namespace=namespace), opts=through
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
