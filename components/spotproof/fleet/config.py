"""Read a stack's config into a validated :class:`FleetSpec`.

Input is the stack's config as a flat mapping of full keys (``spotproof:gpuPools``,
``gcp:region``) to values, either YAML-native or as Pulumi hands them to a program
(scalars as strings, objects as JSON strings). Every check raises :class:`SpecError`
naming the key, the value and what is allowed, before any resource is declared.

What every cloud shares (system pool, bucket, smoke test, versions) is read here; each
cloud's own keys are read by its :class:`~spotproof.fleet.shared.CloudConfig`
(``fleet.gke``, ``fleet.eks``, ``fleet.aks``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spotproof import clouds
from spotproof.catalog import GRACE_PERIOD_SECONDS, PROFILES, Cloud
from spotproof.fleet.addons import read_jobset, read_keda, read_kueue
from spotproof.fleet.api_access import API_ACCESS_ALLOWED, read_api_access
from spotproof.fleet.drill import read_drill
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject, judged, read_settings, setting_keys
from spotproof.fleet.monitoring import read_monitoring
from spotproof.fleet.pools import PoolClass, shortest_reclaim_grace, system_pool
from spotproof.fleet.readers import boolean, choice, text
from spotproof.fleet.reclaims import ReclaimModel
from spotproof.fleet.shared import DNS_LABEL, CloudConfig, dns_label
from spotproof.fleet.types import BucketSpec, FleetSpec
from spotproof.fleet.workloads import read_batch, read_smoke_test

NAMESPACE = "spotproof"
CLOUDS: dict[Cloud, CloudConfig] = {
    cloud: clouds.module("spotproof.fleet", cloud).CONFIG for cloud in PROFILES
}
TOP_LEVEL_KEYS = {
    "cloud",
    "environment",
    "kubernetesVersion",
    "protect",
    "disposable",
    "apiAccess",
    "systemPool",
    "checkpointBucket",
    "smokeTest",
    "jobset",
    "kueue",
    "batch",
    "keda",
    "existingCluster",
    "drill",
    "reclaimModel",
    "monitoring",
    *(key for config in CLOUDS.values() for key in setting_keys(config.section)),
}
"""Every key of the ``spotproof`` namespace, on any cloud: one close to these but not
among them is a misspelling, reported before any value is judged."""
KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(31, 38))
"""Minor versions with GA podFailurePolicy (1.31+) that kubernetes-validate has schemas for."""


def _bucket(cloud: CloudConfig, default_name: str, region: str) -> Callable[[str, Any], BucketSpec]:
    def parse(key: str, raw: Any) -> BucketSpec:
        obj = ConfigObject(key, raw, fields_of=BucketSpec)
        name = obj.field("name", text(), default_name)
        if not cloud.bucket_name_ok(name):
            raise SpecError(f"{key}.name", name, "not a valid bucket name", cloud.bucket_rule)
        location = obj.field("location", text(), region)
        if location.lower() != region:
            raise SpecError(
                f"{key}.location", location, f"differs from the cluster region {region}", region
            )
        values = read_settings(BucketSpec, obj, name=name, location=region)
        bucket = BucketSpec(**values, **cloud.read_bucket_extras(obj, region))
        obj.finish()
        return bucket

    return parse


def kubernetes_version(key: str, raw: Any) -> str:
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
_CLOUD_KEYS = tuple(key for cloud in CLOUDS.values() for key in cloud.own_keys)
"""Keys outside the ``spotproof`` namespace the spec reads."""


def fleet_from_config(
    stack: str, config: Mapping[str, Any], secret_keys: Iterable[str] = ()
) -> FleetSpec:
    """Build the fleet of ``stack`` from its config; raises :class:`SpecError`.

    ``secret_keys`` are keys whose values are secret (``secure:`` in the stack file). The
    fleet is infrastructure shape, never a secret; a secret key the spec reads is refused
    without showing its value, since its value may be only a stand-in offline.
    """
    with judged():  # the readers judge every value once; construction need not again
        return _fleet(stack, config, secret_keys)


def _protected(top: ConfigObject) -> bool:
    """Protected unless the stack says it is disposable. ``protect`` is the same setting
    stated the other way round (``protect: false`` is ``disposable: true``), kept for
    stacks that write it; the two may not disagree."""
    disposable = top.field("disposable", boolean, None)
    protect = top.field("protect", boolean, None)
    if disposable is not None and protect is not None and protect == disposable:
        raise SpecError(
            top.key_of("protect"),
            protect,
            f"contradicts {top.key_of('disposable')} = {str(disposable).lower()}",
            "one of the two, or both agreeing (protect is the opposite of disposable)",
        )
    if disposable is not None:
        return not disposable
    return True if protect is None else protect


def judge_bucket(cloud: Cloud, bucket: BucketSpec, region: object, key: str) -> None:
    """What a cloud's ``CheckpointBucket`` adds to a bucket built in a program: that
    cloud's naming rule, and the region when the component knows it (a string, not an
    output still to come)."""
    rules = CLOUDS[cloud]
    if not rules.bucket_name_ok(bucket.name):
        raise SpecError(f"{key}.name", bucket.name, "not a valid bucket name", rules.bucket_rule)
    if isinstance(region, str) and bucket.location.lower() != region.lower():
        raise SpecError(
            f"{key}.location", bucket.location, f"differs from the cluster region {region}", region
        )


def _fleet(stack: str, config: Mapping[str, Any], secret_keys: Iterable[str]) -> FleetSpec:
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
    top.refuse_misspelt(TOP_LEVEL_KEYS)
    if "existingCluster" in top.raw:
        beside = ", ".join(f"{NAMESPACE}:{k}" for k in sorted(top.raw) if k != "existingCluster")
        raise SpecError(
            top.key_of("existingCluster"),
            top.raw["existingCluster"],
            f"describes a cluster spotproof did not create, so it cannot stand beside a "
            f"fleet's settings ({beside})",
            "spotproof:existingCluster alone (components on your cluster), or a fleet's "
            "settings without it",
        )
    cloud = Cloud(top.field("cloud", choice(tuple(c.value for c in CLOUDS))))
    reader = CLOUDS[cloud]
    section, region = reader.read_section(top, config)
    environment = top.field("environment", dns_label(63), stack.split("-", 1)[-1])
    pool_classes: dict[PoolClass, int] = {}
    for pool in section.pools:
        pool_classes[pool.pool_class] = max(
            pool_classes.get(pool.pool_class, 0), pool.gpus_per_node
        )
    graces = {
        pool_class: shortest_reclaim_grace(
            [p for p in section.pools if p.pool_class is pool_class], GRACE_PERIOD_SECONDS[cloud]
        )
        for pool_class in pool_classes
    }

    bucket = top.section(
        "checkpointBucket",
        _bucket(reader, reader.default_bucket_name(section, stack, region), region),
    )
    queued = {c for c in pool_classes if all(p.queued for p in section.pools if p.pool_class is c)}
    # Declared by its presence: ``spotproof:batch: {}`` is batch work with every default.
    batch = (
        top.section("batch", read_batch(pool_classes, graces, queued, bucket.prefix))
        if "batch" in top.raw
        else None
    )
    if top.raw.get("apiAccess") is None:
        raise SpecError(
            top.key_of("apiAccess"),
            None,
            "is required: the cluster's API is never open to the whole internet",
            API_ACCESS_ALLOWED,
        )
    protect = _protected(top)
    spec = FleetSpec(
        stack=stack,
        platform=section,
        environment=environment,
        region=region,
        kubernetes_version=top.field(
            "kubernetesVersion", kubernetes_version, FleetSpec.kubernetes_version
        ),
        protect=protect,
        system_pool=top.section("systemPool", system_pool(section.system_pool_type)),
        bucket=bucket,
        smoke_test=top.section("smokeTest", read_smoke_test(pool_classes, graces)),
        jobset=top.section("jobset", read_jobset),
        kueue=top.section("kueue", read_kueue([p.name for p in section.pools if p.queued])),
        batch=batch,
        keda=top.section("keda", read_keda(batch)),
        api_access=top.field("apiAccess", read_api_access),
        drill=top.section("drill", read_drill(reader.drill_principals)),
        reclaim_model=top.section("reclaimModel", ReclaimModel.judge),
        monitoring=top.section("monitoring", read_monitoring(cloud, disposable=not protect)),
    )
    top.finish()
    return reader.finish(spec)
