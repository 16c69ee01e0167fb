"""``spotproof:aks:GpuAgentPools``: spot (and on-demand fallback) GPU agent pools, one VM
size each, scaled from zero by the cluster autoscaler; and the system pool's profile.

Facts this relies on (MicrosoftDocs azure-aks-docs):

- ``articles/aks/spot-node-pool.md``: AKS labels and taints every spot pool
  ``kubernetes.azure.com/scalesetpriority=spot`` itself and writes the taint back into
  ``nodeTaints``; the priority and the max price cannot change after creation; eviction
  policy ``Delete`` is the default (``Deallocate`` keeps VMs that count against quota);
  max price ``-1`` means never evicted for price, only for capacity. Declaring the AKS
  taint and the eviction policy keeps a second ``pulumi up`` diff-free (Terraform's AKS
  provider saw a force-new diff without them: hashicorp/terraform-provider-azurerm#9454).
- ``articles/aks/use-system-pools.md``: a ``System`` pool tainted
  ``CriticalAddonsOnly=true:NoSchedule`` keeps application pods off it; ``mode`` must be
  explicit in API calls.
- ``articles/aks/use-nvidia-gpu.md``: ``gpuProfile.driver`` ``Install`` (default) or
  ``None`` (GPU Operator); set at creation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_azure_native as azure

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import Capacity, PoolClass, Taint
from spotproof.fleet.aks import PLATFORM_SPOT_TAINT, AksSystemPool, GpuAgentPool

SYSTEM_POOL_NAME = "system"


def taints_of(pool: GpuAgentPool) -> list[Taint]:
    """The contract's taints, the pool's own, and on spot pools the one AKS adds."""
    platform = [PLATFORM_SPOT_TAINT] if pool.capacity is Capacity.SPOT else []
    return [*platform, *scheduling.contract(pool.pool_class).taints, *pool.extra_taints]


def system_pool_profile(
    pool: AksSystemPool, kubernetes_version: str, *, autoscaled: bool
) -> dict[str, Any]:
    """The ``System`` pool, declared inside the ManagedCluster: AKS needs one to create it.
    Not ``autoscaled`` under node auto-provisioning, which refuses autoscaling pools: it
    then keeps ``min_nodes``."""
    sizes = {"min_count": pool.min_nodes, "max_count": pool.max_nodes} if autoscaled else {}
    contract = scheduling.contract(PoolClass.SYSTEM, Cloud.AKS)
    return {
        "name": SYSTEM_POOL_NAME,
        "mode": azure.containerservice.AgentPoolMode.SYSTEM,
        "vm_size": pool.machine_type,
        "os_type": "Linux",
        "os_sku": azure.containerservice.OSSKU.AZURE_LINUX,
        "os_disk_size_gb": pool.disk_gb,
        "type": azure.containerservice.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
        "enable_auto_scaling": autoscaled,
        "count": pool.min_nodes,
        **sizes,
        "node_taints": [scheduling.aks_taint(t) for t in contract.taints],
        "node_labels": dict(contract.labels),
        "orchestrator_version": kubernetes_version,
    }


@dataclass
class GpuAgentPoolsArgs:
    cluster_name: pulumi.Input[str]
    """The AKS cluster (``resourceName``), created here or already running."""
    resource_group_name: pulumi.Input[str]
    pools: tuple[GpuAgentPool, ...]
    kubernetes_version: str | None = None
    """``orchestratorVersion``; None follows the control plane."""


class GpuAgentPools(pulumi.ComponentResource):
    """One ``User`` agent pool per GPU pool: ``Spot`` with eviction ``Delete`` and max price
    ``-1``, or ``Regular`` for an on-demand fallback; autoscaled from ``min_nodes``
    (0 by default), tainted and labelled by the scheduling contract."""

    pool_names: list[str]

    def __init__(
        self, name: str, args: GpuAgentPoolsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:aks:GpuAgentPools", name, None, opts)
        for pool in args.pools:
            self._pool(f"{name}-{pool.name}", pool, args)
        self.pool_names = [pool.name for pool in args.pools]
        self.register_outputs({"pool_names": self.pool_names})

    def _pool(self, name: str, pool: GpuAgentPool, args: GpuAgentPoolsArgs) -> None:
        spot = pool.capacity is Capacity.SPOT
        contract = scheduling.contract(pool.pool_class)
        priority: dict[str, Any] = (
            {
                "scale_set_priority": azure.containerservice.ScaleSetPriority.SPOT,
                "scale_set_eviction_policy": azure.containerservice.ScaleSetEvictionPolicy.DELETE,
                "spot_max_price": -1,
            }
            if spot
            else {"scale_set_priority": azure.containerservice.ScaleSetPriority.REGULAR}
        )
        azure.containerservice.AgentPool(
            name,
            agent_pool_name=pool.name,
            resource_name_=args.cluster_name,
            resource_group_name=args.resource_group_name,
            mode=azure.containerservice.AgentPoolMode.USER,
            vm_size=pool.vm_size,
            os_type="Linux",
            os_sku=azure.containerservice.OSSKU.AZURE_LINUX,
            os_disk_size_gb=pool.disk_gb,
            type=azure.containerservice.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
            availability_zones=list(pool.zones) or None,
            enable_auto_scaling=True,
            count=pool.min_nodes,
            min_count=pool.min_nodes,
            max_count=pool.max_nodes,
            node_taints=[scheduling.aks_taint(t) for t in taints_of(pool)],
            node_labels={**contract.labels, **pool.extra_labels},
            gpu_profile=azure.containerservice.GPUProfileArgs(driver=pool.gpu_driver.value),
            orchestrator_version=args.kubernetes_version,
            tags=stack_tags(pulumi.get_stack(), pool=pool.name),
            **priority,
            opts=pulumi.ResourceOptions(parent=self),
        )
