"""Azure GPU VM sizes AKS can run, and the labels and taints AKS puts on nodes itself.

An AKS agent pool has exactly one VM size, so a GPU pool's GPU count and model follow from
its size; node auto-provisioning (managed Karpenter) picks among the sizes a NodePool
allows. The table is what the plan needs to check a pool offline ("does this size have
the GPUs the Job asks for?"), from the Azure VM size documentation
(MicrosoftDocs/azure-compute-docs ``articles/virtual-machines/sizes/gpu-accelerated/``:
``ncast4v3-series.md``, ``nca100v4-series.md``, ``ncadsh100v5-series.md``,
``ndasra100v4-series``, ``ndma100v4-series.md``, ``ndh100v5-series.md``,
``nd-h200-v5-series.md``). Only NVIDIA sizes: AKS does not support the AMD NVv4 series
(``articles/aks/use-nvidia-gpu.md``), whose smallest recommended GPU size is
``Standard_NC4as_T4_v3``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spotproof.catalog.profile import CloudProfile, ManagedPrometheus, PublishedRate
from spotproof.catalog.versions import Introduced


@dataclass(frozen=True)
class GpuVmSize:
    name: str
    gpus: int
    gpu: str
    """GPU model, as in the size's name (``T4``, ``A100``, ``H100``, ``H200``)."""


GPU_VM_SIZES: dict[str, GpuVmSize] = {
    size.name: size
    for size in (
        GpuVmSize("Standard_NC4as_T4_v3", 1, "T4"),
        GpuVmSize("Standard_NC8as_T4_v3", 1, "T4"),
        GpuVmSize("Standard_NC16as_T4_v3", 1, "T4"),
        GpuVmSize("Standard_NC64as_T4_v3", 4, "T4"),
        GpuVmSize("Standard_NC24ads_A100_v4", 1, "A100"),
        GpuVmSize("Standard_NC48ads_A100_v4", 2, "A100"),
        GpuVmSize("Standard_NC96ads_A100_v4", 4, "A100"),
        GpuVmSize("Standard_NC40ads_H100_v5", 1, "H100"),
        GpuVmSize("Standard_NC80adis_H100_v5", 2, "H100"),
        GpuVmSize("Standard_ND96asr_v4", 8, "A100"),
        GpuVmSize("Standard_ND96amsr_A100_v4", 8, "A100"),
        GpuVmSize("Standard_ND96isr_H100_v5", 8, "H100"),
        GpuVmSize("Standard_ND96isr_H200_v5", 8, "H200"),
    )
}

VM_SIZE = re.compile(r"^Standard_[A-Za-z0-9_]+$")
"""The shape of an Azure VM size name (``Standard_D4ds_v5``)."""
SYSTEM_VM_SIZE = "Standard_D4ds_v5"
"""Default for the system pool: 4 vCPU / 16 GiB, above the system pool minimum of 4 vCPU
and 4 GB (``articles/aks/use-system-pools.md``)."""

AGENT_POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
"""Linux agent pool names: 1-12 lowercase alphanumerics, starting with a letter
(``articles/aks/create-node-pools.md``, ``use-system-pools.md``)."""

SCALE_SET_PRIORITY_LABEL = "kubernetes.azure.com/scalesetpriority"
AGENT_POOL_LABEL = "kubernetes.azure.com/agentpool"
MODE_LABEL = "kubernetes.azure.com/mode"
"""Labels AKS puts on its nodes (observed and listed in Azure/karpenter-provider-azure
``pkg/apis/v1beta1/labels.go``): the pool, ``system``/``user``, and ``spot`` on spot
nodes (AKS writes no ``regular``; its Karpenter does)."""
SPOT_PRIORITY = "spot"
"""The value of :data:`SCALE_SET_PRIORITY_LABEL` on spot nodes, and of the taint AKS puts on
spot agent pools (``spotproof.fleet.aks.PLATFORM_SPOT_TAINT``)."""

SKU_NAME_LABEL = "karpenter.azure.com/sku-name"
SKU_GPU_COUNT_LABEL = "karpenter.azure.com/sku-gpu-count"
SKU_GPU_NAME_LABEL = "karpenter.azure.com/sku-gpu-name"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
"""Labels AKS node auto-provisioning puts on a node from the size it chose
(karpenter-provider-azure ``pkg/providers/instancetype/instancetype.go``)."""


ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
"""On agent pool nodes of an NVIDIA GPU size, value ``nvidia`` (``articles/aks/use-labels.md``)."""
SKU_GPU_MANUFACTURER_LABEL = "karpenter.azure.com/sku-gpu-manufacturer"
"""On node auto-provisioning nodes of a GPU size, ``nvidia`` for NVIDIA's
(karpenter-provider-azure ``pkg/apis/v1beta1/labels.go``, ``instancetype.go``)."""
NVIDIA = "nvidia"


NAP_KARPENTER_VERSION = "1.14.0"
"""The karpenter-provider-azure release AKS node auto-provisioning runs, which AKS manages:
the AKS release of 2026-07-17 moved it to v1.14.0 (Azure/AKS ``CHANGELOG.md``)."""

NAP_INTRODUCED: tuple[Introduced, ...] = (
    Introduced("AKSNodeClass", "spec.gpu", "1.12.0"),
    Introduced("AKSNodeClass", "spec.imageFamily", "1.6.2", "Ubuntu"),
    Introduced("AKSNodeClass", "spec.imageFamily", "1.6.3", "Ubuntu2404"),
    Introduced("AKSNodeClass", "spec.fipsMode", "1.6.2"),
    Introduced("AKSNodeClass", "spec.security", "1.6.5"),
    Introduced("AKSNodeClass", "spec.localDNS", "1.6.7"),
    Introduced("AKSNodeClass", "spec.artifactStreaming", "1.10.0"),
    Introduced("AKSNodeClass", "spec.linuxOSConfig", "1.10.0"),
    Introduced("NodePool", "spec.template.spec.requirements[].operator", "1.10.0", "Gte"),
    Introduced("NodePool", "spec.template.spec.requirements[].operator", "1.10.0", "Lte"),
    Introduced("NodePool", "spec.disruption.consolidationPolicy", "1.14.0", "Balanced"),
)
"""What AKS node auto-provisioning's CRDs accept only from some release on
(Azure/karpenter-provider-azure ``pkg/apis/crds/karpenter.azure.com_aksnodeclasses.yaml`` and
``karpenter.sh_nodepools.yaml`` at each tag; ``karpenter.azure.com/v1beta1`` itself from
v1.4.0). ``gpu.mode`` needs v1.12.0: below it the field is pruned and ``None`` would be
ignored, the driver installed anyway."""


def injected_labels(pool_name: str, mode: str, *, spot: bool, gpu: bool = False) -> dict[str, str]:
    """Labels AKS puts on an agent pool's nodes: the pool, ``system``/``user``, ``spot`` on
    spot pools, the accelerator on NVIDIA GPU sizes (the only GPU sizes AKS supports).
    Modelled, never declared: the prefix is AKS's own."""
    labels = {AGENT_POOL_LABEL: pool_name, MODE_LABEL: mode.lower()}
    if spot:
        labels[SCALE_SET_PRIORITY_LABEL] = SPOT_PRIORITY
    if gpu:
        labels[ACCELERATOR_LABEL] = NVIDIA
    return labels


# --- blob roles and the condition that confines them ------------------------------------

BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
"""Storage Blob Data Contributor (Azure built-in roles, storage)."""
BLOB_ACTION = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
CHANGING_ACTIONS = ("write", "add/action", "delete", "move/action")
"""Every data action of Storage Blob Data Contributor that changes a blob."""
_CONFINED_TO = re.compile(r"@Resource\[[^\]]+:path\] StringStartsWith '([^']*)/'")


def blobs_under(prefix: str) -> str:
    """The role-assignment condition (version 2.0) that confines Storage Blob Data
    Contributor to ``prefix/`` of its container: reads, listings and changes alike.

    Azure has no blob role narrower than a container; a condition narrows one to a path.
    The clauses follow Microsoft's examples "Read or list blobs in named containers with a
    path" and "Write blobs in named containers with a path" (MicrosoftDocs/azure-docs
    ``articles/storage/blobs/storage-auth-abac-examples.md``): reading a blob is
    ``blobs/read``, judged by the blob's ``path`` (relative to the container); listing is
    the same action with the suboperation ``Blob.List``, which names no blob and is judged
    by the request's ``prefix`` (``storage-auth-abac-attributes.md``, "Blob prefix"); each
    action that changes a blob is judged by its path. A listing of the container's root
    (prefix "") is refused, so the runtime checks reachability inside its prefix."""
    path = f"@Resource[{BLOB_ACTION}:path] StringStartsWith '{prefix}/'"
    listed = f"@Request[{BLOB_ACTION}:prefix] StringStartsWith '{prefix}/'"
    read = f"ActionMatches{{'{BLOB_ACTION}/read'}}"
    changes = " AND ".join(
        f"!(ActionMatches{{'{BLOB_ACTION}/{action}'}})" for action in CHANGING_ACTIONS
    )
    return (
        f"((!({read} AND NOT SubOperationMatches{{'Blob.List'}})) OR ({path}))"
        f" AND ((!({read} AND SubOperationMatches{{'Blob.List'}})) OR ({listed}))"
        f" AND (({changes}) OR ({path}))"
    )


def confined_prefix(condition: str, version: object) -> str | None:
    """The prefix ``condition`` confines a blob role to, when it is exactly
    :func:`blobs_under` of one (version 2.0); None for anything else."""
    found = set(_CONFINED_TO.findall(condition))
    if version != "2.0" or len(found) != 1:
        return None
    prefix = found.pop()
    return prefix if prefix and condition == blobs_under(prefix) else None


# --- what shared code asks of AKS ------------------------------------------------------

NAP_RECLAIM_UNANNOUNCED = (
    "nothing drains a node auto-provisioning spot VM on its Preempt event: AKS node "
    "auto-drain covers scale-set agent pools only (MicrosoftDocs/azure-aks-docs "
    "articles/aks/node-auto-drain.md), and Karpenter's only answer is node repair of a "
    "node whose PreemptionScheduled condition is set (karpenter-provider-azure v1.13.0 and "
    "later, pkg/cloudprovider/cloudprovider.go RepairPolicies), behind the NodeRepair "
    "feature gate, off by default, and skipped while over 20% of a NodePool is unhealthy "
    "(kubernetes-sigs/karpenter v1.14.0 pkg/operator/options/options.go, "
    "pkg/controllers/node/health/controller.go); a repair stamps the NodeClaim's "
    "termination time with the present, so its pods are deleted with the 1 s floor "
    "(Azure/karpenter-provider-azure#1829). "
    "Either way the trainer gets no time for a final save"
)
"""Why a reclaim of an AKS node auto-provisioning spot node is unannounced to its pods
(its sources inline, as the plan's warning quotes it). Azure's notice itself is best effort:
the provider's maintainers note that spot VMs "often evict in less than 10 seconds"
(Azure/karpenter-provider-azure#1769)."""

MANAGED_PROMETHEUS = ManagedPrometheus(
    # An Azure Monitor action group's resource ID, which a Prometheus rule group's
    # ``actions`` name (``actionGroupId``, azure-native ``alertsmanagement.
    # PrometheusRuleGroup``, API 2023-03-01).
    notify_target=re.compile(
        r"/subscriptions/[0-9a-fA-F-]{36}/resourceGroups/[-\w.()]{1,90}"
        r"/providers/microsoft\.insights/actionGroups/[^/\s]{1,260}",
        re.IGNORECASE,
    ),
    notify_target_form="an action group resource ID, /subscriptions/SUB/resourceGroups/RG/"
    "providers/microsoft.insights/actionGroups/NAME",
    # No floor of its own is known: the PodMonitor is rendered at the stack's interval.
    scrape_floor=None,
)

PROFILE = CloudProfile(
    # Scheduled Events announce a spot eviction 30 s ahead.
    preemption_notice_seconds=30,
    # AKS drains on the Scheduled Event.
    interruption_delivery_seconds=0,
    cluster_type="azure-native:containerservice:ManagedCluster",
    provider_prefix="azure-native:",
    region_key="azure-native:location",
    extra="azure",
    sdk_module="pulumi_azure_native",
    keda_identity="azure-workload",
    reclaims=PublishedRate.of_share(
        0.05,
        1,
        'Azure quotes spot eviction rates per hour: "an eviction rate of 10% means a VM has '
        'a 10% chance of being evicted within the next hour", from the last 7 days '
        "(https://learn.microsoft.com/azure/virtual-machines/spot-vms); the upper end of the "
        "portal's lowest bucket, 0-5% (its labels read second-hand), as a Poisson rate: "
        "-ln(1 - 0.05) per hour",
        "2026-11-26",
    ),
    # AKS scales spot pools with the cluster autoscaler, whose FAQ gives 3 to 4 minutes from
    # its request to schedulable nodes on GCE (kubernetes/autoscaler
    # cluster-autoscaler/FAQ.md); no AKS figure is published, so GKE's upper end.
    node_ready_seconds=240,
    managed_prometheus=MANAGED_PROMETHEUS,
    # Workload identity needs no node endpoint: the token is a projected file, exchanged
    # over HTTPS. AKS always creates the cluster's VNet with it, and spotproof joins none.
    # Node auto-drain evicts on ``Preempt`` and nothing ends a budget's wait
    # (``articles/aks/node-auto-drain.md``; ``plan.simulation.preemption``).
    reclaim_waits_on_budgets=True,
    # AKS taints every spot agent pool itself (``articles/aks/spot-node-pool.md``).
    spot_pool_taint=(SCALE_SET_PRIORITY_LABEL, SPOT_PRIORITY),
    karpenter_reclaim_unannounced=NAP_RECLAIM_UNANNOUNCED,
    karpenter_pools_key="spotproof:autoProvisionedPools",
    # Storage account names are global
    # (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules).
    unique_names={
        "azure-native:resources:ResourceGroup": ("resourceGroupName",),
        "azure-native:storage:StorageAccount": ("accountName",),
        "azure-native:containerservice:ManagedCluster": ("resourceGroupName", "resourceName"),
        "azure-native:managedidentity:UserAssignedIdentity": ("resourceGroupName", "resourceName"),
        # A custom role's display name is unique in the tenant (``aks.drill``).
        "azure-native:authorization:RoleDefinition": ("roleName",),
    },
)
"""What shared code asks of AKS (``catalog.profile``)."""
