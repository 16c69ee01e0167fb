"""Read a stack's config into a validated :class:`FleetSpec`.

Input is the stack's config as a flat mapping of full keys (``spotproof:gpuPools``,
``gcp:region``) to values, either YAML-native or as Pulumi hands them to a program
(scalars as strings, objects as JSON strings). Every check raises :class:`SpecError`
naming the key, the value and what is allowed, before any resource is declared.

What every cloud shares (system pool, bucket, smoke test, versions) is read here; each
cloud's own keys are read by ``spec.gke`` or ``spec.eks``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spotproof.catalog import GRACE_PERIOD_SECONDS, Cloud
from spotproof.spec import eks, gke
from spotproof.spec.errors import SpecError
from spotproof.spec.fields import ConfigObject, boolean, choice, integer, text
from spotproof.spec.shared import DNS_LABEL, dns_label, node_range
from spotproof.spec.types import (
    CheckpointBucket,
    FleetSpec,
    FlexStartPool,
    GpuPool,
    KarpenterPool,
    PoolClass,
    SmokeTest,
    SystemPool,
)

NAMESPACE = "spotproof"
SUPPORTED_CLOUDS = (Cloud.GKE, Cloud.EKS)
KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(31, 38))
"""Minor versions with GA podFailurePolicy (1.31+) that kubernetes-validate has schemas for."""

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_PREFIX = re.compile(r"^[a-z0-9][a-z0-9/_-]*[a-z0-9]$")


def _system_pool(cloud: Cloud) -> Callable[[str, Any], SystemPool]:
    type_key, type_reader, type_default = (
        gke.SYSTEM_MACHINE_TYPE if cloud is Cloud.GKE else eks.SYSTEM_INSTANCE_TYPE
    )
    # Two nodes on EKS so the Karpenter controller's replicas can sit in two zones.
    min_default = 2 if cloud is Cloud.EKS else SystemPool.min_nodes

    def parse(key: str, raw: Any) -> SystemPool:
        obj = ConfigObject(key, raw)
        machine_type = obj.field(type_key, type_reader, type_default)
        min_nodes, max_nodes = node_range(obj, min_default, 1)
        disk_gb = obj.field("diskGb", integer(20, 65536), SystemPool.disk_gb)
        obj.finish()
        return SystemPool(machine_type, min_nodes, max_nodes, disk_gb)

    return parse


def _bucket(cloud: Cloud, default_name: str, region: str) -> Callable[[str, Any], CheckpointBucket]:
    name_ok, rule = (
        (gke.bucket_name_ok, gke.BUCKET_RULE)
        if cloud is Cloud.GKE
        else (eks.bucket_name_ok, eks.BUCKET_RULE)
    )

    def parse(key: str, raw: Any) -> CheckpointBucket:
        obj = ConfigObject(key, raw)
        name = obj.field("name", text(), default_name)
        if not name_ok(name):
            raise SpecError(f"{key}.name", name, "not a valid bucket name", rule)
        location = obj.field("location", text(), region)
        if location.lower() != region:
            raise SpecError(
                f"{key}.location", location, f"differs from the cluster region {region}", region
            )
        kms_key = None
        if cloud is Cloud.EKS:
            kms_key = obj.field("kmsKeyArn", text(eks.KMS_KEY, "a KMS key ARN"), None)
            # SSE-KMS needs a key in the bucket's own region: S3 refuses any other.
            if kms_key and kms_key.split(":")[3] != region:
                raise SpecError(
                    f"{key}.kmsKeyArn",
                    kms_key,
                    f"key in region {kms_key.split(':')[3]}, bucket in {region}",
                    f"a KMS key in {region}",
                )
        bucket = CheckpointBucket(
            name=name,
            location=region,
            prefix=obj.field(
                "prefix", text(_PREFIX, "a key prefix like checkpoints"), "checkpoints"
            ),
            noncurrent_days=obj.field("noncurrentDays", integer(1, 3650), 7),
            kms_key=kms_key,
        )
        obj.finish()
        return bucket

    return parse


def _smoke_test(
    cloud: Cloud, pool_classes: dict[PoolClass, int]
) -> Callable[[str, Any], SmokeTest | None]:
    """``pool_classes`` maps each class that has pools to its largest GPUs-per-node."""

    def parse(key: str, raw: Any) -> SmokeTest | None:
        obj = ConfigObject(key, raw)
        if not obj.field("enabled", boolean, True):
            return None
        targets = tuple(c.value for c in PoolClass if c is not PoolClass.SYSTEM)
        target = PoolClass(obj.field("target", choice(targets), SmokeTest.target.value))
        if target not in pool_classes:
            raise SpecError(
                f"{key}.target",
                target.value,
                "no pool of that class in this stack",
                ", ".join(c.value for c in pool_classes) or "add a GPU pool first",
            )
        # No longer than the preemption path delivers: a longer grace is cut short.
        grace = GRACE_PERIOD_SECONDS[cloud]
        interval = obj.field("checkpointInterval", integer(1), SmokeTest.checkpoint_interval)
        smoke = SmokeTest(
            image=obj.field(
                "image", text(re.compile(r"^\S+$"), "an image reference"), SmokeTest.image
            ),
            namespace=obj.field("namespace", dns_label(63), SmokeTest.namespace),
            target=target,
            gpus=obj.field("gpus", integer(1, pool_classes[target]), SmokeTest.gpus),
            cpu=obj.field(
                "cpu", text(_QUANTITY, "a Kubernetes quantity like 2 or 500m"), SmokeTest.cpu
            ),
            memory=obj.field(
                "memory", text(_QUANTITY, "a Kubernetes quantity like 8Gi"), SmokeTest.memory
            ),
            checkpoint_interval=interval,
            total_steps=obj.field("totalSteps", integer(interval), SmokeTest.total_steps),
            seed=obj.field("seed", integer(0, 2**32 - 1), SmokeTest.seed),
            model_mb=obj.field("modelMb", integer(1, 65536), SmokeTest.model_mb),
            grace_period_seconds=obj.field("gracePeriodSeconds", integer(1, grace), grace),
            backoff_limit=obj.field("backoffLimit", integer(0, 100), SmokeTest.backoff_limit),
        )
        obj.finish()
        return smoke

    return parse


def _kubernetes_version(key: str, raw: Any) -> str:
    if not isinstance(raw, str) or raw not in KUBERNETES_VERSIONS:
        raise SpecError(
            key,
            raw,
            "unsupported Kubernetes minor version (quote it in YAML)",
            ", ".join(KUBERNETES_VERSIONS),
        )
    return raw


SECRET_SHOWN = "[secret]"
"""How a secret value appears in messages: never as itself."""
_CLOUD_KEYS = ("gcp:project", "gcp:region", "aws:region")
"""Keys outside the ``spotproof`` namespace the spec reads."""


def fleet_from_config(
    stack: str, config: Mapping[str, Any], secret_keys: Iterable[str] = ()
) -> FleetSpec:
    """Build the fleet of ``stack`` from its config; raises :class:`SpecError`.

    ``secret_keys`` are keys whose values are secret (``secure:`` in the stack file). The
    fleet is infrastructure shape, never a secret; a secret key the spec reads is refused
    without showing its value, since its value may be only a stand-in offline.
    """
    for key in sorted(secret_keys):
        if key.startswith(f"{NAMESPACE}:") or key in _CLOUD_KEYS:
            raise SpecError(
                key,
                SECRET_SHOWN,
                "is a secret; spotproof settings describe the fleet's shape and are read in "
                "plain text (`spotproof plan` never decrypts)",
                "a plain value (`pulumi config set` without --secret)",
            )
    if not DNS_LABEL.fullmatch(stack) or len(stack) > 40:
        raise SpecError(
            "stack",
            stack,
            "not usable as a cluster name",
            "a lowercase DNS label of at most 40 characters",
        )
    top = ConfigObject(
        NAMESPACE,
        {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith(f"{NAMESPACE}:")},
        separator=":",
    )
    cloud = Cloud(top.field("cloud", choice(tuple(c.value for c in SUPPORTED_CLOUDS))))
    if cloud is Cloud.GKE:
        project, region = gke.project_and_region(config)
        default_bucket = f"{project}-{stack}-checkpoints"
        cloud_fields = gke.pools(top, region)
    else:
        project, region = None, eks.region_of(config)
        default_bucket = f"spotproof-{stack}-{region}"
        cloud_fields = eks.pools(top, region)
    environment = top.field("environment", dns_label(63), stack.split("-", 1)[-1])
    pools = [
        *cloud_fields.get("gpu_pools", ()),
        *cloud_fields.get("karpenter_pools", ()),
        *([cloud_fields["flex_start"]] if cloud_fields.get("flex_start") else []),
    ]
    _check_unique_names(pools)
    pool_classes: dict[PoolClass, int] = {}
    for pool in pools:
        pool_class = (
            pool.pool_class if not isinstance(pool, FlexStartPool) else PoolClass.FLEX_START
        )
        pool_classes[pool_class] = max(pool_classes.get(pool_class, 0), pool.gpus_per_node)

    spec = FleetSpec(
        stack=stack,
        cloud=cloud,
        environment=environment,
        project=project,
        region=region,
        kubernetes_version=top.field(
            "kubernetesVersion", _kubernetes_version, FleetSpec.kubernetes_version
        ),
        protect=top.field("protect", boolean, environment == "prod"),
        system_pool=top.section("systemPool", _system_pool(cloud)),
        bucket=top.section("checkpointBucket", _bucket(cloud, default_bucket, region)),
        smoke_test=top.section("smokeTest", _smoke_test(cloud, pool_classes)),
        **cloud_fields,
    )
    top.finish()
    _check_karpenter_replicas(spec)
    if cloud is Cloud.GKE:
        spec = gke.fit_autoprovisioning(spec)
    return spec


def _check_unique_names(pools: list[GpuPool | KarpenterPool | FlexStartPool]) -> None:
    seen = {"system": "the system pool"}
    for index, pool in enumerate(pools):
        key = (
            f"{NAMESPACE}:flexStartPool.name"
            if isinstance(pool, FlexStartPool)
            else f"{NAMESPACE}:gpuPools[{index}].name"
        )
        if pool.name in seen:
            raise SpecError(
                key,
                pool.name,
                f"duplicate pool name (also {seen[pool.name]})",
                "a name no other pool uses",
            )
        seen[pool.name] = key


def _check_karpenter_replicas(spec: FleetSpec) -> None:
    """Karpenter's chart keeps replicas on different nodes: each needs a system node."""
    if spec.karpenter and spec.karpenter.replicas > spec.system_pool.min_nodes:
        raise SpecError(
            f"{NAMESPACE}:karpenter.replicas",
            spec.karpenter.replicas,
            f"more than the system pool's minNodes ({spec.system_pool.min_nodes}); the extra "
            "replicas would never schedule",
            f"1-{spec.system_pool.min_nodes}",
        )
