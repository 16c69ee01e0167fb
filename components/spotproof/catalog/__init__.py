"""Facts about the clouds that the rest of spotproof must get right.

Nothing here imports a cloud SDK: the spec validates against these facts before any
resource is declared, and the scheduling check uses them to know what a node carries.
"""

from enum import StrEnum


class Cloud(StrEnum):
    """The managed Kubernetes service a stack targets."""

    GKE = "gke"
    EKS = "eks"
    AKS = "aks"


# Seconds a non-system pod has between the preemption notice and its node going away.
# GKE: spot VMs stop 30 s after notice; on GKE >= 1.22.8 graceful node shutdown gives
# non-system pods the first 15 s and system pods the last 15 s, so a grace period above
# 15 s has no effect there. AWS: a best-effort two-minute spot interruption notice.
# Azure: Scheduled Events announce a spot eviction 30 s ahead.
PREEMPTION_NOTICE_SECONDS: dict[Cloud, int] = {
    Cloud.GKE: 15,
    Cloud.EKS: 120,
    Cloud.AKS: 30,
}

# Default terminationGracePeriodSeconds: the notice less the time it takes to reach the pod.
# GKE's kubelet hears the VM's shutdown itself. On EKS the warning travels EventBridge ->
# SQS -> Karpenter, which then cordons and drains the node; 30 s covers that delivery and
# leaves the instance time to stop cleanly. AKS drains on the Scheduled Event.
GRACE_PERIOD_SECONDS: dict[Cloud, int] = {
    Cloud.GKE: 15,
    Cloud.EKS: 90,
    Cloud.AKS: 30,
}
