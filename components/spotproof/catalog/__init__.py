"""Facts about the clouds that the rest of spotproof must get right.

Nothing here imports a cloud SDK: the fleet is validated against these facts before any
resource is declared, and the scheduling check uses them to know what a node carries.

Each cloud's facts live in its own module (``catalog.gke``, ``catalog.eks``,
``catalog.aks``), ending in its :class:`~spotproof.catalog.profile.CloudProfile`: what
shared code asks of the cloud. This module is the registry: a cloud is added by its member
of :class:`Cloud` and its entry in :data:`PROFILES`, and every layer finds the cloud from
there (``spotproof.clouds``).
"""

from enum import StrEnum

from spotproof.catalog import aks, eks, gke
from spotproof.catalog.profile import CloudProfile


class Cloud(StrEnum):
    """The managed Kubernetes service a stack targets."""

    GKE = "gke"
    EKS = "eks"
    AKS = "aks"


PROFILES: dict[Cloud, CloudProfile] = {
    Cloud.GKE: gke.PROFILE,
    Cloud.EKS: eks.PROFILE,
    Cloud.AKS: aks.PROFILE,
}
"""Every cloud spotproof builds for, in the order rule lists and reports take them."""

DEFAULT_CLOUD = Cloud.GKE
"""The cloud a plan of Kubernetes objects alone is judged on: no resource says another."""


class UnknownCloud(LookupError):
    """A cloud the registry lacks, or a part of one: raised in one line that says which file
    a cloud needs (docs/layout.md, "A new cloud") instead of a ``KeyError`` deep in shared
    code."""


def registered() -> str:
    """The registered clouds, for an error's "allowed" part."""
    return ", ".join(PROFILES)


def profile(cloud: Cloud) -> CloudProfile:
    """``cloud``'s profile; UnknownCloud when it has no entry in :data:`PROFILES`."""
    found = PROFILES.get(cloud)
    if found is None:
        raise UnknownCloud(
            f"cloud {str(cloud)!r} has no profile: a cloud needs catalog/{cloud}.py ending in "
            f"PROFILE and its PROFILES entry in catalog/__init__.py; registered: {registered()}"
        )
    return found


GRACE_PERIOD_SECONDS: dict[Cloud, int] = {
    cloud: cloud_profile.grace_seconds for cloud, cloud_profile in PROFILES.items()
}
"""Each cloud's :attr:`CloudProfile.grace_seconds`, for code that takes it by cloud."""

EXPENDABLE_PRIORITY_CUTOFF = -10
"""The cluster autoscaler's ``--expendable-pods-priority-cutoff`` default, which GKE keeps:
pending pods with a lower priority never trigger a scale-up."""

FINAL_SAVE_MIB_PER_SECOND = 150
"""SIGTERM-to-committed rate of the smoke trainer's final save, in MiB of state per second:
the largest state ``benchmarks/capacity.py`` saw commit within GKE's 15 s against the S3
emulator (moto, on loopback) on a 2-vCPU development VM, divided by the time it took
(2048 MiB in 13.6 s, 2026-11-26; the local disk, ext4, did 4096 MiB in 12.9 s). A floor
for planning (see ``spotproof.fleet.advice``), not a promise for a cloud bucket."""

ASYNC_CAPTURE_MIB_PER_SECOND = 2100
"""How fast a periodic save captures state while training waits, in MiB of each pod's
state per second: docs/performance.md's gang table has an asynchronous save of 256 MiB
over 2 ranks (128 MiB each) holding training up 0.0605 s on local disk, about 2100 MiB/s
a rank. The upload runs behind training, at :data:`FINAL_SAVE_MIB_PER_SECOND`."""

RESTORE_MIB_PER_SECOND = 728
"""How fast a replacement reads its state back, in MiB per second: docs/performance.md has
spotproof restoring 512 MiB from the S3 emulator in 0.703 s. Like the save rates, measured
on a small development VM, a floor rather than a promise."""
PEER_RESTORE_MIB_PER_SECOND = 1790
"""How fast a rank reads its shard back from its holder's replica, in MiB per second:
docs/performance.md's tier-resume table has 512 MiB from the holder in 0.286 s on the same
VM. A survivor reading its own memory is taken to be no slower."""
POD_START_SECONDS = 5.0
"""From a pod's binding to its containers running when the image is already on the node:
Kubernetes' pod startup SLO, 5 s at the 99th percentile for stateless pods with pre-pulled
images (kubernetes/community ``sig-scalability/slos/pod_startup_latency.md``)."""
AGENT_START_SECONDS = 3.0
"""torchrun's elastic agent starting in a replacement pod, to its joining the rendezvous:
it imports torch, 2.4 to 3.1 CPU-seconds on the 2-core development VM (2026-11-29)."""
PRELOAD_SECONDS = 2.5
"""``spotproof-torchrun``'s forkserver importing what its agent's import of torch did not
bring: the compiler stack and spotproof's loop (``runtime.warm_torchrun``: it is forked
from the agent once the agent has imported torch). Paid once per pod, after
:data:`AGENT_START_SECONDS`, while the agent joins the rendezvous; 2.5 to 3.3 CPU-seconds
on the development VM, the other core busy (2026-11-30). A cold worker, as plain torchrun
starts one, pays the agent's import again on top: 4.4 to 5.7 CPU-seconds in all (``python
-c`` building an AdamW, 2026-11-29)."""
TEARDOWN_SECONDS = 2.3
"""A gang's pod leaving after its SIGTERM, to its being gone: the launch script, torchrun
stopping its worker (a reclaimed rank's once its final save is in; a rank stopped by a peer
waits to be torn down, so at once) and the agent's exit. Its successor waits for it: the Job
creates a reclaimed pod's replacement only once the pod is terminal (with a
``podFailurePolicy``, ``podReplacementPolicy`` is ``Failed``:
https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-replacement-policy), and a
gang restarted whole cannot bind a survivor's successor to its node while the terminating
pod still holds the GPUs (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination:
a terminating pod runs until its containers stop, up to its grace period). 2.0 to 2.6 s on the
development VM, 2 pods, quiet (``benchmarks/gang_goodput.py --ranks 2``, its teardown column,
2026-11-30); the kubelet's own status updates come on top on a cluster."""
WARM_TRAINER_START_SECONDS = 2.0
"""A worker forked warm by ``spotproof-torchrun``, from the fork to its restore: the trainer's
``main`` and the bucket's client (1.8 s opening S3 in a profile of the rehearsal's trainer,
2026-11-29); measured, the fork itself is 0.02 s under load. A GPU trainer adds CUDA's
initialisation, so a floor."""
