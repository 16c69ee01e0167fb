"""What every cloud's reclaim module (``spotproof.drill.reclaim.<cloud>``) offers the drill:
the interface ``drill.reclaim`` documents, the stack output each reads its grant from, and
a node of one cloud refused by another. Each cloud's calls are specified in
``test_drill_reclaim_<cloud>.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType

import pytest

from spotproof import clouds
from spotproof.catalog import PROFILES, Cloud
from spotproof.drill.errors import DrillRefused
from spotproof.drill.grants import grant_from_outputs, output_keys
from spotproof.drill.instances import RECLAIM_LAYER, Instance, instance_of

NODES = {
    Cloud.GKE: "gce://ml-research/us-central1-a/gke-research-l4-spot-5f3c2a1b-x7kq",
    Cloud.EKS: "aws:///us-east-1a/i-0123456789abcdef0",
    Cloud.AKS: (
        "azure:///subscriptions/00000000-0000-0000-0000-0000000000a1/resourceGroups/"
        "mc_ml-research_research_eastus/providers/Microsoft.Compute/virtualMachineScaleSets/"
        "aks-gpuspot-12345678-vmss/virtualMachines/3"
    ),
}
"""One node's ``spec.providerID`` on each cloud."""

OUTPUT_KEYS = {
    Cloud.GKE: ("project", "role", "instancePrefix"),
    Cloud.EKS: ("region", "experimentTemplateId", "targetTagKey", "operatorPolicyArn"),
    Cloud.AKS: ("subscriptionId", "nodeResourceGroup", "roleDefinitionId"),
}
"""The keys of each stack's ``drill`` output, as the stacks export them."""


def _module(cloud: Cloud) -> ModuleType:
    return clouds.module(RECLAIM_LAYER, cloud)


def test_every_registered_cloud_has_a_reclaim_module() -> None:
    assert set(NODES) == set(PROFILES)


@pytest.mark.parametrize("cloud", list(Cloud))
def test_each_module_offers_what_the_drill_asks_of_it(cloud: Cloud) -> None:
    module = _module(cloud)
    assert isinstance(module.PROVIDER_ID_FORM, str)
    assert isinstance(module.instance, Callable)
    assert isinstance(module.reclaimer, Callable)
    assert dataclasses.is_dataclass(module.Grant)
    assert module.Grant.__dataclass_params__.frozen


@pytest.mark.parametrize("cloud", list(Cloud))
def test_each_grant_reads_the_stacks_drill_output_keys(cloud: Cloud) -> None:
    assert output_keys(cloud) == OUTPUT_KEYS[cloud]
    outputs = {"drill": {key: f"{key}-value" for key in OUTPUT_KEYS[cloud]}}
    grant = grant_from_outputs(cloud, outputs, "research")
    assert isinstance(grant, _module(cloud).Grant)
    assert dataclasses.astuple(grant) == tuple(f"{key}-value" for key in OUTPUT_KEYS[cloud])


@pytest.mark.parametrize("cloud", list(Cloud))
def test_each_cloud_reads_its_own_nodes_provider_id(cloud: Cloud) -> None:
    found = instance_of(NODES[cloud], cloud)
    assert isinstance(found, Instance)
    assert (found.cloud, found.provider_id) == (cloud, NODES[cloud])


@pytest.mark.parametrize(("cloud", "other"), [(c, o) for c in Cloud for o in Cloud if c is not o])
def test_a_node_of_another_cloud_is_refused_naming_the_form_allowed(
    cloud: Cloud, other: Cloud
) -> None:
    with pytest.raises(DrillRefused) as refused:
        instance_of(NODES[other], cloud)
    line = str(refused.value)
    assert "\n" not in line
    assert (
        f"is not a {cloud.value.upper()} instance; allowed: {_module(cloud).PROVIDER_ID_FORM}"
        in line
    )
