"""``spotproof:gke:ComputeClass``: one GKE ComputeClass over a cluster's own pools.

The class (``fleet.gke_compute_class`` says what it is for) names one pool per priority:
the target's pools in stack order, then each fallback class's. It asks GKE for nothing
beyond them: no pools of its own (``nodePoolAutoCreation`` off) and, when none of them can
get a node, no scale-up elsewhere (``whenUnsatisfiable: DoNotScaleUp``, set rather than left
to a default that changed in GKE 1.33). The pools it names must carry the class's label and
taint (``GpuNodePools`` puts them on), and each pool's own settings, a spot pool's longer
shutdown included, are what its rung gets: a ``nodepools`` rule takes no other field
(GoogleCloudPlatform/compute-class-api ``api/cloud.google.com/v1/types.go``, the rule on
``Priority``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.catalog import gke_spot
from spotproof.fleet.gke_compute_class import ComputeClassSpec, check_class
from spotproof.fleet.gke_pools import FlexStartPool, GkeGpuPool
from spotproof.kube.baseline import MANAGED_BY


@dataclass
class ComputeClassArgs:
    spec: ComputeClassSpec
    pools: Sequence[GkeGpuPool | FlexStartPool]
    """The cluster's GPU pools, in stack order; those of the class's pool classes become
    its rungs."""
    provider: k8s.Provider
    """The cluster's Kubernetes provider."""

    def __post_init__(self) -> None:
        # What the stack reader refuses, for a class built in a program on an existing
        # cluster: a rung class without pools, or with pools only queued provisioning fills.
        for pool_class in self.spec.classes:
            field = "target" if pool_class is self.spec.target else "fallback"
            check_class(f"ComputeClassArgs.spec.{field}", pool_class, self.pools)


def priorities(spec: ComputeClassSpec, pools: Sequence[GkeGpuPool | FlexStartPool]) -> list[dict]:
    """One ``nodepools`` rule per pool, in the order GKE is to try them."""
    return [
        {"nodepools": [pool.name]}
        for pool_class in spec.classes
        for pool in pools
        if pool.pool_class is pool_class
    ]


def manifest(spec: ComputeClassSpec, pools: Sequence[GkeGpuPool | FlexStartPool]) -> dict[str, Any]:
    """The ComputeClass object, in Kubernetes spelling."""
    return {
        "apiVersion": gke_spot.COMPUTE_CLASS_API_VERSION,
        "kind": "ComputeClass",
        "metadata": {"name": spec.name, "labels": MANAGED_BY},
        "spec": {
            "description": (
                f"spotproof: {spec.target.value} pools first, then "
                f"{', '.join(c.value for c in spec.fallback) or 'nothing else'}"
            ),
            "priorities": priorities(spec, pools),
            "nodePoolAutoCreation": {"enabled": False},
            "activeMigration": {"optimizeRulePriority": spec.active_migration},
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }


class ComputeClass(pulumi.ComponentResource):
    """A ComputeClass whose priorities are the cluster's own pools."""

    class_name: str

    def __init__(
        self, name: str, args: ComputeClassArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:ComputeClass", name, None, opts)
        body = manifest(args.spec, args.pools)
        self.object = k8s.apiextensions.CustomResource(
            f"{name}-class",
            api_version=body["apiVersion"],
            kind=body["kind"],
            metadata=body["metadata"],
            spec=body["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        self.class_name = args.spec.name
        self.register_outputs({"class_name": self.class_name})
