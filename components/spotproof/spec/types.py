"""The fleet: what a stack asks for, independent of any cloud SDK.

Every field is documented once, here, with its default in the type. The stack config
uses the same names in camelCase (``spotproof:gpuPools[0].maxNodes``); ``spotproof.spec.config``
reads and validates it into these frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from spotproof.catalog import Cloud


class PoolClass(StrEnum):
    """What a pool is for; the scheduling contract gives each class its taints and labels."""

    SYSTEM = "system"
    """On-demand nodes for cluster add-ons; tainted ``CriticalAddonsOnly`` so nothing else lands."""
    SPOT_GPU = "spot-gpu"
    """Spot/preemptible GPU nodes: cheap, reclaimed with seconds of notice."""
    FLEX_START = "flex-start"
    """GKE DWS flex-start GPU nodes: obtained when capacity frees up, kept for a bounded run."""
    ON_DEMAND_GPU = "on-demand-gpu"
    """Regular GPU nodes: the fallback when spot capacity is gone."""


class Capacity(StrEnum):
    """How a GPU pool's nodes are bought."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"


class TaintEffect(StrEnum):
    """Kubernetes taint effects, spelled as Kubernetes spells them."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


def capacity_class(capacity: Capacity) -> PoolClass:
    """The pool class of GPU capacity bought this way."""
    return PoolClass.SPOT_GPU if capacity is Capacity.SPOT else PoolClass.ON_DEMAND_GPU


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@dataclass(frozen=True)
class SystemPool:
    """The on-demand pool that runs cluster add-ons and nothing else.

    On GKE a node pool (sizes are per zone); on EKS a managed node group (sizes are totals
    across the cluster's subnets).
    """

    machine_type: str = "e2-standard-4"
    """GKE machine type, or EKS instance type (config ``instanceType``, default
    ``m6i.xlarge``)."""
    min_nodes: int = 1
    """Nodes kept; at least 1 so add-ons always have a home. EKS defaults to 2, so the
    Karpenter controller's two replicas sit in two zones."""
    max_nodes: int = 3
    disk_gb: int = 100


@dataclass(frozen=True)
class GpuPool:
    """One machine type of GPU nodes. Several pools of one class diversify the fleet."""

    name: str
    """Node pool name, unique in the stack."""
    machine_type: str
    gpu_type: str
    """Accelerator name (``nvidia-l4``); implied by accelerator-optimized machine types."""
    gpus_per_node: int
    """GPUs on each node; implied by accelerator-optimized machine types."""
    max_nodes: int
    """Upper bound per zone."""
    capacity: Capacity = Capacity.SPOT
    min_nodes: int = 0
    """Nodes per zone kept when idle; 0 lets an idle GPU pool cost nothing."""
    zones: tuple[str, ...] = ()
    """Zones to spread over; empty means every zone of the region that has the GPU."""
    disk_gb: int = 200
    """Boot disk; GPU images with CUDA are large."""
    extra_taints: tuple[Taint, ...] = ()
    """Taints on top of the contract's, e.g. to dedicate a pool to one team."""
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def pool_class(self) -> PoolClass:
        return capacity_class(self.capacity)


@dataclass(frozen=True)
class KarpenterPool:
    """An EKS Karpenter ``NodePool`` of GPU instances: several families, one GPU count.

    Karpenter chooses the instance type at launch from every type the requirements allow,
    so one pool is already diversified; ``min_instance_types`` makes that a guarantee.
    """

    name: str
    """NodePool name, unique in the stack."""
    instance_families: tuple[str, ...]
    """EC2 families to choose from (``g6``, ``g5``, ``g6e``); see ``catalog.eks.FAMILIES``."""
    gpu_limit: int
    """Most ``nvidia.com/gpu`` the pool's nodes may hold together: the spend ceiling."""
    capacity: Capacity = Capacity.SPOT
    gpus_per_node: int = 1
    min_instance_types: int = 3
    """Karpenter launches only if at least this many instance types remain eligible
    (``minValues``): a spot request across many types is far less likely to be refused."""
    weight: int = 100
    """Priority among pools a pod fits, 1-100, highest first. Spot pools default to 100,
    on-demand fallbacks to 10 and must stay below every spot pool."""
    disk_gb: int = 200
    """Data volume for container images; CUDA images are large."""
    expire_after_hours: int = 720
    """Nodes are replaced after this long, picking up new AMIs."""
    extra_taints: tuple[Taint, ...] = ()
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def pool_class(self) -> PoolClass:
        return capacity_class(self.capacity)


@dataclass(frozen=True)
class Karpenter:
    """The Karpenter installation on EKS."""

    version: str
    """Helm chart version of ``karpenter`` and ``karpenter-crd``, pinned (``1.6.3``)."""
    node_image: str = "bottlerocket@latest"
    """AMI alias for GPU nodes. Bottlerocket ships the NVIDIA driver and device plugin, so
    no DaemonSet is needed; pin a version (``bottlerocket@v1.40.0``) in production, as
    ``latest`` replaces nodes on every AMI release."""
    namespace: str = "kube-system"
    replicas: int = 2
    """Controller replicas; spread over zones, so the system group needs as many zones."""


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    """Availability zone; named in config because an offline plan cannot look it up."""


@dataclass(frozen=True)
class Network:
    """Where an EKS cluster lives: subnets the stack names, or a VPC spotproof creates."""

    subnets: tuple[Subnet, ...] = ()
    """Existing private subnets in at least two zones; empty means create a VPC."""
    cidr: str = "10.0.0.0/16"
    """Address range of the created VPC."""
    zones: tuple[str, ...] = ()
    """Zones of the created VPC's private subnets; default the region's a, b and c."""


@dataclass(frozen=True)
class FlexStartPool:
    """A GKE DWS flex-start pool: GPUs obtained when available, held for ``max_run_hours``."""

    name: str
    machine_type: str
    gpu_type: str
    gpus_per_node: int
    max_nodes: int
    max_run_hours: int = 24
    """How long a node may live before GKE reclaims it; at most 168 (7 days)."""
    queued_provisioning: bool = False
    """Provision whole gangs through ProvisioningRequest (needs Kueue or the API directly)."""
    zones: tuple[str, ...] = ()
    disk_gb: int = 200


@dataclass(frozen=True)
class Autoprovisioning:
    """Node auto-provisioning: lets the cluster create pools for pods nothing else fits.

    GKE applies its limits to the *whole cluster*, the declared pools included, so each
    limit must hold every declared pool at its maximum or those pools stop scaling short
    of it. Unset limits are derived from the pools; set ones below that are refused.
    """

    enabled: bool = True
    max_cpu: int | None = None
    """Cluster-wide vCPU ceiling; default: the declared pools at their maximum plus
    :data:`NAP_HEADROOM_CPU` for pools auto-provisioning creates."""
    max_memory_gb: int | None = None
    """Cluster-wide memory ceiling in GB; default: the declared pools' plus
    :data:`NAP_HEADROOM_MEMORY_GB`."""
    gpu_limits: dict[str, int] = field(default_factory=dict)
    """Cluster-wide GPU ceiling per accelerator name, e.g. ``{"nvidia-l4": 8}``; an
    accelerator the declared pools use defaults to what they need at their maximum.
    Auto-provisioning creates GPU nodes only of the accelerators listed."""


NAP_HEADROOM_CPU = 64
NAP_HEADROOM_MEMORY_GB = 256


@dataclass(frozen=True)
class CheckpointBucket:
    """The regional bucket training jobs checkpoint into."""

    name: str
    """Globally unique; defaults to ``<project>-<stack>-checkpoints``."""
    location: str
    """Must equal the cluster's region: cross-region checkpoint traffic is slow and billed."""
    prefix: str = "checkpoints"
    """Key prefix under which jobs write; the workload identity is scoped to the bucket."""
    noncurrent_days: int = 7
    """Days a deleted or overwritten object stays recoverable (as a noncurrent version)
    before the lifecycle purges it. Counted by days alone: checkpoint keys are written once,
    so a "keep N newer versions" condition would never be met (S3 requires both
    conditions of one rule; GCS counts the live version among the newer ones)."""
    kms_key: str | None = None
    """S3 only: KMS key ARN for server-side encryption; default SSE-S3 (AES-256)."""


@dataclass(frozen=True)
class SmokeTest:
    """The training Job that proves preemption recovery on the real cluster."""

    image: str = "ghcr.io/spotproof/smoke-trainer:0.1.0"
    namespace: str = "spotproof"
    target: PoolClass = PoolClass.SPOT_GPU
    """Pool class the Job runs on: spot-gpu, flex-start or on-demand-gpu."""
    gpus: int = 1
    cpu: str = "2"
    memory: str = "8Gi"
    checkpoint_interval: int = 50
    """Steps between periodic checkpoints."""
    total_steps: int = 2000
    seed: int = 0
    model_mb: int = 64
    """Size of the model's state; large values exercise checkpoint throughput."""
    grace_period_seconds: int | None = None
    """terminationGracePeriodSeconds; defaults to what the cloud leaves after its notice
    reaches the pod (``catalog.GRACE_PERIOD_SECONDS``)."""
    backoff_limit: int = 3
    """Real failures allowed; preemptions do not count (see the Job's podFailurePolicy)."""


@dataclass(frozen=True)
class FleetSpec:
    """Everything one stack builds: one cluster, its pools, its bucket, its smoke test."""

    stack: str
    cloud: Cloud
    environment: str
    project: str | None
    """GCP project id on GKE; None on EKS, where the account comes from credentials."""
    region: str
    bucket: CheckpointBucket
    kubernetes_version: str = "1.33"
    """Minor version; plan validates manifests against this version's OpenAPI schema."""
    protect: bool = False
    """Protect stateful resources (cluster, bucket) from deletion; on by default in prod."""
    system_pool: SystemPool = field(default_factory=SystemPool)
    gpu_pools: tuple[GpuPool, ...] = ()
    flex_start: FlexStartPool | None = None
    autoprovisioning: Autoprovisioning = field(default_factory=Autoprovisioning)
    network: Network = field(default_factory=Network)
    """EKS only."""
    karpenter: Karpenter | None = None
    """EKS only: required there."""
    karpenter_pools: tuple[KarpenterPool, ...] = ()
    """EKS GPU pools (config ``gpuPools``); GKE's are :attr:`gpu_pools`."""
    smoke_test: SmokeTest | None = field(default_factory=SmokeTest)

    @property
    def cluster_name(self) -> str:
        return self.stack

    def pools_of(self, pool_class: PoolClass) -> list[GpuPool | FlexStartPool | KarpenterPool]:
        """The GPU pools of one class, in stack order."""
        if pool_class is PoolClass.FLEX_START:
            return [self.flex_start] if self.flex_start else []
        pools = [*self.gpu_pools, *self.karpenter_pools]
        return [pool for pool in pools if pool.pool_class is pool_class]
