"""A cloud is a drop-in: its modules and one registry entry (``catalog.PROFILES``).

Shared code asks the registry and each cloud's module in a layer (``spotproof.clouds``),
so it never names a cloud; these tests keep it that way."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import spotproof
from spotproof import clouds
from spotproof.catalog import PROFILES, Cloud, profile
from spotproof.fleet.shared import CloudConfig
from spotproof.plan.cloud import CloudPlan
from spotproof.policy.identity_readiness import IdentityBinding
from spotproof.scheduling.node_shapes import CloudShapes

PACKAGE_ROOT = Path(spotproof.__file__).parent
CLOUD_OWN = re.compile(r"(^|/)(gke|eks|aks)(/|(_\w+)?\.py$)")
"""A cloud's own modules: its package of components and its module in each layer."""
NAMES_A_CLOUD = re.compile(r"""Cloud\.(GKE|EKS|AKS)\b|["'](gcp|aws|azure-native):""")
STILL_NAMING_A_CLOUD = {
    "catalog/__init__.py": "the registry itself",
    "plan/simulation/lifecycle/azure.py": "one object store's lifecycle rules, by store",
    "plan/simulation/lifecycle/gcs.py": "one object store's lifecycle rules, by store",
    "plan/simulation/lifecycle/s3.py": "one object store's lifecycle rules, by store",
    "policy/autoscaling.py": "an EKS Pod Identity association gives KEDA's operator its identity",
    "policy/storage_access.py": "evaluates AWS IAM, the one cloud's grants read offline",
    "policy/work_queues.py": "one section per cloud's queue service",
    "runtime/storage/s3.py": "the S3 store's IAM condition keys (the runtime, not a layer)",
    "testing.py": "its docstring's example",
}


@pytest.mark.parametrize("cloud", list(Cloud))
def test_every_cloud_is_registered_with_a_module_in_every_layer(cloud: Cloud) -> None:
    assert profile(cloud) is PROFILES[cloud]
    assert isinstance(clouds.module("spotproof.fleet", cloud).CONFIG, CloudConfig)
    assert isinstance(clouds.module("spotproof.scheduling", cloud).SHAPES, CloudShapes)
    policy = clouds.module("spotproof.policy", cloud)
    assert all(isinstance(b, IdentityBinding) for b in policy.IDENTITY_BINDINGS)
    assert isinstance(policy.RESOURCE_RULES, tuple)
    assert isinstance(policy.STACK_RULES, tuple)
    assert isinstance(clouds.module("spotproof.plan", cloud).PLAN, CloudPlan)
    # The components import the cloud's Pulumi SDK, another extra: found, not imported.
    assert importlib.util.find_spec(clouds.module_name("spotproof", cloud)) is not None


def test_a_clouds_profile_names_its_own_provider() -> None:
    for cloud_profile in PROFILES.values():
        assert cloud_profile.cluster_type.startswith(cloud_profile.provider_prefix)
        assert cloud_profile.region_key.startswith(cloud_profile.provider_prefix)
        assert all(t.startswith(cloud_profile.provider_prefix) for t in cloud_profile.unique_names)


def test_shared_modules_name_no_cloud_but_the_ones_said_why() -> None:
    naming = {
        path.relative_to(PACKAGE_ROOT).as_posix()
        for path in PACKAGE_ROOT.rglob("*.py")
        if not CLOUD_OWN.search(path.relative_to(PACKAGE_ROOT).as_posix())
        and NAMES_A_CLOUD.search(path.read_text())
    }
    assert naming == set(STILL_NAMING_A_CLOUD)
