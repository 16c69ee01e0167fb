"""Settings that build, but that a real preemption may not honour: warnings, not errors.

Four are checked: a final save that may not fit the grace period; in production, an
image pinned by tag rather than digest; and a GKE network or EKS subnets that exist
already, which the plan cannot see, whose private nodes need a way to what the stack pulls
and writes.

A stack whose smoke Job holds more state than its final save can commit within the grace
period loses the steps since the last periodic checkpoint on every reclaim, silently. The
plan says so, naming the key, at the commit rate ``benchmarks/capacity.py`` measured
(:data:`spotproof.catalog.FINAL_SAVE_MIB_PER_SECOND`). That rate is a floor from a small
machine and an emulator; a GPU node's network to its region's bucket is usually faster,
which is why this warns rather than refuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spotproof.catalog import FINAL_SAVE_MIB_PER_SECOND
from spotproof.fleet import images as images_module
from spotproof.fleet.eks import EksFleet
from spotproof.fleet.gke import GkeFleet
from spotproof.fleet.types import FleetSpec


@dataclass(frozen=True)
class SpecWarning:
    key: str
    """The config key the warning is about, e.g. ``spotproof:smokeTest.modelMb``."""
    message: str


def warnings(spec: FleetSpec) -> list[SpecWarning]:
    return [
        *_final_save_fits(spec),
        *_images_pinned(spec),
        *_existing_network_egress(spec),
        *_existing_subnets_egress(spec),
    ]


GOOGLE_REGISTRIES = re.compile(r"^(?:[a-z0-9-]+-docker\.pkg\.dev|(?:[a-z]+\.)?gcr\.io)$")
"""Artifact Registry and Container Registry hosts, which Private Google Access reaches."""


def _existing_network_egress(spec: FleetSpec) -> list[SpecWarning]:
    """Nodes without external IPs reach Google APIs (Cloud Storage, Artifact Registry)
    only with Private Google Access on their subnetwork or through a Cloud NAT, and any
    other registry only through a Cloud NAT
    (https://cloud.google.com/vpc/docs/private-google-access). A created network has
    both; an existing one is its owner's, and the plan cannot see it."""
    if not isinstance(spec.platform, GkeFleet) or spec.platform.network.existing is None:
        return []
    subnetwork = spec.platform.network.existing.subnetwork
    outside = sorted(
        {
            image
            for _, image in _images(spec)
            if (parsed := images_module.parse(image))
            and not GOOGLE_REGISTRIES.fullmatch(parsed.registry)
        }
    )
    need = "Private Google Access (or a Cloud NAT) for the checkpoint bucket"
    if outside:
        need += f", and a Cloud NAT to pull {', '.join(outside)}"
    return [
        SpecWarning(
            "spotproof:network.existing",
            f"the plan cannot see {subnetwork}; its private nodes need {need}",
        )
    ]


def _existing_subnets_egress(spec: FleetSpec) -> list[SpecWarning]:
    """A managed node group's nodes get public IPs where their subnet maps them on launch
    (Karpenter's do not: its EC2NodeClass says ``associatePublicIPAddress: false``), and
    private nodes reach ECR, S3, STS, EC2, SQS and EKS Auth only through a NAT gateway or
    VPC endpoints for each, with every image copied into ECR
    (https://docs.aws.amazon.com/eks/latest/userguide/private-clusters.html). A created VPC
    has private subnets and a NAT gateway; named subnets are their owner's."""
    if not isinstance(spec.platform, EksFleet) or not spec.platform.network.subnets:
        return []
    named = ", ".join(subnet.id for subnet in spec.platform.network.subnets)
    return [
        SpecWarning(
            "spotproof:network.subnets",
            f"the plan cannot see {named}: they must not map public IPs on launch (the "
            "system node group's nodes would get public addresses) and need a route to a NAT "
            "gateway, or VPC endpoints for ECR, S3, STS, EC2, SQS and EKS Auth with every "
            "image in ECR",
        )
    ]


def _images(spec: FleetSpec) -> list[tuple[str, str]]:
    """Each image the stack runs, with the config key that names it."""
    found = [
        ("spotproof:smokeTest.image", spec.smoke_test.image if spec.smoke_test else None),
        ("spotproof:batch.image", spec.batch.image if spec.batch else None),
    ]
    return [(key, image) for key, image in found if image is not None]


def _images_pinned(spec: FleetSpec) -> list[SpecWarning]:
    """In production, an image by tag: a re-pushed tag changes what the next pod runs,
    even for a run resuming its own checkpoint (``fleet.images``)."""
    if not spec.protect:
        return []
    return [
        SpecWarning(
            key,
            f"{image} is pinned by tag; in production pin the digest ({image.split('@')[0]}"
            "@sha256:...) so a re-pushed tag cannot change what a resumed run executes",
        )
        for key, image in _images(spec)
        if (parsed := images_module.parse(image)) and not parsed.digest
    ]


def _final_save_fits(spec: FleetSpec) -> list[SpecWarning]:
    smoke = spec.smoke_test
    if smoke is None or smoke.grace_period_seconds is None:
        return []
    needed = smoke.model_mb / FINAL_SAVE_MIB_PER_SECOND
    if needed <= smoke.grace_period_seconds:
        return []
    fits = int(FINAL_SAVE_MIB_PER_SECOND * smoke.grace_period_seconds)
    return [
        SpecWarning(
            "spotproof:smokeTest.modelMb",
            f"{smoke.model_mb} MiB of state needs ~{needed:.0f} s to commit at the measured "
            f"{FINAL_SAVE_MIB_PER_SECOND} MiB/s, more than the {smoke.grace_period_seconds} s "
            f"grace period on {spec.cloud.value.upper()}: a reclaim would lose the steps since "
            f"the last periodic checkpoint; ~{fits} MiB fits",
        )
    ]
