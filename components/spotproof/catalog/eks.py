"""EC2 GPU instance families and the instance types Karpenter can choose from in them.

A Karpenter NodePool names *families* (``g5``, ``g6``) and a GPU count, not instance types;
Karpenter then picks among every type that matches. To check a pool offline ("does it
leave Karpenter at least ``minValues`` types to choose from?") spotproof needs the same
list, kept here. Only x86_64 NVIDIA families are listed: the smoke image and most
training images are amd64, and mixing architectures in one pool needs multi-arch images.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spotproof.catalog.profile import CloudProfile, ManagedPrometheus, PublishedRate, ScrapeFloor
from spotproof.catalog.versions import Introduced


@dataclass(frozen=True)
class GpuFamily:
    """One EC2 instance family with NVIDIA GPUs."""

    name: str
    gpu: str
    """GPU model as Karpenter labels it (``karpenter.k8s.aws/instance-gpu-name``)."""
    gpus_by_size: dict[str, int]
    """Instance size (``xlarge``, ``12xlarge``) -> GPUs per instance."""

    def instance_types(self, gpus: int) -> list[str]:
        return [f"{self.name}.{size}" for size, n in self.gpus_by_size.items() if n == gpus]


_ONE_GPU_SIZES = {size: 1 for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")}

FAMILIES: dict[str, GpuFamily] = {
    family.name: family
    for family in (
        GpuFamily("g4dn", "t4", {**_ONE_GPU_SIZES, "12xlarge": 4, "metal": 8}),
        GpuFamily("g5", "a10g", {**_ONE_GPU_SIZES, "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
        GpuFamily("g6", "l4", {**_ONE_GPU_SIZES, "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
        GpuFamily("g6e", "l40s", {**_ONE_GPU_SIZES, "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}),
        GpuFamily("gr6", "l4", {"4xlarge": 1, "8xlarge": 1}),
        GpuFamily("p3", "v100", {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8}),
        GpuFamily("p4d", "a100", {"24xlarge": 8}),
        GpuFamily("p4de", "a100", {"24xlarge": 8}),
        GpuFamily("p5", "h100", {"4xlarge": 1, "48xlarge": 8}),
        GpuFamily("p5e", "h200", {"48xlarge": 8}),
        GpuFamily("p5en", "h200", {"48xlarge": 8}),
    )
}

# Labels Karpenter puts on every node it launches, from the instance it chose.
INSTANCE_FAMILY_LABEL = "karpenter.k8s.aws/instance-family"
INSTANCE_GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
INSTANCE_GPU_NAME_LABEL = "karpenter.k8s.aws/instance-gpu-name"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

SYSTEM_INSTANCE_TYPE = "m6i.xlarge"
"""Default for the system node group: 4 vCPU / 16 GiB holds CoreDNS, Karpenter and agents."""

INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
"""The shape of an EC2 instance type name (``m6i.xlarge``)."""


def instance_types(families: tuple[str, ...], gpus: int) -> list[str]:
    """Every instance type of ``families`` with exactly ``gpus`` GPUs, sorted."""
    return sorted(t for name in families for t in FAMILIES[name].instance_types(gpus))


def gpu_counts(families: tuple[str, ...]) -> list[int]:
    """GPU counts some instance type of ``families`` offers."""
    return sorted({n for name in families for n in FAMILIES[name].gpus_by_size.values()})


def _patches(major: int, minor: int, last: int) -> tuple[str, ...]:
    return tuple(f"{major}.{minor}.{patch}" for patch in range(last + 1))


KARPENTER_VERSIONS: tuple[str, ...] = (
    *_patches(1, 0, 14),
    *_patches(1, 1, 10),
    *_patches(1, 2, 8),
    *_patches(1, 3, 8),
    *_patches(1, 4, 4),
    *_patches(1, 5, 8),
    *_patches(1, 6, 8),
    *_patches(1, 7, 6),
    *_patches(1, 8, 8),
    *_patches(1, 9, 2),
    *_patches(1, 10, 2),
    *_patches(1, 11, 3),
    *_patches(1, 12, 2),
    *_patches(1, 13, 1),
    *_patches(1, 14, 1),
    "1.15.0",
)
"""Every Karpenter v1 release, whose charts (``karpenter``, ``karpenter-crd``) are published
at ``oci://public.ecr.aws/karpenter`` with the same version by the release workflow: the
``v1.*`` tags of aws/karpenter-provider-aws up to 1.14.1 (repository snapshot of
2026-08-21, commit 1d927085; patch numbers run without gaps in every minor line), and
1.15.0, released 2026-10-10 (https://karpenter.sh/v1.15/upgrading/)."""


KARPENTER_INTRODUCED: tuple[Introduced, ...] = (
    Introduced("NodePool", "spec.template.spec.requirements[].operator", "1.9.0", "Gte"),
    Introduced("NodePool", "spec.template.spec.requirements[].operator", "1.9.0", "Lte"),
    Introduced("NodePool", "spec.replicas", "1.8.0"),
    Introduced("NodePool", "spec.disruption.consolidationPolicy", "1.14.0", "Balanced"),
    Introduced("EC2NodeClass", "spec.capacityReservationSelectorTerms", "1.3.0"),
)
"""What Karpenter's v1 CRDs accept only from some release on (aws/karpenter-provider-aws
``pkg/apis/crds/karpenter.sh_nodepools.yaml`` and ``karpenter.k8s.aws_ec2nodeclasses.yaml``
at each ``v1.*`` tag up to v1.14.1; every field spotproof renders is there from v1.0.0).
1.15.0 was not in the snapshot read; its CRDs are taken to accept all of this."""


# Zone codes of the regions spotproof knows, from the public dataset jsonmaur/aws-regions
# (regions.json, commit 2b0706bf, data of 2021-12). AWS maps codes to physical zones per
# account in its oldest regions, and some accounts see only a subset (us-west-1: two of
# the three): a code outside this set does not exist for anyone; one inside may still be
# missing from an account, which only ``aws ec2 describe-availability-zones`` can tell.
REGION_ZONES: dict[str, str] = {
    "us-east-1": "abcdef",
    "us-east-2": "abc",
    "us-west-1": "abc",
    "us-west-2": "abcd",
    "eu-west-1": "abc",
    "eu-central-1": "abc",
    "ap-southeast-1": "abc",
    "ap-northeast-1": "abcd",
}


def region_zones(region: str) -> tuple[str, ...] | None:
    """Zone codes of ``region``; None for a region not in :data:`REGION_ZONES`."""
    letters = REGION_ZONES.get(region)
    return tuple(f"{region}{letter}" for letter in letters) if letters else None


# --- what shared code asks of EKS ------------------------------------------------------

SHORTEST_SCRAPE_SECONDS = 30
"""Amazon Managed Service for Prometheus's managed collector refuses a shorter
``scrape_interval`` (https://docs.aws.amazon.com/prometheus/latest/userguide/
AMP-collector-how-to.html, "Scraper configuration")."""

MANAGED_PROMETHEUS = ManagedPrometheus(
    # The ARN of a Standard SNS topic, the only receiver Amazon Managed Service for
    # Prometheus's alert manager supports (https://docs.aws.amazon.com/prometheus/latest/
    # userguide/AMP-alertmanager-receiver-config.html: a FIFO topic is refused).
    notify_target=re.compile(r"arn:aws[a-z-]*:sns:[a-z0-9-]{1,30}:[0-9]{12}:[A-Za-z0-9_-]{1,256}"),
    notify_target_form="a Standard SNS topic's ARN, arn:aws:sns:REGION:ACCOUNT:TOPIC",
    scrape_floor=ScrapeFloor(
        SHORTEST_SCRAPE_SECONDS, "Amazon Managed Service for Prometheus's collector"
    ),
)

PROFILE = CloudProfile(
    # A best-effort two-minute spot interruption notice.
    preemption_notice_seconds=120,
    # The warning travels EventBridge -> SQS -> Karpenter, which then deletes the NodeClaim
    # and drains the node; 30 s is a budget for that hop, not a measured figure.
    interruption_delivery_seconds=30,
    cluster_type="aws:eks/cluster:Cluster",
    provider_prefix="aws:",
    region_key="aws:region",
    extra="aws",
    sdk_module="pulumi_aws",
    # ``aws-eks`` is deprecated.
    keda_identity="aws",
    reclaims=PublishedRate.of_share(
        0.20,
        720,
        "The EC2 Spot Instance Advisor's frequency of interruption, the share of capacity Spot "
        "reclaimed over the trailing month, in buckets <5%, 5-10%, 10-15%, 15-20% and >20% "
        "(https://aws.amazon.com/ec2/spot/instance-advisor/, as quoted by grailbio/base "
        "cloud/spotadvisor; data: https://spot-bid-advisor.s3.amazonaws.com/"
        "spot-advisor-data.json); the worst bucket's edge, 20% of instances a month, read as "
        "each instance's chance and as a Poisson rate: -ln(1 - 0.20) / 720 h",
        "2026-11-26",
    ),
    # Karpenter launches a node for the pending pod itself: the NodeClaim events in its docs
    # (aws/karpenter-provider-aws website/content/en/docs/concepts/nodeclaims.md) show about
    # 34 s from Launched to Ready for an ordinary node. GPU images boot and load their driver
    # slower; no figure is published, so 120 s is an assumption.
    node_ready_seconds=120,
    managed_prometheus=MANAGED_PROMETHEUS,
    # With public access off the API answers inside the VPC only
    # (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html).
    network_type="aws:ec2/vpc:Vpc",
    existing_network_setting="network.subnets",
    # The EKS Pod Identity agent, which pods call for credentials
    # (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-how-it-works.html).
    identity_endpoints=(("169.254.170.23/32", 80),),
    # S3 bucket names are global; IAM role names unique per account
    # (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html).
    unique_names={
        "aws:s3/bucket:Bucket": ("bucket",),
        "aws:iam/role:Role": ("name",),
        "aws:iam/policy:Policy": ("name",),
        "aws:eks/cluster:Cluster": ("region", "name"),
        "aws:sqs/queue:Queue": ("region", "name"),
        "aws:cloudwatch/eventRule:EventRule": ("region", "name"),
    },
)
"""What shared code asks of EKS (``catalog.profile``)."""

KARPENTER_TERMINATION_GRACE_SECONDS = PROFILE.grace_seconds
"""NodePool ``terminationGracePeriod`` on EKS: a drain that PDBs or ``do-not-disrupt`` hold
back ends this long after it starts, so a pod with up to this much grace finishes by the
end of the two-minute notice."""
