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

INTERRUPTION_DELIVERY_SECONDS: dict[Cloud, int] = {
    Cloud.GKE: 0,
    Cloud.EKS: 30,
    Cloud.AKS: 0,
}
"""Budget for the notice to reach whatever stops the pod. GKE's kubelet hears the VM's
shutdown itself. On EKS the warning travels EventBridge -> SQS -> Karpenter, which then
deletes the NodeClaim and drains the node; 30 s is a budget for that hop, not a measured
figure. AKS drains on the Scheduled Event."""

# Default (and largest) terminationGracePeriodSeconds: what the preemption path delivers,
# the notice less its delivery. A longer period is cut short when the node goes away, and
# the final save with it.
GRACE_PERIOD_SECONDS: dict[Cloud, int] = {
    cloud: PREEMPTION_NOTICE_SECONDS[cloud] - INTERRUPTION_DELIVERY_SECONDS[cloud]
    for cloud in Cloud
}

KARPENTER_TERMINATION_GRACE_SECONDS = GRACE_PERIOD_SECONDS[Cloud.EKS]
"""NodePool ``terminationGracePeriod`` on EKS: a drain that PDBs or ``do-not-disrupt`` hold
back ends this long after it starts, so a pod with up to this much grace finishes by the
end of the two-minute notice."""

EXPENDABLE_PRIORITY_CUTOFF = -10
"""The cluster autoscaler's ``--expendable-pods-priority-cutoff`` default, which GKE keeps:
pending pods with a lower priority never trigger a scale-up."""

FINAL_SAVE_MIB_PER_SECOND = 157
"""SIGTERM-to-committed rate of the smoke trainer's final save, in MiB of state per second:
the largest state ``benchmarks/capacity.py`` saw commit within GKE's 15 s against the S3
emulator (moto, on loopback) on a 2-vCPU development VM, divided by the time it took
(2048 MiB in 13.0 s; local disk did 5120 MiB in 11.5 s). A floor for planning (see
``spotproof.fleet.advice``), not a promise for a cloud bucket."""
