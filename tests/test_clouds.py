"""A cloud is a drop-in: its modules and one registry entry (``catalog.PROFILES``).

Shared code asks the registry and each cloud's module in a layer (``spotproof.clouds``),
so it never names a cloud; these tests keep it that way: every registered cloud has every
module of ``clouds.CONTRACT`` with what it provides, docs/layout.md's recipe names them
all, and a cloud that lacks one is told which in one line."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
from enum import StrEnum
from pathlib import Path

import pytest

import spotproof
from spotproof import clouds
from spotproof.catalog import PROFILES, Cloud, UnknownCloud, profile
from spotproof.catalog.profile import ManagedPrometheus, ScrapeFloor
from spotproof.fleet.errors import SpecError
from spotproof.fleet.monitoring import check_notify, read_monitoring

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
def test_every_cloud_has_every_module_of_the_contract(cloud: Cloud) -> None:
    assert clouds.lacks(cloud) == []
    assert clouds.module("spotproof.catalog", cloud).PROFILE is profile(cloud) is PROFILES[cloud]


@pytest.mark.parametrize("cloud", list(Cloud))
def test_the_contract_is_checked_in_full_where_each_clouds_sdk_is_installed(cloud: Cloud) -> None:
    """The components are checked only where the cloud's SDK is importable; the test
    environment installs every cloud's, so every module is checked here."""
    assert importlib.util.find_spec(profile(cloud).sdk_module) is not None


@pytest.mark.parametrize("cloud", list(Cloud))
@pytest.mark.parametrize(
    "entry", clouds.CONTRACT, ids=lambda e: e.template.removeprefix("spotproof.")
)
def test_a_cloud_that_lacks_a_name_of_the_contract_is_told_which(
    cloud: Cloud, entry: clouds.CloudModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = entry.module_name(cloud)
    provided = entry.provides[0]
    monkeypatch.delattr(importlib.import_module(name), provided.name)
    assert clouds.lacks(cloud) == [f"{name}.{provided.name}: missing ({provided.wanted})"]


def test_a_provided_name_of_the_wrong_type_is_told_what_it_must_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("spotproof.observability.aks.RULES", ())
    assert clouds.lacks(Cloud.AKS) == [
        "spotproof.observability.aks.RULES: not an instance of "
        "spotproof.observability.cloud:CloudRules"
    ]


def test_a_fourth_cloud_with_only_its_profile_is_told_every_module_it_lacks(
    fourth: Cloud,
) -> None:
    assert [line.split(":")[0] for line in clouds.lacks(fourth)] == [
        entry.module_name(fourth) for entry in clouds.CONTRACT
    ]


def test_a_fourth_clouds_missing_module_is_named_in_one_line(fourth: Cloud) -> None:
    with pytest.raises(UnknownCloud) as refused:
        clouds.module("spotproof.observability", fourth)
    assert str(refused.value) == (
        "cloud 'oci' has no module spotproof.observability.oci providing RULES "
        '(docs/layout.md, "A new cloud"); registered: gke, eks, aks, oci'
    )


def test_a_cloud_that_is_not_registered_is_named_in_one_line_not_a_key_error() -> None:
    unregistered = _Fourth.OCI
    with pytest.raises(UnknownCloud, match=r"^cloud 'oci' has no profile: a cloud needs"):
        clouds.module("spotproof.fleet", unregistered)  # type: ignore[arg-type]
    with pytest.raises(UnknownCloud, match=r"^cloud 'oci' has no profile"):
        check_notify(unregistered, "spotproof:monitoring.notify", ())  # type: ignore[arg-type]
    assert not issubclass(UnknownCloud, KeyError)


def test_a_fourth_clouds_monitoring_is_read_from_its_profile(fourth: Cloud) -> None:
    """Where alerts go and how often the collector scrapes come from the profile alone:
    nothing in ``fleet.monitoring`` names a cloud."""
    read = read_monitoring(fourth, disposable=False)
    assert read("spotproof:monitoring", {"notify": ["topic-1"]}).scrape_interval_seconds == 60
    with pytest.raises(SpecError, match="shorter than OCI's collector scrapes; allowed: 60 to"):
        read("spotproof:monitoring", {"scrapeIntervalSeconds": 30})
    with pytest.raises(SpecError, match="not a target on oci; allowed: a topic, topic-N"):
        read("spotproof:monitoring", {"notify": ["projects/ml-prod/notificationChannels/1"]})


def test_the_new_cloud_recipe_names_every_module_of_the_contract_and_what_it_provides() -> None:
    page = (Path(__file__).parents[1] / "docs" / "layout.md").read_text()
    recipe = page[page.index("- **A new cloud.**") : page.index("- **A new plan rule.**")]
    named = set(re.findall(r"`([^`]+)`", recipe))
    for entry in clouds.CONTRACT:
        example = importlib.util.find_spec(entry.module_name(Cloud.GKE))
        assert example is not None
        path = entry.template.removeprefix("spotproof.").replace(".", "/").format(cloud="<cloud>")
        path += "/" if example.submodule_search_locations else ".py"
        assert path in named, path
        assert {p.name for p in entry.provides} <= named, entry.template


class _Fourth(StrEnum):
    OCI = "oci"


@pytest.fixture
def fourth(monkeypatch: pytest.MonkeyPatch) -> Cloud:
    """A fourth cloud registered with its profile and nothing else."""
    monitoring = ManagedPrometheus(
        notify_target=re.compile(r"topic-[0-9]+"),
        notify_target_form="a topic, topic-N",
        scrape_floor=ScrapeFloor(60, "OCI's collector"),
    )
    fourth_profile = dataclasses.replace(PROFILES[Cloud.GKE], managed_prometheus=monitoring)
    monkeypatch.setitem(PROFILES, _Fourth.OCI, fourth_profile)  # type: ignore[arg-type]
    return _Fourth.OCI  # type: ignore[return-value]


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
