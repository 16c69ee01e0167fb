"""AKS: the hybrid cluster, spot GPU agent pools, node auto-provisioning NodePools, the
checkpoint storage account and its workload identity, and Azure Monitor managed Prometheus
(``pip install spotproof[azure]``)."""

from spotproof.aks.autoprovisioning import AutoProvisionedPools, AutoProvisionedPoolsArgs
from spotproof.aks.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.aks.cluster import HybridCluster, HybridClusterArgs
from spotproof.aks.monitoring import Monitoring, MonitoringArgs, cluster_monitor_profile
from spotproof.aks.pools import GpuAgentPools, GpuAgentPoolsArgs

__all__ = [
    "AutoProvisionedPools",
    "AutoProvisionedPoolsArgs",
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "GpuAgentPools",
    "GpuAgentPoolsArgs",
    "HybridCluster",
    "HybridClusterArgs",
    "Monitoring",
    "MonitoringArgs",
    "cluster_monitor_profile",
]
