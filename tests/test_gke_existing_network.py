"""A GKE stack may join a network that exists already (a Shared VPC's): the cluster names
it and its two secondary ranges, spotproof creates no network of its own, and the plan
says what it cannot see of that network."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.fleet import SpecError, advice, fleet_from_config
from spotproof.plan import run_plan
from tests.support import documentation, stack_config

HOST = "projects/acme-net-host"
EXISTING = {
    "network": f"{HOST}/global/networks/shared",
    "subnetwork": f"{HOST}/regions/us-central1/subnetworks/ml-us-central1",
    "podsRange": "ml-pods",
    "servicesRange": "ml-services",
}
NETWORK_TYPES = (
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
    "gcp:compute/router:Router",
    "gcp:compute/routerNat:RouterNat",
)


def _gke(network: Any, **smoke: Any) -> dict[str, Any]:
    config = stack_config("gke-dev")
    config["spotproof:network"] = network
    if smoke:
        config["spotproof:smokeTest"] = {**config["spotproof:smokeTest"], **smoke}
    return config


def test_a_cluster_on_an_existing_network_names_it_and_its_ranges_and_creates_none(
    make_project: Callable[..., Path],
) -> None:
    result = run_plan("gke-test", make_project(_gke({"existing": EXISTING})))
    cluster = result.recording.one("gcp:container/cluster:Cluster", "gke-test").inputs
    assert (cluster["network"], cluster["subnetwork"]) == (
        EXISTING["network"],
        EXISTING["subnetwork"],
    )
    assert cluster["ipAllocationPolicy"] == {
        "clusterSecondaryRangeName": "ml-pods",
        "servicesSecondaryRangeName": "ml-services",
    }
    assert [r for r in result.recording.resources if r.type in NETWORK_TYPES] == []
    assert result.violations == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"network": f"{HOST}/global/networks/default"}, "a project's default network"),
        (
            {"subnetwork": f"{HOST}/regions/europe-west4/subnetworks/ml"},
            "in europe-west4, not the cluster's region; allowed: a subnetwork in us-central1",
        ),
        (
            {"subnetwork": "projects/acme-other/regions/us-central1/subnetworks/ml"},
            "in project acme-other, but the network is in acme-net-host",
        ),
        ({"servicesRange": "ml-pods"}, "the same secondary range as podsRange"),
        ({"network": "shared"}, "malformed; allowed: projects/PROJECT/global/networks/NAME"),
        ({"podsRange": None}, "existing.podsRange = None: required"),
        ({"routes": "all"}, "existing.routes = 'all': unknown field"),
    ],
)
def test_an_existing_network_that_cannot_work_is_refused_in_one_line(
    change: dict[str, Any], says: str
) -> None:
    existing = {k: v for k, v in {**EXISTING, **change}.items() if v is not None}
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", _gke({"existing": existing}))
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_an_existing_network_leaves_no_room_for_the_created_ones_ranges() -> None:
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", _gke({"existing": EXISTING, "podsCidr": "10.16.0.0/14"}))
    assert str(raised.value).startswith("spotproof:network.podsCidr = '10.16.0.0/14'")
    assert "allowed: either existing or the created network's" in str(raised.value)


def test_the_plan_says_an_existing_network_needs_a_nat_for_an_image_from_outside_google() -> None:
    [warning] = advice.warnings(fleet_from_config("gke-dev", _gke({"existing": EXISTING})))
    assert warning.key == "spotproof:network.existing"
    assert f"the plan cannot see {EXISTING['subnetwork']}" in warning.message
    assert "Private Google Access (or a Cloud NAT) for the checkpoint bucket" in warning.message
    assert "a Cloud NAT to pull ghcr.io/spotproof/smoke-trainer:0.1.0" in warning.message


def test_images_from_artifact_registry_need_only_private_google_access() -> None:
    image = "us-central1-docker.pkg.dev/acme/ml/trainer:1.0"
    config = _gke({"existing": EXISTING}, image=image)
    config["spotproof:batch"] = {**config["spotproof:batch"], "image": image}
    [warning] = advice.warnings(fleet_from_config("gke-dev", config))
    assert "Cloud NAT to pull" not in warning.message


def test_a_created_network_raises_no_warning_about_its_egress() -> None:
    assert advice.warnings(fleet_from_config("gke-dev", _gke({}))) == []


def test_the_readme_example_is_accepted_as_written() -> None:
    section = re.search(
        r"^### An existing network.*?^```yaml\n(.*?)^```$",
        documentation(),
        re.M | re.S,
    )
    assert section, "README lost its existing-network example"
    config = {**stack_config("gke-dev"), **yaml.safe_load(section.group(1))}
    existing = fleet_from_config("gke-dev", config).platform.network.existing
    assert existing is not None and existing.pods_range == "ml-pods"
