"""EKS: the hybrid cluster, Karpenter and its GPU NodePools, the S3 checkpoint bucket, and
Amazon Managed Service for Prometheus (``pip install spotproof[aws]``)."""

from spotproof.eks.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.eks.cluster import HybridCluster, HybridClusterArgs
from spotproof.eks.karpenter import Karpenter, KarpenterArgs
from spotproof.eks.monitoring import Monitoring, MonitoringArgs

__all__ = [
    "CheckpointBucket",
    "CheckpointBucketArgs",
    "HybridCluster",
    "HybridClusterArgs",
    "Karpenter",
    "KarpenterArgs",
    "Monitoring",
    "MonitoringArgs",
]
