"""Spec types built directly in a program are judged on construction, by the same readers
and with the same messages as the same values in a stack file."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from spotproof.eks import CheckpointBucketArgs as EksBucketArgs
from spotproof.fleet import BucketSpec, SpecError, Taint, TaintEffect, fleet_from_config
from spotproof.fleet.aks import GpuAgentPool
from spotproof.fleet.eks import KarpenterPool, KarpenterSpec
from spotproof.fleet.gke_pools import GkeGpuPool
from spotproof.gke import CheckpointBucketArgs as GkeBucketArgs
from spotproof.gke import GpuNodePoolsArgs
from spotproof.kube.workload import ServiceAccountRef
from tests.support import stack_config

L4 = {
    "name": "l4-spot",
    "machine_type": "g2-standard-8",
    "gpu_type": "nvidia-l4",
    "gpus_per_node": 1,
    "max_nodes": 4,
    "zones": ("us-central1-a",),
}
CONFIG_KEYS = {
    "name": "name",
    "machine_type": "machineType",
    "gpu_type": "gpuType",
    "gpus_per_node": "gpusPerNode",
    "max_nodes": "maxNodes",
}


def _refusal(build: Any) -> SpecError:
    with pytest.raises(SpecError) as raised:
        build()
    return raised.value


def _stack_refusal(field: str, value: Any) -> SpecError:
    config = stack_config("gke-dev")
    config["spotproof:gpuPools"][0][CONFIG_KEYS[field]] = value
    return _refusal(lambda: fleet_from_config("gke-dev", config))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_nodes", "four"),
        ("max_nodes", -1),
        ("machine_type", "g2-standard-7"),
        ("gpu_type", "nvidia-h100"),
        ("name", "L4_Spot"),
        ("gpus_per_node", 3),
    ],
)
def test_a_gke_pool_refuses_in_a_program_what_a_stack_file_refuses_with_the_same_message(
    field: str, value: Any
) -> None:
    typed = _refusal(lambda: GkeGpuPool(**{**L4, field: value}))
    config = _stack_refusal(field, value)
    assert typed.key == f"GkeGpuPool.{field}"
    assert (typed.value, typed.problem, typed.allowed) == (
        config.value,
        config.problem,
        config.allowed,
    )


def test_a_refusal_in_a_program_is_one_line_naming_the_python_field() -> None:
    error = _refusal(lambda: GkeGpuPool(**{**L4, "max_nodes": "four"}))
    assert str(error) == (
        "GkeGpuPool.max_nodes = 'four': not a whole number; "
        "allowed: a whole number >= 1 and <= 1000"
    )


def test_a_pool_holds_what_config_reading_would_have_given() -> None:
    pool = GkeGpuPool(**{**L4, "max_nodes": "4", "capacity": "on-demand"})
    assert (pool.max_nodes, pool.capacity) == (4, "on-demand")
    assert type(pool.max_nodes) is int


def test_a_zone_that_does_not_offer_the_gpu_is_refused() -> None:
    error = _refusal(lambda: GkeGpuPool(**{**L4, "zones": ("us-central1-f",)}))
    assert (error.key, error.problem) == ("GkeGpuPool.zones[0]", "nvidia-l4 is not offered there")


def test_an_extra_taint_with_an_unknown_effect_or_a_reserved_key_is_refused() -> None:
    effect = _refusal(lambda: GkeGpuPool(**L4, extra_taints=(Taint("team", "a", "NoEvict"),)))  # type: ignore[arg-type]
    reserved = _refusal(
        lambda: GkeGpuPool(**L4, extra_taints=(Taint("spotproof.dev/capacity", "spot"),))
    )
    assert effect.key == reserved.key == "GkeGpuPool.extra_taints[0]"
    assert "unknown taint effect NoEvict" in effect.problem
    assert reserved.problem == "not a usable label key"


def test_a_valid_pool_with_extra_taints_builds_unchanged() -> None:
    taint = Taint("team", "research", TaintEffect.NO_EXECUTE)
    pool = GkeGpuPool(**L4, extra_taints=(taint,))
    assert pool.extra_taints == (taint,)


def test_a_bucket_name_no_cloud_allows_is_refused_on_construction() -> None:
    error = _refusal(lambda: BucketSpec(name="Acme_Bucket!", location="us-central1"))
    assert (error.key, error.problem) == ("BucketSpec.name", "malformed")


def test_each_clouds_bucket_component_applies_its_own_naming_rule() -> None:
    bucket = BucketSpec(name="google-ckpt", location="us-central1")  # no cloud refuses the shape
    error = _refusal(
        lambda: GkeBucketArgs(
            bucket=bucket, project="acme-ml", trainer=ServiceAccountRef("ml", "t")
        )
    )
    assert (error.key, error.problem) == (
        "CheckpointBucketArgs.bucket.name",
        "not a valid bucket name",
    )
    assert "google" in error.allowed


def test_an_eks_bucket_outside_the_clusters_region_is_refused() -> None:
    bucket = BucketSpec(name="acme-ckpt", location="eu-west-1")
    error = _refusal(
        lambda: EksBucketArgs(
            bucket=bucket,
            region="us-west-2",
            cluster_name="c",
            trainer=ServiceAccountRef("ml", "t"),
        )
    )
    assert str(error) == (
        "CheckpointBucketArgs.bucket.location = 'eu-west-1': differs from the cluster region "
        "us-west-2; allowed: us-west-2"
    )


def test_gke_pools_in_another_region_than_the_cluster_are_refused() -> None:
    pool = GkeGpuPool(**{**L4, "zones": ("europe-west4-a",)})

    def pools_in(location: Any) -> GpuNodePoolsArgs:
        return GpuNodePoolsArgs(
            cluster_name="c",
            project="acme-ml",
            location=location,
            node_service_account="n",
            pools=[pool],
        )

    error = _refusal(lambda: pools_in("us-central1"))
    assert str(error) == (
        "GpuNodePoolsArgs.pools[0].zones[0] = 'europe-west4-a': not a zone of the cluster's "
        "region us-central1; allowed: us-central1-a, us-central1-b, ..."
    )
    assert pools_in("europe-west4-b").pools == [pool]  # a zonal cluster in that region
    assert pools_in(pulumi.Output.from_input("us-central1")).pools == [pool]  # judged at up


def test_karpenter_types_refuse_what_their_stack_keys_refuse() -> None:
    family = _refusal(lambda: KarpenterPool(name="gpu", instance_families=("g7",), gpu_limit=8))
    version = _refusal(lambda: KarpenterSpec(version="0.37.0"))
    assert (family.key, family.problem) == (
        "KarpenterPool.instance_families[0]",
        "unknown GPU instance family",
    )
    assert version.key == "KarpenterSpec.version"


def test_an_aks_pool_refuses_a_gpu_count_its_size_does_not_have() -> None:
    error = _refusal(
        lambda: GpuAgentPool(
            name="spota100", vm_size="Standard_NC24ads_A100_v4", gpus_per_node=2, max_nodes=4
        )
    )
    assert (error.key, error.problem) == ("GpuAgentPool.vm_size", "has 1 GPUs, not gpusPerNode 2")


def test_a_value_given_equal_to_a_derived_default_is_judged_not_replaced() -> None:
    from spotproof.fleet import Capacity  # noqa: PLC0415
    from spotproof.fleet.eks import EksSystemPool  # noqa: PLC0415

    error = _refusal(lambda: EksSystemPool(min_nodes=5, max_nodes=3))
    assert (error.key, error.problem) == ("EksSystemPool.max_nodes", "below minNodes (5)")
    assert EksSystemPool(min_nodes=5).max_nodes == 5
    fallback = KarpenterPool(
        name="od", instance_families=("g6",), gpu_limit=8, capacity=Capacity.ON_DEMAND
    )
    assert fallback.weight == 10
    given = KarpenterPool(
        name="od", instance_families=("g6",), gpu_limit=8, capacity=Capacity.ON_DEMAND, weight=100
    )
    assert given.weight == 100
