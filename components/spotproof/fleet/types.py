"""The fleet: what a stack asks for, independent of any cloud SDK.

A :class:`FleetSpec` is what every cloud shares (region, system pool, checkpoint bucket,
smoke test, add-ons) plus one cloud section (``fleet.gke.GkeFleet``, ``fleet.eks.EksFleet``,
``fleet.aks.AksFleet``) with that cloud's pools. Every field is documented once, on the
field, together with its config key, reader (which states the allowed range) and default
(:func:`spotproof.fleet.fields.setting`); the stack config uses the camelCase keys
(``spotproof:gpuPools[0].maxNodes``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from spotproof.catalog import Cloud
from spotproof.fleet.addons import JobSetSpec, KedaSpec, KueueSpec
from spotproof.fleet.api_access import ApiAccess
from spotproof.fleet.drill import DrillSpec
from spotproof.fleet.fields import Checked, ConfigObject, read_settings, setting
from spotproof.fleet.monitoring import Monitoring
from spotproof.fleet.pools import GpuPoolSpec, PoolClass, SystemPool
from spotproof.fleet.readers import integer, key_prefix, text
from spotproof.fleet.reclaims import ReclaimModel
from spotproof.fleet.workloads import BatchSpec, SmokeTest

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
    prefix: str = setting("prefix", key_prefix("checkpoints"), "checkpoints")
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
        program declared it (``plan.simulation.lifecycle``)."""
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
    drill: DrillSpec | None = None
    """Who may reclaim this stack's spot nodes with ``spotproof drill``, and the grants
    that lets them (``spotproof:drill``); None, the default, grants nothing."""
    reclaim_model: ReclaimModel = field(default_factory=ReclaimModel)
    """What the plan's checkpoint-interval advice assumes of reclaims and prices
    (``spotproof:reclaimModel``)."""
    monitoring: Monitoring = field(default_factory=Monitoring)
    """Alert rules, thresholds and where alerts go (``spotproof:monitoring``); on unless
    the stack is disposable."""

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
