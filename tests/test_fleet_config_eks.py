"""EKS stack config: read into a fleet with stated defaults; bad values exit 2 in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.catalog import Cloud
from spotproof.fleet import Capacity, PoolClass, advice, fleet_from_config
from tests.support import plan_refuses_config, set_key, stack_config


def test_eks_dev_reads_into_a_fleet_with_karpenter_pools_and_aws_grace() -> None:
    fleet = fleet_from_config("eks-dev", stack_config("eks-dev"))
    assert fleet.cloud is Cloud.EKS
    assert fleet.region == "us-west-2" and not hasattr(fleet.platform, "project")
    assert fleet.platform.network.zones == ("us-west-2a", "us-west-2b", "us-west-2c")
    spot, fallback = fleet.platform.gpu_pools
    assert (spot.pool_class, spot.weight, spot.min_instance_types) == (PoolClass.SPOT_GPU, 100, 5)
    assert (fallback.capacity, fallback.weight, fallback.gpu_limit) == (Capacity.ON_DEMAND, 10, 2)
    assert fleet.smoke_test is not None and fleet.smoke_test.grace_period_seconds == 90
    assert fleet.system_pool.machine_type == "m6i.large"


def test_eks_prod_names_its_subnets_and_is_protected() -> None:
    fleet = fleet_from_config("eks-prod", stack_config("eks-prod"))
    assert [s.zone for s in fleet.platform.network.subnets] == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    ]
    assert fleet.protect is True
    assert fleet.bucket.kms_key is not None


def test_eks_system_pool_and_pool_weights_default_by_capacity() -> None:
    config = stack_config("eks-dev")
    del config["spotproof:systemPool"]
    del config["spotproof:gpuPools"][1]["weight"]
    fleet = fleet_from_config("eks-dev", config)
    assert (fleet.system_pool.machine_type, fleet.system_pool.min_nodes) == ("m6i.xlarge", 2)
    assert fleet.platform.gpu_pools[1].weight == 10


BAD_EKS_INPUT: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "unknown instance family": (
        set_key("spotproof:gpuPools.0.instanceFamilies", ["g6", "g99"]),
        "spotproof:gpuPools[0].instanceFamilies[1] = 'g99'",
        "g4dn, g5, g6",
    ),
    "a GPU limit of 0": (
        set_key("spotproof:gpuPools.0.gpuLimit", 0),
        "spotproof:gpuPools[0].gpuLimit = 0",
        ">= 1",
    ),
    "a fallback weight above the spot weight": (
        set_key("spotproof:gpuPools.1.weight", 100),
        "spotproof:gpuPools[1].weight = 100",
        "1-99",
    ),
    "a subnet list with one AZ": (
        set_key(
            "spotproof:network",
            {
                "subnets": [
                    {"id": "subnet-0a1b2c3d4e5f60001", "zone": "us-west-2a"},
                    {"id": "subnet-0a1b2c3d4e5f60002", "zone": "us-west-2a"},
                ]
            },
        ),
        "spotproof:network.subnets",
        "at least two zones",
    ),
    "more instance types required than the families offer": (
        set_key("spotproof:gpuPools.1.minInstanceTypes", 20),
        "spotproof:gpuPools[1].minInstanceTypes = 20",
        "<= 10",
    ),
    "a GPU count no family offers": (
        set_key("spotproof:gpuPools.0.gpusPerNode", 3),
        "spotproof:gpuPools[0].gpusPerNode = 3",
        "1, 4, 8",
    ),
    "an unpinned Karpenter chart": (
        set_key("spotproof:karpenter", {"version": "latest"}),
        "spotproof:karpenter.version = 'latest'",
        "1.0.0 to 1.15.0",
    ),
    "a node image that is not Bottlerocket": (
        set_key("spotproof:karpenter.nodeImage", "al2023@latest"),
        "spotproof:karpenter.nodeImage",
        "bottlerocket@",
    ),
    "more controller replicas than system nodes": (
        set_key("spotproof:karpenter.replicas", 3),
        "spotproof:karpenter.replicas = 3",
        "1-2",
    ),
    "a GKE-only key on EKS": (
        set_key("spotproof:flexStartPool", {"name": "x"}),
        "spotproof:flexStartPool",
        "unknown field",
    ),
    "a grace period beyond what the preemption path leaves": (
        set_key("spotproof:smokeTest.gracePeriodSeconds", 100),
        "spotproof:smokeTest.gracePeriodSeconds = 100",
        "<= 90",
    ),
    "a bucket name S3 refuses": (
        set_key("spotproof:checkpointBucket.name", "Under_Score"),
        "spotproof:checkpointBucket.name",
        "[a-z0-9-]",
    ),
    "no region": (
        lambda config: config.pop("aws:region"),
        "aws:region",
        "us-west-2",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_EKS_INPUT))
def test_bad_eks_config_exits_2_with_one_line_naming_key_and_allowed_values(
    case: str, make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    mutate, key, hint = BAD_EKS_INPUT[case]
    config = stack_config("eks-dev")
    mutate(config)

    err = plan_refuses_config(capsys, make_project(config, stack="eks-test"), "eks-test")

    assert key in err and hint in err, err


def test_named_subnets_get_a_warning_of_what_the_plan_cannot_see() -> None:
    fleet = fleet_from_config("eks-prod", stack_config("eks-prod"))
    [warning] = [w for w in advice.warnings(fleet) if w.key == "spotproof:network.subnets"]
    named = [subnet.id for subnet in fleet.platform.network.subnets]
    assert f"the plan cannot see {', '.join(named)}: they must not map public IPs" in (
        warning.message
    )
    assert "NAT gateway, or VPC endpoints for ECR, S3, STS, EC2, SQS and EKS Auth" in (
        warning.message
    )


def test_a_created_vpc_raises_no_subnet_warning() -> None:
    fleet = fleet_from_config("eks-dev", stack_config("eks-dev"))
    assert [w for w in advice.warnings(fleet) if w.key == "spotproof:network.subnets"] == []
