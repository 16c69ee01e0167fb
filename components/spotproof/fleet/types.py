"""The fleet: what a stack asks for, independent of any cloud SDK.

A :class:`FleetSpec` is what every cloud shares (region, system pool, checkpoint bucket,
smoke test) plus one cloud section (``spec.gke.GkeFleet``, ``spec.eks.EksFleet``,
``spec.aks.AksFleet``) with that cloud's pools. Every field is documented once, on the
field, together with its config key, reader (which states the allowed range) and default
(:func:`spotproof.fleet.fields.setting`); the stack config uses the camelCase keys
(``spotproof:gpuPools[0].maxNodes``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from spotproof.catalog import Cloud, jobset, keda, kueue
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import (
    Checked,
    ConfigObject,
    boolean,
    check_label,
    dns_label,
    enumeration,
    integer,
    items,
    labels,
    published,
    read_settings,
    setting,
    text,
)
from spotproof.fleet.images import image_reference


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
    """A node taint. Not judged on its own (the scheduling contract's taints use reserved
    prefixes); a pool judges its ``extra_taints`` as the stack's ``extraTaints``."""

    key: str
    value: str
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    def config_text(self) -> str:
        """As stack config writes a taint: ``key=value:Effect``."""
        effect = self.effect.value if isinstance(self.effect, TaintEffect) else self.effect
        return f"{self.key}={self.value}:{effect}"


def taint(key: str, raw: Any) -> Taint:
    match = re.fullmatch(r"([^=:]+)=([^=:]*):([A-Za-z_]+)", raw) if isinstance(raw, str) else None
    if not match:
        raise SpecError(key, raw, "not a taint", "key=value:Effect, e.g. team=research:NoSchedule")
    taint_key, value, effect = match.groups()
    if effect not in TaintEffect._value2member_map_:
        raise SpecError(key, raw, f"unknown taint effect {effect}", ", ".join(TaintEffect))
    check_label(key, taint_key, value)
    return Taint(taint_key, value, TaintEffect(effect))


def taints(key: str, raw: Any) -> tuple[Taint, ...]:
    return tuple(taint(item_key, item) for item_key, item in items(key, raw))


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_PREFIX = re.compile(r"^(?=.{2,256}$)(?!.*//)[a-z0-9][a-z0-9/_-]*[a-z0-9]$")
"""A key prefix: lower-case segments joined by single slashes, at most 256 characters.
Object keys end at 1,024 bytes (S3 and GCS object names, Azure blob names), and the
runtime's keys below a prefix take some 200 of them; an empty segment is a key the
runtime refuses."""


def _key_prefix(example: str) -> Any:
    return text(_PREFIX, f"a key prefix like {example} (2-256 of a-z 0-9 / _ -)")


def _on_demand(key: str, raw: Any) -> Capacity:
    if raw != Capacity.ON_DEMAND.value:
        raise SpecError(
            key, raw, "the system pool runs cluster add-ons and cannot be spot", "on-demand"
        )
    return Capacity.ON_DEMAND


@dataclass(frozen=True)
class SystemPool(Checked):
    """The on-demand pool that runs cluster add-ons and nothing else.

    Each cloud states its machine type key and default in a subclass
    (``GkeSystemPool``, ``EksSystemPool``, ``AksSystemPool``).
    """

    machine_type: str
    min_nodes: int = setting("minNodes", integer(1, 1000), 1)
    """Nodes kept; at least 1 so add-ons always have a home."""
    max_nodes: int = setting(
        "maxNodes", integer(1, 1000), None, derived_default=lambda read: max(3, read["min_nodes"])
    )
    """Upper bound; defaults to 3, or ``minNodes`` when that is larger."""
    disk_gb: int = setting("diskGb", integer(20, 65536), 100)
    capacity: Capacity = setting("capacity", _on_demand, Capacity.ON_DEMAND)
    """Always on-demand: add-ons (CoreDNS, the autoscaler, Karpenter) would go down with
    every reclaim, and AKS refuses a spot pool as the default pool
    (``articles/aks/spot-node-pool.md``). Accepted only to refuse ``spot`` by name."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> SystemPool:
        return system_pool(cls)(key, raw)


def system_pool(cls: type[SystemPool]) -> Callable[[str, Any], SystemPool]:
    """The config reader of a cloud's system pool type."""

    def parse(key: str, raw: Any) -> SystemPool:
        from spotproof.fleet.shared import check_node_range  # noqa: PLC0415 (imports us)

        obj = ConfigObject(key, raw, fields_of=cls)
        values = read_settings(cls, obj)
        check_node_range(obj, values["min_nodes"], values["max_nodes"])
        obj.finish()
        return cls(**values)

    return parse


@dataclass(frozen=True, kw_only=True)
class CapacityPool(Checked):
    """What every cloud's GPU pool of spot or on-demand capacity shares (its cloud's type
    adds the machine shape and sizes)."""

    capacity: Capacity = setting("capacity", enumeration(Capacity), Capacity.SPOT)
    extra_taints: tuple[Taint, ...] = setting("extraTaints", taints, ())
    """Taints on top of the contract's, e.g. to dedicate a pool to one team."""
    extra_labels: dict[str, str] = setting("extraLabels", labels, factory=dict)

    @property
    def pool_class(self) -> PoolClass:
        return capacity_class(self.capacity)

    @property
    def queued(self) -> bool:
        """Spot and on-demand nodes come to any pending pod that fits."""
        return False


class GpuPoolSpec(Protocol):
    """What every cloud's GPU pool tells the cloud-neutral code."""

    @property
    def name(self) -> str: ...

    @property
    def gpus_per_node(self) -> int: ...

    @property
    def pool_class(self) -> PoolClass: ...

    @property
    def queued(self) -> bool:
        """Nodes come only through a ProvisioningRequest (GKE queued provisioning)."""
        ...


BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
BUCKET_NAME_RULE = (
    "3-63 of [a-z0-9._-], starting and ending with a letter or digit (each cloud's "
    "CheckpointBucket also applies its own rule)"
)


@dataclass(frozen=True)
class BucketSpec(Checked):
    """The regional bucket (or Azure container) training jobs checkpoint into."""

    name: str = setting("name")
    """Globally unique; each cloud derives a default from the stack, and has its own
    naming rule (``CloudConfig.bucket_rule``)."""
    location: str = setting("location")
    """Must equal the cluster's region: cross-region checkpoint traffic is slow and billed
    (default the region)."""
    prefix: str = setting("prefix", _key_prefix("checkpoints"), "checkpoints")
    """Key prefix under which jobs write; the workload identity is scoped to it."""
    noncurrent_days: int = setting("noncurrentDays", integer(1, 3650), 7)
    """Days a deleted or overwritten object stays recoverable (as a noncurrent version)
    before the lifecycle purges it. Counted by days alone: checkpoint keys are written once,
    so a "keep N newer versions" condition would never be met (S3 requires both
    conditions of one rule; GCS counts the live version among the newer ones)."""
    kms_key: str | None = setting("kmsKeyArn", None, None)
    """S3 only: KMS key ARN for server-side encryption; default SSE-S3 (AES-256)."""

    def recorded(self) -> dict[str, Any]:
        """What a ``CheckpointBucket`` component records as its own inputs, so that the
        plan replays each bucket's lifecycle with that bucket's prefix and days, whatever
        program declared it (``plan.lifecycle``)."""
        return {"prefix": self.prefix, "noncurrentDays": self.noncurrent_days}

    @classmethod
    def judge(cls, key: str, raw: Any) -> BucketSpec:
        """What holds on every cloud; the stack's reader and each cloud's
        ``CheckpointBucket`` add that cloud's naming rule and region."""
        obj = ConfigObject(key, raw, fields_of=cls)
        values = read_settings(
            cls,
            obj,
            name=obj.field("name", text(BUCKET_NAME, BUCKET_NAME_RULE)),
            location=obj.field(
                "location", text(re.compile(r"[a-z][a-z0-9-]*[a-z0-9]"), "a region")
            ),
            kms_key=obj.field("kmsKeyArn", text(), None),
        )
        obj.finish()
        return cls(**values)


@dataclass(frozen=True)
class SmokeTest:
    """The training Job that proves preemption recovery on the real cluster."""

    image: str = setting("image", image_reference, "ghcr.io/spotproof/smoke-trainer:0.1.0")
    """The trainer's image: a tag other than ``latest``, or a digest (advised in
    production, ``spec.images``)."""
    namespace: str = setting("namespace", dns_label(63), "spotproof")
    target: PoolClass = setting("target", None, PoolClass.SPOT_GPU)
    """Pool class the Job runs on: spot-gpu, flex-start or on-demand-gpu; the stack must
    have a pool of it."""
    gpus: int = setting("gpus", None, 1)
    """GPUs the Job requests: 1 up to the largest node of its target class."""
    cpu: str = setting("cpu", text(_QUANTITY, "a Kubernetes quantity like 2 or 500m"), "2")
    memory: str = setting("memory", text(_QUANTITY, "a Kubernetes quantity like 8Gi"), "8Gi")
    checkpoint_interval: int = setting("checkpointInterval", integer(1), 50)
    """Steps between periodic checkpoints."""
    total_steps: int = setting("totalSteps", None, 2000)
    """Steps to train; at least one checkpoint interval."""
    seed: int = setting("seed", integer(0, 2**32 - 1), 0)
    model_mb: int = setting("modelMb", integer(1, 65536), 64)
    """Size of the model's state; large values exercise checkpoint throughput."""
    grace_period_seconds: int | None = setting("gracePeriodSeconds", None, None)
    """terminationGracePeriodSeconds: 1 up to, and by default, what the cloud leaves after
    its notice reaches the pod (``catalog.GRACE_PERIOD_SECONDS``); a longer one is cut
    short when the node goes away."""
    backoff_limit: int = setting("backoffLimit", integer(0, 100), 3)
    """Real failures allowed; preemptions do not count (see the Job's podFailurePolicy)."""


@dataclass(frozen=True)
class JobSetSpec:
    """The JobSet controller, which runs a multi-node ``TrainingJob`` as one gang
    (``spotproof.kube.jobset``); installed on the system pool like the other add-ons."""

    enabled: bool = setting("enabled", boolean, True)
    """Off for a cluster that has JobSet already, or runs no multi-node training."""
    version: str = setting(
        "version", published(jobset.VERSIONS, "JobSet", jobset.REFUSED), jobset.VERSIONS[-1]
    )
    """Helm chart version, pinned; one of ``catalog.jobset.VERSIONS``."""


@dataclass(frozen=True)
class KueueSpec:
    """Kueue, which admits work aimed at a queued flex-start pool through a
    ProvisioningRequest (``spotproof.kube.provisioning_queue``); installed on the system
    pool, and only
    on a stack with such a pool."""

    enabled: bool = setting("enabled", boolean, True)
    """Default: on where the stack has a queued pool. Off leaves that pool without a way to
    get nodes from spotproof's components (the plan says so for each workload aimed at it)."""
    version: str = setting(
        "version", published(kueue.VERSIONS, "Kueue", kueue.REFUSED), kueue.VERSIONS[-1]
    )
    """Helm chart version, pinned; one of ``catalog.kueue.VERSIONS``."""


def _command(key: str, raw: Any) -> tuple[str, ...]:
    words = tuple(value for _, value in items(key, raw))
    if not words or not all(isinstance(word, str) and word for word in words):
        raise SpecError(key, raw, "not a command", 'a list of words, e.g. ["python", "-m", "w"]')
    return words


@dataclass(frozen=True)
class BatchSpec:
    """Queue-fed batch workers on reclaimable capacity and the queue that feeds them
    (``spotproof.kube.batch`` and each cloud's ``WorkQueue``): a work queue with its
    dead-letter queue, a worker identity allowed to consume it and to write results under
    ``resultsPrefix`` only, and a Deployment of workers that KEDA scales on the queue's
    depth. Declared by ``spotproof:batch``; a stack without it has none of these."""

    image: str = setting("image", image_reference, "ghcr.io/spotproof/smoke-trainer:0.1.0")
    """The worker's image. The default carries spotproof's batch worker and its reference
    work, whose results are checkable against a plain loop (``spotproof.smoke.batch_work``)."""
    command: tuple[str, ...] = setting(
        "command", _command, ("python", "-m", "spotproof.runtime.batch")
    )
    """What the container runs; it reads ``QUEUE_URL``, ``RESULTS_URL``, ``GRACE_SECONDS``,
    ``LEASE_SECONDS``, ``BATCH_SIZE`` and ``MAX_DELIVERIES`` (``spotproof.runtime.batch``)."""
    namespace: str = setting("namespace", dns_label(63), "spotproof")
    target: PoolClass = setting("target", None, PoolClass.SPOT_GPU)
    """Pool class the workers run on: spot-gpu (the point), on-demand-gpu, or a flex-start
    pool without queued provisioning; the stack must have a pool of it."""
    gpus: int = setting("gpus", None, 1)
    """GPUs per worker: 0 up to the largest node of the target class."""
    cpu: str = setting("cpu", text(_QUANTITY, "a Kubernetes quantity like 2 or 500m"), "2")
    memory: str = setting("memory", text(_QUANTITY, "a Kubernetes quantity like 8Gi"), "8Gi")
    min_workers: int = setting("minWorkers", integer(0, 1000), 0)
    """Workers kept with an empty queue; 0 lets KEDA scale to none (and needs KEDA)."""
    max_workers: int = setting(
        "maxWorkers",
        integer(1, 1000),
        None,
        derived_default=lambda read: max(10, read["min_workers"]),
    )
    """Upper bound of KEDA's scaling; at least ``minWorkers``."""
    items_per_worker: int = setting("itemsPerWorker", integer(1, 10_000), 5)
    """Waiting items per worker KEDA aims for (the trigger's target value)."""
    batch_size: int = setting("batchSize", integer(1, 32), 4)
    """Items a worker leases at a time (32: the most one Azure Get Messages returns)."""
    lease_seconds: int = setting("leaseSeconds", integer(10, 600), 60)
    """How long a leased item stays hidden before a heartbeat extends it: the Pub/Sub ack
    deadline (10-600 s, the range all three queues accept) and the SQS visibility
    timeout. A dead worker's items come back within one lease."""
    max_deliveries: int = setting("maxDeliveries", integer(5, 100), 5)
    """Deliveries of an item before it is dead-lettered: Pub/Sub accepts 5-100 (its
    ``DeadLetterPolicy``), SQS 1-1000, Azure's poison handling any."""
    retention_days: int = setting("retentionDays", integer(1, 13), 7)
    """Days an item waits on the queue. At most 13: an SQS dead-letter queue keeps a
    message only until the source queue's retention ends, counted from the first enqueue,
    so the dead-letter queue keeps 14 days, the most SQS allows (SQS developer guide,
    "Setting-up dead-letter queue retention")."""
    results_prefix: str = setting("resultsPrefix", _key_prefix("results"), "results")
    """Where results go in the stack's bucket; the worker identity may write only there,
    so it must not overlap the checkpoint prefix."""
    grace_period_seconds: int | None = setting("gracePeriodSeconds", None, None)
    """terminationGracePeriodSeconds: 1 up to, and by default, what the cloud's preemption
    path leaves (``catalog.GRACE_PERIOD_SECONDS``). A worker hands back what it has not
    started at once and finishes the item in flight only if it fits."""


@dataclass(frozen=True)
class KedaSpec:
    """KEDA, which scales the batch workers on their queue's depth; installed on the system
    pool, and only on a stack with ``spotproof:batch``."""

    enabled: bool = setting("enabled", boolean, True)
    """Default: on where the stack has batch workers. Off runs ``minWorkers`` workers, no
    more and no fewer (so ``minWorkers`` must then be 1 or more)."""
    version: str = setting("version", published(keda.VERSIONS, "KEDA"), keda.VERSIONS[-1])
    """Helm chart version, pinned; one of ``catalog.keda.VERSIONS``."""


@dataclass(frozen=True)
class ApiAccess:
    """Who may reach the cluster's Kubernetes API. Never the whole internet: a stack
    names the networks that may use the public endpoint, or has no public endpoint.

    The Pulumi program creates Kubernetes objects through this endpoint, so the machine
    that runs ``pulumi up`` (a laptop's VPN range, a CI runner's egress addresses) must
    reach it: from within ``authorizedNetworks``; with ``privateEndpoint`` on GKE from
    anywhere, through the control plane's DNS endpoint, which Google authorizes by IAM; on
    EKS and AKS only from inside the cluster's network (``runnerInNetwork``), which must then
    exist before the run. ``spotproof plan`` refuses a stack whose runner could not reach it.
    """

    authorized_networks: tuple[str, ...] = setting("authorizedNetworks", None, ())
    """IPv4 CIDRs allowed to reach the public endpoint (``203.0.113.0/24``); public
    addresses or private ones, never ``0.0.0.0/0``. Required unless ``privateEndpoint``."""
    private_endpoint: bool = setting("privateEndpoint", boolean, False)
    """No public endpoint at all (GKE ``enablePrivateEndpoint``, EKS public access off, an
    AKS private cluster): the API answers only inside the cluster's network, and on GKE
    through its DNS endpoint to identities IAM allows. Excludes ``authorizedNetworks``."""
    runner_in_network: bool = setting("runnerInNetwork", boolean, False)
    """``pulumi up`` runs inside the cluster's network (a CI runner in the VPC, a VPN into
    it), which must therefore exist before the run: GKE ``network.existing``, EKS
    ``network.subnets``. Only with ``privateEndpoint``; on GKE the Kubernetes provider then
    uses the private IP endpoint instead of the DNS one."""


class CloudFleet(Protocol):
    """One cloud's section of the fleet: its own settings and GPU pools."""

    cloud: ClassVar[Cloud]
    system_pool_type: ClassVar[type[SystemPool]]

    @property
    def pools(self) -> tuple[GpuPoolSpec, ...]:
        """Every GPU pool of the stack, in stack order."""
        ...


@dataclass(frozen=True)
class FleetSpec:
    """Everything one stack builds: one cluster, its pools, its bucket, its smoke test."""

    stack: str
    """The Pulumi stack; also the cluster's name."""
    platform: CloudFleet
    """The cloud's section: ``GkeFleet``, ``EksFleet`` or ``AksFleet``."""
    environment: str
    region: str
    bucket: BucketSpec
    system_pool: SystemPool
    kubernetes_version: str = "1.33"
    """Minor version; plan validates manifests against this version's OpenAPI schema."""
    protect: bool = True
    """Stateful resources (cluster, bucket) refuse deletion: Pulumi's ``protect``, the
    cloud's deletion protection, no ``forceDestroy`` on the bucket. Off only where the
    stack declares itself disposable (``spotproof:disposable: true``): never inferred
    from the stack's name, so a copy of a production stack under another name is as
    protected as the original."""
    smoke_test: SmokeTest | None = field(default_factory=SmokeTest)
    jobset: JobSetSpec | None = field(default_factory=JobSetSpec)
    """None when ``spotproof:jobset.enabled`` is false."""
    kueue: KueueSpec | None = None
    """None without a queued pool, or when ``spotproof:kueue.enabled`` is false."""
    batch: BatchSpec | None = None
    """Batch workers and their queue; None unless ``spotproof:batch`` is set."""
    keda: KedaSpec | None = None
    """None without batch workers, or when ``spotproof:keda.enabled`` is false."""
    api_access: ApiAccess = field(default_factory=lambda: ApiAccess(private_endpoint=True))
    """Who may reach the Kubernetes API (``spotproof:apiAccess``, which a stack must
    set); private when a program builds the spec itself without saying."""

    @property
    def cloud(self) -> Cloud:
        return self.platform.cloud

    @property
    def queued_pools(self) -> list[GpuPoolSpec]:
        """Pools that get nodes only through a ProvisioningRequest."""
        return [pool for pool in self.platform.pools if pool.queued]

    def pools_of(self, pool_class: PoolClass) -> list[GpuPoolSpec]:
        """The GPU pools of one class, in stack order."""
        return [pool for pool in self.platform.pools if pool.pool_class is pool_class]
