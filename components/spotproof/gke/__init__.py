"""GKE: the hybrid spot/on-demand GPU cluster, its GPU node pools and checkpoint bucket
(``pip install spotproof[gcp]``). ``GpuNodePools`` and ``CheckpointBucket`` also work on a
cluster you already have."""

from spotproof.gke.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.gke.cluster import HybridCluster, HybridClusterArgs
from spotproof.gke.pools import GpuNodePools, GpuNodePoolsArgs

__all__ = [
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "GpuNodePools",
    "GpuNodePoolsArgs",
    "HybridCluster",
    "HybridClusterArgs",
]
