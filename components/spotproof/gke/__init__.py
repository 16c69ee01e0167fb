"""GKE: the hybrid spot/on-demand GPU cluster (``pip install spotproof[gcp]``)."""

from spotproof.gke.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.gke.cluster import HybridCluster, HybridClusterArgs

__all__ = ["CheckpointBucket", "CheckpointBucketArgs", "HybridCluster", "HybridClusterArgs"]
