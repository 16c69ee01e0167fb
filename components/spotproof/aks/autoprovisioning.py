"""``spotproof:aks:AutoProvisionedPools``: the NodePools and AKSNodeClasses that AKS node
auto-provisioning (managed Karpenter) fills with GPU VMs.

- **APIs.** NodePools are ``karpenter.sh/v1``; node classes are ``karpenter.azure.com``
  ``AKSNodeClass`` in ``v1beta1``, the version the CRD stores (``v1alpha2`` is served but
  deprecated; there is no ``v1``: Azure/karpenter-provider-azure
  ``pkg/apis/crds/karpenter.azure.com_aksnodeclasses.yaml``).
- **Spot taint.** AKS's Karpenter labels spot nodes ``kubernetes.azure.com/scalesetpriority``
  but adds no taint (unlike a spot agent pool), so the NodePool carries the contract's
  spot taint itself; without it system pods could land on spot nodes.
- **Sizes.** ``karpenter.azure.com/sku-name`` pins the pool to the VM sizes the stack
  names, all with one GPU count, so the GPU ``limits`` mean a known number of nodes.
- **Weights.** The NodePool with the highest ``weight`` that fits wins
  (``articles/aks/node-auto-provisioning-node-pools.md``): spot above on-demand.
- **Preemption.** A spot eviction is announced up to 30 s ahead (Scheduled Events
  ``Preempt``, best effort), but nothing drains the node on it
  (``catalog.aks.NAP_RECLAIM_UNANNOUNCED``: node auto-drain is for agent pools, and
  Karpenter's repair of ``PreemptionScheduled`` nodes, behind a gate off by default,
  deletes the pods with no grace left). The trainer gets no final save: its periodic
  checkpoints bound the loss, and the plan sizes the interval for that. The template's
  ``terminationGracePeriod`` still bounds Karpenter's own drains (consolidation, expiry).
- **Disruption.** ``WhenEmpty`` consolidation never moves a busy GPU node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.catalog import GRACE_PERIOD_SECONDS, Cloud
from spotproof.catalog import aks as aks_catalog
from spotproof.cloud_tags import stack_tags
from spotproof.fleet.aks import AutoProvisionedPool, GpuDriver
from spotproof.kube import nodepool

NODE_CLASS_GROUP = "karpenter.azure.com"
NODE_CLASS_API = f"{NODE_CLASS_GROUP}/v1beta1"
GPU_MODE = {GpuDriver.INSTALL: "Driver", GpuDriver.NONE: "None"}
"""AgentPool ``gpuProfile.driver`` spelling -> AKSNodeClass ``gpu.mode`` spelling."""


def node_pool(pool: AutoProvisionedPool) -> dict[str, Any]:
    """The NodePool manifest of one auto-provisioned GPU pool."""
    return nodepool.node_pool(
        pool,
        node_class_ref={"group": NODE_CLASS_GROUP, "kind": "AKSNodeClass", "name": pool.name},
        requirements=[
            {"key": aks_catalog.SKU_NAME_LABEL, "operator": "In", "values": list(pool.vm_sizes)},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ],
        termination_grace_seconds=GRACE_PERIOD_SECONDS[Cloud.AKS],
    )


def node_class(pool: AutoProvisionedPool, stack: str) -> dict[str, Any]:
    """The AKSNodeClass one pool launches from."""
    return {
        "apiVersion": NODE_CLASS_API,
        "kind": "AKSNodeClass",
        "metadata": {"name": pool.name, "labels": dict(nodepool.MANAGED_BY)},
        "spec": {
            "imageFamily": pool.image_family.value,
            "osDiskSizeGB": pool.disk_gb,
            "gpu": {"mode": GPU_MODE[pool.gpu_driver]},
            "tags": stack_tags(stack, pool=pool.name),
        },
    }


@dataclass
class AutoProvisionedPoolsArgs:
    pools: tuple[AutoProvisionedPool, ...]


class AutoProvisionedPools(pulumi.ComponentResource):
    """One AKSNodeClass and one NodePool per pool, applied with the ``provider`` in
    ``opts`` (a cluster whose ``nodeProvisioningProfile.mode`` is ``Auto``)."""

    pool_names: list[str]

    def __init__(
        self,
        name: str,
        args: AutoProvisionedPoolsArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spotproof:aks:AutoProvisionedPools", name, None, opts)
        for pool in args.pools:
            manifest = node_class(pool, pulumi.get_stack())
            node_class_object = k8s.apiextensions.CustomResource(
                f"{name}-{pool.name}-class",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            manifest = node_pool(pool)
            k8s.apiextensions.CustomResource(
                f"{name}-{pool.name}",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[node_class_object]),
            )
        self.pool_names = [pool.name for pool in args.pools]
        self.register_outputs({"pool_names": self.pool_names})
