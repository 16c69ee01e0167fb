"""GKE spot capacity beyond a pool's machine: how a reclaimed Spot VM shuts down, and the
API of the custom ComputeClasses that order pools into a fallback.

Facts only, each with its source; ``fleet.gke`` and ``fleet.gke_compute_class`` read
stack config against them, ``gke.pools`` and ``gke.compute_class`` render them, and
``plan.gke`` and ``policy.gke_shutdown`` judge what was rendered.
"""

from __future__ import annotations

# A reclaimed Spot VM's kubelet runs graceful node shutdown: non-system pods first, for the
# node's shutdown period less the critical pods' share, then pods of the
# system-node-critical and system-cluster-critical priority classes for that share; each
# pod gets the smaller of its own terminationGracePeriodSeconds and its phase
# (kubernetes/kubernetes pkg/kubelet/nodeshutdown). GKE's default is 30 s split 15/15
# (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms, "Termination and
# graceful shutdown of Spot VMs"). A Standard node pool may lengthen it through its node
# system configuration, ``nodeConfig.kubeletConfig.shutdownGracePeriodSeconds`` and
# ``shutdownGracePeriodCriticalPodsSeconds`` (googleapis google/container/v1
# cluster_service.proto, NodeKubeletConfig fields 26 and 27: "only valid for Spot VMs.
# Allowed values: 0, 30, 120"; the critical share at most the total); pulumi-gcp has them
# from 9.30.0 (``NodePoolNodeConfigKubeletConfigArgs``). The Spot VMs page requires a
# control plane at 1.35.0-gke.1171000 or later for it. A ComputeClass sets the same fields
# per priority rule (``priorities[].nodeSystemConfig.kubeletConfig``), on spot rules only
# (GoogleCloudPlatform/compute-class-api types.go).

SPOT_SHUTDOWN_SECONDS = (30, 120)
"""The shutdown periods a Spot pool may ask for; 0, which the API also allows, turns
graceful shutdown off, and a reclaim would then kill pods without SIGTERM."""
DEFAULT_SPOT_SHUTDOWN_SECONDS = 30
CRITICAL_PODS_SHUTDOWN_SECONDS = 15
"""The system pods' share, as GKE's default keeps it: logging and networking agents
flush after the trainer's final save, not while it is still uploading."""
LONG_SHUTDOWN_MIN_VERSION = "1.35.0-gke.1171000"
"""The first control plane that takes a shutdown period above the default."""
LONG_SHUTDOWN_MIN_MINOR = (1, 35)


def pod_shutdown_seconds(shutdown_seconds: int) -> int:
    """What a node shutdown period leaves non-system pods."""
    return shutdown_seconds - CRITICAL_PODS_SHUTDOWN_SECONDS


COMPUTE_CLASS_API_VERSION = "cloud.google.com/v1"
"""ComputeClass, a cluster-scoped object every GKE cluster serves from 1.30.3-gke.1451000
(https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes);
every Kubernetes version spotproof plans for (1.31 and later) has it. Its fields and
validation rules: GoogleCloudPlatform/compute-class-api ``api/cloud.google.com/v1/types.go``
(read at 8067eae, 2026-08-21)."""
