"""GKE machine types and the GPUs they carry.

GKE has two ways to get GPUs onto a node:

- accelerator-optimized machine types (A2, A3, A4, G2) come with a fixed number of
  GPUs of one model; the node pool must still declare them as ``guest_accelerators``;
- N1 machine types take attachable GPUs (T4, V100, P4, P100) in counts of 1, 2, 4 or 8.

One node pool holds one machine type, so a diversified spot fleet is several pools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spotproof.catalog.gke_monitoring import MANAGED_PROMETHEUS
from spotproof.catalog.profile import CloudProfile, PublishedRate


class CatalogError(ValueError):
    """A machine type / GPU combination that GKE cannot create.

    ``culprit`` is which input is wrong (``machine_type``, ``accelerator`` or ``count``) and
    ``allowed`` names what would have been accepted, for the caller's one-line error.
    """

    def __init__(self, culprit: str, problem: str, allowed: str) -> None:
        super().__init__(problem)
        self.culprit = culprit
        self.problem = problem
        self.allowed = allowed


@dataclass(frozen=True)
class GpuShape:
    """What one node of a machine type carries."""

    machine_type: str
    accelerator: str
    """GKE accelerator name (``nvidia-l4``), also the node label ``gke-accelerator``."""
    count: int
    """GPUs per node; the node's allocatable ``nvidia.com/gpu``."""


# Accelerator-optimized families: machine type -> (accelerator, GPUs per node).
_FIXED: dict[str, tuple[str, int]] = {
    **{f"g2-standard-{cpus}": ("nvidia-l4", 1) for cpus in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("nvidia-l4", 2),
    "g2-standard-48": ("nvidia-l4", 4),
    "g2-standard-96": ("nvidia-l4", 8),
    **{f"a2-highgpu-{n}g": ("nvidia-tesla-a100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("nvidia-tesla-a100", 16),
    **{f"a2-ultragpu-{n}g": ("nvidia-a100-80gb", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("nvidia-h100-80gb", n) for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": ("nvidia-h100-mega-80gb", 8),
    "a3-ultragpu-8g": ("nvidia-h200-141gb", 8),
    "a4-highgpu-8g": ("nvidia-b200", 8),
}

# Attachable GPUs on N1 machine types: accelerator -> GPU counts a node may carry.
_ATTACHABLE: dict[str, tuple[int, ...]] = {
    "nvidia-tesla-t4": (1, 2, 4),
    "nvidia-tesla-v100": (1, 2, 4, 8),
    "nvidia-tesla-p4": (1, 2, 4),
    "nvidia-tesla-p100": (1, 2, 4),
}

_N1 = re.compile(r"^n1-(standard|highmem|highcpu)-(\d+)$")

# Largest N1 VM (vCPUs, memory GB) each attachable GPU count allows: the N1 tables of
# https://cloud.google.com/compute/docs/gpus (page of 2026-04-14; e.g. "N1+T4 GPUs ... 1 16
# 1 to 48 1 to 312"), as SkyPilot also encodes them (skypilot-org/skypilot,
# sky/catalog/gcp_catalog.py). Older copies of that page said 24 vCPUs for 1 x T4.
# 4 x P100 allow 96 vCPUs in most zones but 64 in a few; 64 is taken, to hold everywhere.
_N1_LIMITS: dict[str, dict[int, tuple[int, int]]] = {
    "nvidia-tesla-t4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "nvidia-tesla-v100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "nvidia-tesla-p4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "nvidia-tesla-p100": {1: (16, 104), 2: (32, 208), 4: (64, 208)},
}

ACCELERATORS: frozenset[str] = frozenset(
    {accelerator for accelerator, _ in _FIXED.values()} | set(_ATTACHABLE)
)
"""Every accelerator name spotproof knows on GKE (node auto-provisioning limits use these)."""

MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9]+(-[a-z0-9]+)*$")
"""The shape of a Compute Engine machine type name."""


def gpu_shape(machine_type: str, accelerator: str | None, count: int | None) -> GpuShape:
    """Resolve what a GPU node of ``machine_type`` carries, checking the combination.

    ``accelerator`` and ``count`` may be left out for accelerator-optimized types; when
    given they must agree with the type. N1 types need both.
    """
    if machine_type in _FIXED:
        fixed_accelerator, fixed_count = _FIXED[machine_type]
        if accelerator not in (None, fixed_accelerator):
            raise CatalogError(
                "accelerator",
                f"{machine_type} carries {fixed_accelerator}, not {accelerator}",
                fixed_accelerator,
            )
        if count not in (None, fixed_count):
            raise CatalogError(
                "count",
                f"{machine_type} carries exactly {fixed_count} GPU(s), not {count}",
                str(fixed_count),
            )
        return GpuShape(machine_type, fixed_accelerator, fixed_count)

    if _N1.fullmatch(machine_type):
        if accelerator not in _ATTACHABLE:
            raise CatalogError(
                "accelerator",
                f"{machine_type} needs an attachable GPU type, got {accelerator}",
                ", ".join(sorted(_ATTACHABLE)),
            )
        counts = _ATTACHABLE[accelerator]
        if count not in counts:
            raise CatalogError(
                "count",
                f"{machine_type} cannot carry {count} x {accelerator}",
                ", ".join(map(str, counts)),
            )
        cpus, memory_gb = machine_resources(machine_type)
        max_cpus, max_memory_gb = _N1_LIMITS[accelerator][count]
        if cpus > max_cpus or memory_gb > max_memory_gb:
            fitting = [n for n in counts if cpus <= _N1_LIMITS[accelerator][n][0]]
            raise CatalogError(
                "machine_type",
                f"{machine_type} has {cpus} vCPUs and {memory_gb:g} GB; {count} x {accelerator} "
                f"allow at most {max_cpus} vCPUs and {max_memory_gb} GB",
                f"an n1 type within that, or {', '.join(map(str, fitting))} x {accelerator}"
                if fitting
                else "a smaller n1 type",
            )
        return GpuShape(machine_type, accelerator, count)

    raise CatalogError(
        "machine_type",
        f"{machine_type} is not a GPU machine type",
        "g2-standard-*, a2-highgpu-*g, a2-ultragpu-*g, a3-*, a4-highgpu-8g, "
        "or n1-* with an attachable GPU",
    )


# --- machine sizes and GPU zones ------------------------------------------------------
#
# Read off the public catalog skypilot-org/skypilot-catalog, ``catalogs/v8/gcp/vms.csv``
# (commit 006059e0), which its authors generate from the Compute Engine API's machine
# types and accelerator types per zone. It is a snapshot: Google adds zones over time, so
# a zone missing here may exist by now. The spec then refuses it; name the zone in
# ``zones`` anyway once ``gcloud compute accelerator-types list`` shows it, and update
# this table.

DEFAULT_POOL_ZONES = 3
"""Zones a node pool of a regional cluster spans when it names none: GKE replicates a
regional cluster's pools across three zones of its region by default."""

# vCPUs and memory (GB) of the accelerator-optimized types in the catalog.
_FIXED_SIZES: dict[str, tuple[int, float]] = {
    **{f"g2-standard-{cpus}": (cpus, 4.0 * cpus) for cpus in (4, 8, 12, 16, 24, 32, 48, 96)},
    **{f"a2-highgpu-{n}g": (12 * n, 85.0 * n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": (96, 1360.0),
    **{f"a2-ultragpu-{n}g": (12 * n, 170.0 * n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": (26 * n, 234.0 * n) for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": (208, 1872.0),
    "a3-ultragpu-8g": (224, 2952.0),
    "a4-highgpu-8g": (224, 3968.0),
}

# Memory (GB) per vCPU of the general-purpose families, by shape (e2-standard-8: 8 vCPUs,
# 32 GB; n1-standard-8: 8 vCPUs, 30 GB).
_MEMORY_PER_CPU: dict[str, dict[str, float]] = {
    "e2": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
    "n1": {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9},
    "n2": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
    "n2d": {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0},
    "n4": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
    "c2": {"standard": 4.0},
    "c3": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
}

_GENERAL = re.compile(r"([a-z][a-z0-9]*)-(standard|highmem|highcpu)-(\d+)")


def machine_resources(machine_type: str) -> tuple[int, float]:
    """(vCPUs, memory in GB) of one node of ``machine_type``; CatalogError if unknown."""
    if machine_type in _FIXED_SIZES:
        return _FIXED_SIZES[machine_type]
    match = _GENERAL.fullmatch(machine_type)
    if match and match[2] in _MEMORY_PER_CPU.get(match[1], {}):
        cpus = int(match[3])
        return cpus, cpus * _MEMORY_PER_CPU[match[1]][match[2]]
    raise CatalogError(
        "machine_type",
        f"{machine_type} is not a machine type spotproof knows the size of",
        ", ".join(
            f"{family}-{{{'|'.join(shapes)}}}-N" for family, shapes in _MEMORY_PER_CPU.items()
        ),
    )


def _zones(spec: str) -> tuple[str, ...]:
    """``"us-central1:abc us-east1:bcd"`` -> every zone it names."""
    return tuple(
        f"{region}-{letter}"
        for entry in spec.split()
        for region, letters in [entry.split(":")]
        for letter in letters
    )


_REGION_ZONES = _zones(
    "africa-south1:abc asia-east1:abc asia-east2:abc asia-northeast1:abc asia-northeast2:abc "
    "asia-northeast3:abc asia-south1:abc asia-south2:abc asia-southeast1:abc "
    "asia-southeast2:abc australia-southeast1:abc australia-southeast2:abc "
    "europe-central2:abc europe-north1:abc europe-north2:abc europe-southwest1:abc "
    "europe-west1:bcd europe-west10:abc europe-west12:abc europe-west2:abc europe-west3:abc "
    "europe-west4:abc europe-west6:abc europe-west8:abc europe-west9:abc me-central1:abc "
    "me-central2:abc me-west1:abc northamerica-northeast1:abc northamerica-northeast2:abc "
    "northamerica-south1:abc southamerica-east1:abc southamerica-west1:abc us-central1:abcf "
    "us-east1:bcd us-east4:abc us-east5:abc us-south1:abc us-west1:abc us-west2:abc "
    "us-west3:abc us-west4:abc"
)
"""Every zone of every region, as the e2-standard-8 rows list them."""

_H100_ZONES = (
    "asia-east1:c asia-northeast1:b asia-south1:c asia-south2:b asia-southeast1:bc "
    "australia-southeast1:c europe-north1:c europe-west1:bc europe-west3:c europe-west4:bc "
    "europe-west8:c europe-west9:c us-central1:abc us-east4:abc us-east5:a us-west1:ab "
    "us-west4:a"
)
_ACCELERATOR_ZONES: dict[str, tuple[str, ...]] = {
    "nvidia-l4": _zones(
        "asia-east1:abc asia-northeast1:abc asia-northeast3:ab asia-south1:abc "
        "asia-southeast1:abc europe-west1:bc europe-west2:ab europe-west3:ab europe-west4:abc "
        "europe-west6:bc me-central2:ac northamerica-northeast1:bc northamerica-northeast2:ab "
        "us-central1:abc us-east1:bcd us-east4:ac us-west1:abc us-west4:ac"
    ),
    "nvidia-tesla-t4": _zones(
        "asia-east1:ac asia-east2:ac asia-northeast1:ac asia-northeast3:bc asia-south1:ab "
        "asia-southeast1:abc asia-southeast2:ab australia-southeast1:ac europe-central2:bc "
        "europe-west1:bcd europe-west2:ab europe-west3:b europe-west4:abc me-west1:bc "
        "northamerica-northeast1:c southamerica-east1:abc us-central1:abcf us-east1:bcd "
        "us-east4:abc us-west1:ab us-west2:bc us-west3:b us-west4:ab"
    ),
    "nvidia-tesla-v100": _zones(
        "asia-east1:c europe-west4:abc us-central1:abcf us-east1:bc us-west1:ab"
    ),
    "nvidia-tesla-a100": _zones(
        "asia-northeast1:ac asia-northeast3:ab asia-southeast1:abc europe-west4:ab me-west1:ac "
        "us-central1:abcf us-east1:b us-west1:b us-west3:b us-west4:b"
    ),
    "nvidia-a100-80gb": _zones(
        "asia-southeast1:c europe-west4:a us-central1:ac us-east4:c us-east5:ab"
    ),
    "nvidia-h100-80gb": _zones(_H100_ZONES),
    "nvidia-h100-mega-80gb": _zones(
        "asia-east1:c asia-northeast1:b asia-southeast1:bc australia-southeast1:c "
        "europe-north1:c europe-west1:bc europe-west3:c europe-west4:bc us-central1:abc "
        "us-east4:abc us-east5:a us-west1:ab us-west4:a"
    ),
    "nvidia-h200-141gb": _zones(
        "asia-south1:b asia-south2:c europe-west1:b europe-west4:a us-central1:b us-east4:b "
        "us-east5:a us-south1:b us-west1:c"
    ),
    "nvidia-b200": _zones(
        "asia-northeast1:b asia-southeast1:b europe-north1:b europe-west4:b us-central1:b "
        "us-east1:b us-east4:b us-south1:b us-west2:c us-west3:bc"
    ),
}
"""Zones offering each accelerator (P4 and P100 are not tabled: name their zones)."""


def region_of_location(location: str) -> str:
    """The region of a cluster location: a region (``us-central1``) or, for a zonal
    cluster, a zone (``us-central1-a``)."""
    head, _, tail = location.rpartition("-")
    return head if len(tail) == 1 and tail.isalpha() and head else location


def region_zones(region: str) -> tuple[str, ...] | None:
    """Zones of ``region``; None when the catalog does not know the region."""
    zones = tuple(z for z in _REGION_ZONES if z.rsplit("-", 1)[0] == region)
    return zones or None


def accelerator_zones(accelerator: str, region: str) -> frozenset[str] | None:
    """Zones of ``region`` offering ``accelerator``; None when the catalog cannot tell
    (an unknown region, or an accelerator it does not table)."""
    if region_zones(region) is None or accelerator not in _ACCELERATOR_ZONES:
        return None
    return frozenset(z for z in _ACCELERATOR_ZONES[accelerator] if z.rsplit("-", 1)[0] == region)


def accelerators_in(region: str) -> list[str]:
    """Accelerators some zone of ``region`` offers, sorted."""
    return sorted(name for name in _ACCELERATOR_ZONES if accelerator_zones(name, region))


HYPERDISK_ONLY_SERIES = ("a3-ultragpu-", "a4-highgpu-")
"""Machine series that attach only Hyperdisk, not Persistent Disk: A3 Ultra and A4.
https://cloud.google.com/compute/docs/accelerator-optimized-machines (page of 2026-04-13),
for both: "You can't use Persistent Disk (regional or zonal). You can only use Google Cloud
Hyperdisk", and Hyperdisk Balanced "is the only disk type that is supported for the boot
disk". A pool of them with a ``pd-*`` boot disk fails to create."""


def boot_disk_type(machine_type: str) -> str:
    """The boot disk type a node of ``machine_type`` can use: Hyperdisk Balanced where the
    series takes only Hyperdisk, Persistent Disk Balanced elsewhere."""
    return "hyperdisk-balanced" if machine_type.startswith(HYPERDISK_ONLY_SERIES) else "pd-balanced"


LIST_PREFIX_ATTRIBUTE = "storage.googleapis.com/objectListPrefix"
"""The IAM Conditions API attribute holding the ``prefix`` of a Cloud Storage list call
(https://cloud.google.com/iam/docs/conditions-attribute-reference, "API attributes"): the
one way a condition narrows a listing, which is a call on the bucket itself."""


DNS_ENDPOINT_SUFFIX = ".gke.goog"
"""The domain of every control plane's DNS-based endpoint (``gke-<id>.<location>.gke.goog``),
which serves a publicly trusted certificate rather than one of the cluster's CA
(google-github-actions/get-gke-credentials writes its kubeconfig without one)."""


# --- what shared code asks of GKE ------------------------------------------------------

SYSTEM_TAINT = ("components.gke.io/gke-managed-components", "true")
"""The system pool's taint on GKE. GKE's own add-ons tolerate this key (event-exporter,
for one, tolerates nothing else), not ``CriticalAddonsOnly``: a system pool tainted that
way would leave them without a node, and node auto-provisioning would create an
untainted pool for them. Google's cluster toolkit taints its system pool the same way
(GoogleCloudPlatform/cluster-toolkit, ``community/modules/scheduler/gke-cluster/variables.tf``,
``system_node_pool_taints``)."""

PROFILE = CloudProfile(
    # Spot VMs stop 30 s after notice; on GKE >= 1.22.8 graceful node shutdown gives
    # non-system pods the first 15 s and system pods the last 15 s, so a grace period
    # above 15 s has no effect there.
    preemption_notice_seconds=15,
    # GKE's kubelet hears the VM's shutdown itself.
    interruption_delivery_seconds=0,
    cluster_type="gcp:container/cluster:Cluster",
    provider_prefix="gcp:",
    region_key="gcp:region",
    extra="gcp",
    sdk_module="pulumi_gcp",
    keda_identity="gcp",
    reclaims=PublishedRate.of_share(
        0.15,
        24,
        "Google once put preemptible VMs' average preemption rate at 5-15% per day per "
        "project, on a seven-day average (https://cloud.google.com/compute/docs/instances/"
        "preemptible, as quoted second-hand: current pages, Spot VMs' too, say only that the "
        "chance is generally low and varies by day and zone); its upper end, 15% of nodes a "
        "day, as a Poisson rate: -ln(1 - 0.15) / 24 h",
        "2026-11-26",
    ),
    # kubernetes/autoscaler cluster-autoscaler/FAQ.md: "on GCE it usually takes 3 to 4
    # minutes from CA request to when pods can be scheduled on newly created nodes"; the
    # upper end, for any node (no GPU node's time is published).
    node_ready_seconds=240,
    managed_prometheus=MANAGED_PROMETHEUS,
    system_taint=SYSTEM_TAINT,
    network_type="gcp:compute/network:Network",
    existing_network_setting="network.existing",
    project_key="gcp:project",
    # NodeLocal DNSCache, and the metadata server with Cloud DNS; Workload Identity's
    # metadata server, port 80 with Dataplane V2 and 988 otherwise
    # (https://cloud.google.com/kubernetes-engine/docs/concepts/workload-identity; the
    # other sources in ``kube.network_policy``'s docstring).
    host_dns=("169.254.20.10/32", "169.254.169.254/32"),
    identity_endpoints=(("169.254.169.254/32", 80), ("169.254.169.252/32", 988)),
    # Bucket names are global; service account and custom role ids are unique per project.
    unique_names={
        "gcp:storage/bucket:Bucket": ("name",),
        "gcp:serviceaccount/account:Account": ("project", "accountId"),
        "gcp:container/cluster:Cluster": ("project", "location", "name"),
        "gcp:compute/network:Network": ("project", "name"),
        "gcp:compute/subnetwork:Subnetwork": ("project", "region", "name"),
        "gcp:compute/router:Router": ("project", "region", "name"),
        "gcp:pubsub/topic:Topic": ("project", "name"),
        "gcp:pubsub/subscription:Subscription": ("project", "name"),
        "gcp:projects/iAMCustomRole:IAMCustomRole": ("project", "roleId"),
    },
)
"""What shared code asks of GKE (``catalog.profile``)."""
