"""Controllers spotproof installs on every cluster, pinned, on the system pool.

Each is a Helm chart placed by the system pool's contract (its labels and taint) through
the values its chart offers, so the plan's scheduling check sees where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import Cloud, jobset
from spotproof.kube.baseline import MANAGED_BY
from spotproof.spec import PoolClass


@dataclass(frozen=True)
class JobSetControllerArgs:
    version: str
    """Chart version, one of ``catalog.jobset.VERSIONS``."""
    cloud: Cloud
    """Whose system-pool contract the controller is placed by."""
    provider: k8s.Provider


def controller_values(cloud: Cloud) -> dict[str, Any]:
    """Helm values that keep the controller on the system pool (``charts/jobset/values.yaml``
    has ``controller.nodeSelector`` and ``controller.tolerations``; no priority class)."""
    system = scheduling.contract(PoolClass.SYSTEM, cloud)
    return {
        "controller": {
            "nodeSelector": dict(system.labels),
            "tolerations": [scheduling.toleration_for(t) for t in system.taints],
        }
    }


class JobSetController(pulumi.ComponentResource):
    """The JobSet controller and its CRD, pinned, in ``jobset-system`` on the system pool."""

    def __init__(
        self, name: str, args: JobSetControllerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:kube:JobSetController", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": jobset.NAMESPACE, "labels": MANAGED_BY},
            opts=child,
        )
        self.chart = k8s.helm.v4.Chart(
            f"{name}-chart",
            name="jobset",
            chart=jobset.CHART,
            version=args.version,
            namespace=jobset.NAMESPACE,
            values=controller_values(args.cloud),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[namespace])
            ),
        )
        self.version = args.version
        self.register_outputs({"version": self.version})
