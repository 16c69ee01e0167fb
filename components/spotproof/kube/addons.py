"""Controllers spotproof installs on every cluster, pinned, on the system pool.

Each is a Helm chart placed by the system pool's contract (its labels and taint) through
the values its chart offers, so the plan's scheduling check sees where it runs. Neither
chart is given a priority class: the JobSet chart has no value for one, and Kueue's
manager, like JobSet's, is not what a node's pods would be preempted for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import Cloud, jobset, keda, kueue
from spotproof.fleet import PoolClass
from spotproof.kube.baseline import MANAGED_BY


@dataclass(frozen=True)
class ControllerArgs:
    version: str
    """Chart version, one of the catalog's ``VERSIONS`` for the controller."""
    cloud: Cloud
    """Whose system-pool contract the controller is placed by."""
    provider: k8s.Provider


def system_placement(cloud: Cloud) -> dict[str, Any]:
    """``nodeSelector`` and ``tolerations`` that keep a pod on ``cloud``'s system pool."""
    system = scheduling.contract(PoolClass.SYSTEM, cloud)
    return {
        "nodeSelector": dict(system.labels),
        "tolerations": [scheduling.toleration_for(t) for t in system.taints],
    }


def jobset_values(cloud: Cloud) -> dict[str, Any]:
    """JobSet's Helm values: ``charts/jobset/values.yaml`` has ``controller.nodeSelector``
    and ``controller.tolerations``."""
    return {"controller": system_placement(cloud)}


def kueue_values(cloud: Cloud) -> dict[str, Any]:
    """Kueue's Helm values: ``charts/kueue/values.yaml`` has ``controllerManager.nodeSelector``
    and ``controllerManager.tolerations``."""
    return {"controllerManager": system_placement(cloud)}


def keda_values(cloud: Cloud, identity: dict[str, Any]) -> dict[str, Any]:
    """KEDA's Helm values (kedacore/charts ``keda/values.yaml``): the top-level
    ``nodeSelector`` and ``tolerations`` place the operator, the metrics server and the
    webhooks (per-component keys exist only from 2.20); ``identity`` is the operator's
    ``podIdentity`` section from the cloud's ``WorkQueue``. The webhooks fail closed:
    with the chart's default ``failurePolicy: Ignore`` a ScaledObject that conflicts with
    another scaler is admitted whenever the webhook is unreachable
    (docs ``operate/admission-webhooks.md``)."""
    return {
        **system_placement(cloud),
        "webhooks": {"failurePolicy": "Fail"},
        **({"podIdentity": identity} if identity else {}),
    }


@dataclass(frozen=True)
class Release:
    """A chart as a controller installs it."""

    name: str
    chart: str
    namespace: str
    values: pulumi.Input[dict[str, Any]]
    repository: str | None = None
    """The chart repository's URL; None where ``chart`` is an OCI reference."""


class _SystemChart(pulumi.ComponentResource):
    """A pinned chart in its own namespace, its pods on the system pool."""

    def __init__(
        self,
        type_token: str,
        name: str,
        args: ControllerArgs,
        release: Release,
        opts: pulumi.ResourceOptions | None,
    ) -> None:
        super().__init__(type_token, name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": release.namespace, "labels": MANAGED_BY},
            opts=child,
        )
        self.chart = k8s.helm.v4.Chart(
            f"{name}-chart",
            name=release.name,
            chart=release.chart,
            version=args.version,
            namespace=release.namespace,
            values=release.values,
            repository_opts={"repo": release.repository} if release.repository else None,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[namespace])
            ),
        )
        self.version = args.version
        self.register_outputs({"version": self.version})


class JobSetController(_SystemChart):
    """The JobSet controller and its CRD, pinned, in ``jobset-system`` on the system pool."""

    def __init__(
        self, name: str, args: ControllerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        release = Release("jobset", jobset.CHART, jobset.NAMESPACE, jobset_values(args.cloud))
        super().__init__("spotproof:kube:JobSetController", name, args, release, opts)


class KueueController(_SystemChart):
    """Kueue's controller manager, webhooks and CRDs, pinned, in ``kueue-system`` on the
    system pool. Its ProvisioningRequest admission check is on by default
    (``catalog.kueue.VERSIONS``); Kueue sets it up at start-up only if the cluster serves
    ``autoscaling.x-k8s.io/v1``, which GKE does."""

    def __init__(
        self, name: str, args: ControllerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        release = Release("kueue", kueue.CHART, kueue.NAMESPACE, kueue_values(args.cloud))
        super().__init__("spotproof:kube:KueueController", name, args, release, opts)


class KedaController(_SystemChart):
    """KEDA's operator, metrics server, webhooks and CRDs, pinned, in ``keda`` on the system
    pool, acting in the cloud as the identity ``identity_values`` names."""

    def __init__(
        self,
        name: str,
        args: ControllerArgs,
        identity_values: pulumi.Input[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        values = pulumi.Output.from_input(identity_values).apply(
            lambda identity: keda_values(args.cloud, identity)
        )
        release = Release(keda.CHART, keda.CHART, keda.NAMESPACE, values, keda.REPOSITORY)
        super().__init__("spotproof:kube:KedaController", name, args, release, opts)
