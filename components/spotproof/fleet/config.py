"""Read a stack's config into a validated :class:`FleetSpec`.

Input is the stack's config as a flat mapping of full keys (``spotproof:gpuPools``,
``gcp:region``) to values, either YAML-native or as Pulumi hands them to a program
(scalars as strings, objects as JSON strings). Every check raises :class:`SpecError`
naming the key, the value and what is allowed, before any resource is declared.

What every cloud shares (system pool, bucket, smoke test, versions) is read here; each
cloud's own keys are read by its :class:`~spotproof.fleet.shared.CloudConfig`
(``spec.gke``, ``spec.eks``, ``spec.aks``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spotproof.catalog import GRACE_PERIOD_SECONDS, Cloud, jobset, keda, kueue
from spotproof.fleet import aks, eks, gke
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import (
    ConfigObject,
    boolean,
    choice,
    config_key,
    integer,
    items,
    judged,
    read_object,
    read_settings,
    setting_keys,
    text,
)
from spotproof.fleet.shared import DNS_LABEL, CloudConfig, dns_label
from spotproof.fleet.types import (
    ApiAccess,
    BatchSpec,
    BucketSpec,
    FleetSpec,
    JobSetSpec,
    KedaSpec,
    KueueSpec,
    PoolClass,
    SmokeTest,
    system_pool,
)
from spotproof.smoke import MAX_STEPS

NAMESPACE = "spotproof"
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
    *setting_keys(gke.GkeFleet),
    *setting_keys(eks.EksFleet),
    *setting_keys(aks.AksFleet),
}
"""Every key of the ``spotproof`` namespace, on any cloud: one close to these but not
among them is a misspelling, reported before any value is judged."""
CLOUDS: dict[Cloud, CloudConfig] = {
    Cloud.GKE: gke.CONFIG,
    Cloud.EKS: eks.CONFIG,
    Cloud.AKS: aks.CONFIG,
}
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


def _smoke_test(
    cloud: Cloud, pool_classes: dict[PoolClass, int]
) -> Callable[[str, Any], SmokeTest | None]:
    """``pool_classes`` maps each class that has pools to its largest GPUs-per-node."""

    def parse(key: str, raw: Any) -> SmokeTest | None:
        obj = ConfigObject(key, raw, fields_of=SmokeTest)
        if not obj.field("enabled", boolean, True):
            return None
        targets = tuple(c.value for c in PoolClass if c is not PoolClass.SYSTEM)
        target_key = config_key(SmokeTest, "target")
        target = PoolClass(obj.field(target_key, choice(targets), SmokeTest.target.value))
        if target not in pool_classes:
            raise SpecError(
                f"{key}.{target_key}",
                target.value,
                "no pool of that class in this stack",
                ", ".join(c.value for c in pool_classes) or "add a GPU pool first",
            )
        interval_key = config_key(SmokeTest, "checkpoint_interval")
        interval = obj.field(interval_key, integer(1, MAX_STEPS), SmokeTest.checkpoint_interval)
        # No longer than the preemption path delivers: a longer grace is cut short.
        grace = GRACE_PERIOD_SECONDS[cloud]
        smoke = SmokeTest(
            **read_settings(
                SmokeTest,
                obj,
                target=target,
                checkpoint_interval=interval,
                gpus=obj.field(
                    config_key(SmokeTest, "gpus"), integer(1, pool_classes[target]), SmokeTest.gpus
                ),
                total_steps=obj.field(
                    config_key(SmokeTest, "total_steps"),
                    integer(interval, MAX_STEPS),
                    SmokeTest.total_steps,
                ),
                grace_period_seconds=obj.field(
                    config_key(SmokeTest, "grace_period_seconds"), integer(1, grace), grace
                ),
            )
        )
        check_workload_namespace(f"{key}.namespace", smoke.namespace)
        obj.finish()
        return smoke

    return parse


def _jobset(key: str, raw: Any) -> JobSetSpec | None:
    spec = read_object(JobSetSpec, key, raw)
    return spec if spec.enabled else None


def _kueue(queued: list[str]) -> Callable[[str, Any], KueueSpec | None]:
    """Kueue is for queued pools: on by default where there is one, refused where none."""

    def parse(key: str, raw: Any) -> KueueSpec | None:
        spec = read_object(KueueSpec, key, raw)
        explicit = isinstance(raw, Mapping) and "enabled" in raw
        if spec.enabled and explicit and not queued:
            raise SpecError(
                f"{key}.enabled",
                True,
                "Kueue is installed for a queued flex-start pool and this stack has none",
                "false, or a pool with queuedProvisioning: true",
            )
        return spec if spec.enabled and queued else None

    return parse


def _batch(
    cloud: Cloud, pool_classes: dict[PoolClass, int], queued: set[PoolClass], checkpoints: str
) -> Callable[[str, Any], BatchSpec]:
    """``pool_classes`` as for the smoke test; ``queued``: classes whose pools all get
    nodes only through a ProvisioningRequest (a Deployment's pods are never admitted that
    way); ``checkpoints``: the checkpoint prefix the results must stay out of."""

    def parse(key: str, raw: Any) -> BatchSpec:
        obj = ConfigObject(key, raw, fields_of=BatchSpec)
        targets = tuple(c.value for c in PoolClass if c is not PoolClass.SYSTEM)
        target_key = config_key(BatchSpec, "target")
        target = PoolClass(obj.field(target_key, choice(targets), BatchSpec.target.value))
        if target not in pool_classes or target in queued:
            usable = [c.value for c in pool_classes if c not in queued]
            raise SpecError(
                f"{key}.{target_key}",
                target.value,
                "no pool of that class in this stack"
                if target not in pool_classes
                else "its pools get nodes only through queued provisioning, which admits "
                "Jobs, not a Deployment's workers",
                ", ".join(usable) or "add a GPU pool first",
            )
        grace = GRACE_PERIOD_SECONDS[cloud]
        values = read_settings(
            BatchSpec,
            obj,
            target=target,
            gpus=obj.field(
                config_key(BatchSpec, "gpus"), integer(0, pool_classes[target]), BatchSpec.gpus
            ),
            grace_period_seconds=obj.field(
                config_key(BatchSpec, "grace_period_seconds"), integer(1, grace), grace
            ),
        )
        batch = BatchSpec(**values)
        if batch.max_workers < batch.min_workers:
            raise SpecError(
                f"{key}.maxWorkers",
                batch.max_workers,
                f"below minWorkers ({batch.min_workers})",
                f"{batch.min_workers} or more",
            )
        check_workload_namespace(f"{key}.namespace", batch.namespace)
        results = batch.results_prefix
        if _overlaps(results, checkpoints):
            raise SpecError(
                f"{key}.resultsPrefix",
                results,
                f"overlaps the checkpoint prefix {checkpoints!r}: the worker identity may "
                "write only under its own prefix",
                "a prefix beside it, e.g. results",
            )
        obj.finish()
        return batch

    return parse


SYSTEM_NAMESPACES = frozenset(
    {"default", keda.NAMESPACE, jobset.NAMESPACE, kueue.NAMESPACE, "gke-managed-system"}
)
"""Namespaces no workload of the stack may use: the add-ons' (each chart's own) and
default (which the stack's Pod Security labels and NetworkPolicies would then govern for
everything else in it)."""


def check_workload_namespace(key: str, namespace: str) -> None:
    """The smoke Job and the batch workers get a namespace of their own."""
    if namespace in SYSTEM_NAMESPACES or namespace.startswith("kube-"):
        raise SpecError(
            key,
            namespace,
            "belongs to the platform or an add-on, whose namespace its own release owns",
            "a namespace for workloads, e.g. spotproof",
        )


def _overlaps(one: str, other: str) -> bool:
    return one == other or one.startswith(f"{other}/") or other.startswith(f"{one}/")


OPEN_TO_ALL = (ipaddress.IPv4Network("0.0.0.0/0"),)
API_ACCESS_ALLOWED = (
    "authorizedNetworks: the IPv4 CIDRs that may reach the API (the machine running "
    "pulumi up among them), or privateEndpoint: true"
)


def _api_access(key: str, raw: Any) -> ApiAccess:
    """Never open to everyone: some networks, or none outside the cluster's own."""
    obj = ConfigObject(key, raw)
    networks_key = f"{key}.{config_key(ApiAccess, 'authorized_networks')}"
    networks = tuple(
        _authorized_network(k, v)
        for k, v in items(
            networks_key, obj.raw.get(config_key(ApiAccess, "authorized_networks"), [])
        )
    )
    obj.known.add(config_key(ApiAccess, "authorized_networks"))
    access = ApiAccess(
        authorized_networks=networks,
        private_endpoint=obj.field(config_key(ApiAccess, "private_endpoint"), boolean, False),
        runner_in_network=obj.field(config_key(ApiAccess, "runner_in_network"), boolean, False),
    )
    obj.finish()
    if access.runner_in_network and not access.private_endpoint:
        raise SpecError(
            f"{key}.{config_key(ApiAccess, 'runner_in_network')}",
            True,
            "only says where pulumi up reaches a private endpoint from",
            "runnerInNetwork with privateEndpoint: true; with authorizedNetworks, list the "
            "runner's addresses there",
        )
    if access.private_endpoint and networks:
        raise SpecError(
            networks_key,
            list(networks),
            "has no effect without a public endpoint (privateEndpoint is true)",
            "no authorizedNetworks with privateEndpoint: true",
        )
    if not access.private_endpoint and not networks:
        raise SpecError(key, raw, "names no network that may reach the API", API_ACCESS_ALLOWED)
    return access


def _authorized_network(key: str, raw: Any) -> str:
    allowed = "an IPv4 CIDR like 203.0.113.0/24, narrower than 0.0.0.0/0"
    try:
        network = ipaddress.IPv4Network(str(raw), strict=True)
    except ValueError:
        raise SpecError(
            key, raw, "not an IPv4 network (host bits set, or malformed)", allowed
        ) from None
    if network.prefixlen == 0:
        raise SpecError(key, raw, "opens the API to the whole internet", allowed)
    return str(network)


def _keda(batch: BatchSpec | None) -> Callable[[str, Any], KedaSpec | None]:
    """KEDA is for batch workers: on by default where there are some, refused where none;
    off only with workers that need no scaler (``minWorkers`` 1 or more)."""

    def parse(key: str, raw: Any) -> KedaSpec | None:
        spec = read_object(KedaSpec, key, raw)
        explicit = isinstance(raw, Mapping) and "enabled" in raw
        if spec.enabled and explicit and batch is None:
            raise SpecError(
                f"{key}.enabled",
                True,
                "KEDA is installed to scale batch workers and this stack declares none",
                "false, or a spotproof:batch section",
            )
        if not spec.enabled and batch is not None and batch.min_workers == 0:
            raise SpecError(
                f"{key}.enabled",
                False,
                "without KEDA nothing would start a worker (spotproof:batch.minWorkers is 0)",
                "true, or spotproof:batch.minWorkers of 1 or more",
            )
        return spec if spec.enabled and batch is not None else None

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

    bucket = top.section(
        "checkpointBucket",
        _bucket(reader, reader.default_bucket_name(section, stack, region), region),
    )
    queued = {c for c in pool_classes if all(p.queued for p in section.pools if p.pool_class is c)}
    # Declared by its presence: ``spotproof:batch: {}`` is batch work with every default.
    batch = (
        top.section("batch", _batch(cloud, pool_classes, queued, bucket.prefix))
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
    spec = FleetSpec(
        stack=stack,
        platform=section,
        environment=environment,
        region=region,
        kubernetes_version=top.field(
            "kubernetesVersion", kubernetes_version, FleetSpec.kubernetes_version
        ),
        protect=_protected(top),
        system_pool=top.section("systemPool", system_pool(section.system_pool_type)),
        bucket=bucket,
        smoke_test=top.section("smokeTest", _smoke_test(cloud, pool_classes)),
        jobset=top.section("jobset", _jobset),
        kueue=top.section("kueue", _kueue([p.name for p in section.pools if p.queued])),
        batch=batch,
        keda=top.section("keda", _keda(batch)),
        api_access=top.field("apiAccess", _api_access),
    )
    top.finish()
    return reader.finish(spec)
