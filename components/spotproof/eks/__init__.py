"""EKS: the hybrid cluster, Karpenter and its GPU NodePools, the S3 checkpoint bucket
(``pip install spotproof[aws]``)."""

from spotproof.eks.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.eks.cluster import HybridCluster, HybridClusterArgs
from spotproof.eks.karpenter import Karpenter, KarpenterArgs

__all__ = [
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "HybridCluster",
    "HybridClusterArgs",
    "Karpenter",
    "KarpenterArgs",
]
