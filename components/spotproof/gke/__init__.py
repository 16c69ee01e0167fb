"""GKE: the hybrid spot/on-demand GPU cluster, its GPU node pools and checkpoint bucket
(``pip install spotproof[gcp]``). ``GpuNodePools``, ``ComputeClass``,
``CheckpointBucket`` and ``Monitoring`` also work on a cluster you already have."""

from spotproof.gke.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.gke.cluster import HybridCluster, HybridClusterArgs
from spotproof.gke.compute_class import ComputeClass, ComputeClassArgs
from spotproof.gke.monitoring import Monitoring, MonitoringArgs, cluster_monitoring_config
from spotproof.gke.pools import GpuNodePools, GpuNodePoolsArgs

__all__ = [
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "ComputeClass",
    "ComputeClassArgs",
    "GpuNodePools",
    "GpuNodePoolsArgs",
    "HybridCluster",
    "HybridClusterArgs",
    "Monitoring",
    "MonitoringArgs",
    "cluster_monitoring_config",
]
