"""Karpenter ``NodePool`` and ``EC2NodeClass`` objects for the fleet's GPU pools.

**Fallback: weighted pools, not one pool with both capacity types.** A NodePool allowing
``spot`` and ``on-demand`` would already prefer spot, but it would share one GPU limit,
one set of taints and one disruption policy between cheap and expensive capacity. Two
pools keep them apart: the on-demand pool has its own (small) ``nvidia.com/gpu`` limit,
so a spot drought cannot silently multiply the bill; its nodes do not carry the spot
taint, so the scheduling contract stays true; and it gives its nodes back sooner. Spot
work accepts both classes through node affinity (``scheduling.placement(...,
fallback=...)``) and Karpenter tries the pool with the higher ``weight`` first, falling
back when spot capacity is refused.

**Disruption fit for long training.** ``WhenEmpty`` consolidation never moves a busy GPU
node to save money; budgets let empty nodes go at once and replace drifted nodes one at a
time, and the smoke Job's ``karpenter.sh/do-not-disrupt`` annotation and PDB hold a
running trainer in place.

**The reclaim must still reach the trainer.** Karpenter handles a spot interruption
warning from the queue by deleting the node's NodeClaim and draining it through the
Eviction API, which honours PDBs and ``do-not-disrupt``: without a bound it would wait
until the instance is gone and the trainer would never get SIGTERM. The template's
``terminationGracePeriod`` is that bound: Karpenter deletes each remaining pod early
enough that its own ``terminationGracePeriodSeconds`` ends when the node's period does.
Set to the notice less the time the warning takes to arrive
(``catalog.eks.KARPENTER_TERMINATION_GRACE_SECONDS``), every pod whose grace fits that
budget gets SIGTERM with its whole grace period before AWS takes the instance back.
Karpenter's disruption docs: https://karpenter.sh/docs/concepts/disruption/ and the
NodePool reference https://karpenter.sh/docs/concepts/nodepools/.

**Image.** GPU nodes boot Bottlerocket: its NVIDIA variant carries the driver and the
device plugin, so nothing else must be installed for ``nvidia.com/gpu`` to appear. Its OS
lives on a small ``/dev/xvda``; images and ephemeral storage live on ``/dev/xvdb``, which
is the volume sized for GPU images.
"""

from __future__ import annotations

from typing import Any

from spotproof.catalog.eks import (
    INSTANCE_FAMILY_LABEL,
    INSTANCE_GPU_COUNT_LABEL,
    INSTANCE_TYPE_LABEL,
    KARPENTER_TERMINATION_GRACE_SECONDS,
)
from spotproof.cloud_tags import stack_tags
from spotproof.fleet.eks import KarpenterPool, KarpenterSpec
from spotproof.kube import nodepool

NODE_POOL_API = nodepool.API_VERSION
NODE_CLASS_API = "karpenter.k8s.aws/v1"
DISCOVERY_TAG = "karpenter.sh/discovery"
"""Tag on the private subnets and the cluster security group that node classes select."""

ARCH_LABEL = "kubernetes.io/arch"
OS_LABEL = "kubernetes.io/os"

OS_VOLUME_GB = 4


def _requirement(key: str, operator: str, values: list[str] | None = None, **extra: Any) -> dict:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        requirement["values"] = values
    return {**requirement, **extra}


def node_pool(pool: KarpenterPool, node_class: str) -> dict[str, Any]:
    """The NodePool manifest of one GPU pool: its families and GPU count, at least
    ``min_instance_types`` types to choose from, x86 Linux."""
    return nodepool.node_pool(
        pool,
        node_class_ref={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class},
        requirements=[
            _requirement(INSTANCE_FAMILY_LABEL, "In", list(pool.instance_families)),
            _requirement(INSTANCE_GPU_COUNT_LABEL, "In", [str(pool.gpus_per_node)]),
            _requirement(INSTANCE_TYPE_LABEL, "Exists", minValues=pool.min_instance_types),
            _requirement(ARCH_LABEL, "In", ["amd64"]),
            _requirement(OS_LABEL, "In", ["linux"]),
        ],
        termination_grace_seconds=KARPENTER_TERMINATION_GRACE_SECONDS,
    )


def _volume(device: str, size_gb: int) -> dict[str, Any]:
    return {
        "deviceName": device,
        "ebs": {
            "volumeSize": f"{size_gb}Gi",
            "volumeType": "gp3",
            "encrypted": True,
            "deleteOnTermination": True,
        },
    }


def node_class(
    name: str,
    *,
    cluster_name: str,
    node_role: str,
    karpenter: KarpenterSpec,
    disk_gb: int,
    stack: str,
) -> dict[str, Any]:
    """The EC2NodeClass one GPU pool launches from."""
    discovery = [{"tags": {DISCOVERY_TAG: cluster_name}}]
    return {
        "apiVersion": NODE_CLASS_API,
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "spotproof"}},
        "spec": {
            "amiSelectorTerms": [{"alias": karpenter.node_image}],
            "role": node_role,
            "subnetSelectorTerms": discovery,
            "securityGroupSelectorTerms": discovery,
            # Left unset, whether a node gets a public IP follows its subnet's
            # MapPublicIpOnLaunch; a stack's own subnets (network.subnets) may be public.
            # False keeps every node private whatever subnet it lands in (the field's
            # description in karpenter-provider-aws pkg/apis/crds, and EC2's RunInstances
            # AssociatePublicIpAddress, which it sets).
            "associatePublicIPAddress": False,
            "blockDeviceMappings": [
                _volume("/dev/xvda", OS_VOLUME_GB),
                _volume("/dev/xvdb", disk_gb),
            ],
            # IMDSv2 only, one hop: pods cannot reach the node's credentials; they get
            # their own through Pod Identity.
            "metadataOptions": {
                "httpEndpoint": "enabled",
                "httpProtocolIPv6": "disabled",
                "httpPutResponseHopLimit": 1,
                "httpTokens": "required",
            },
            "tags": stack_tags(stack, pool=name),
        },
    }
