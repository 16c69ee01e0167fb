"""The stack config is validated before anything is declared; bad values exit 2 in one line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.catalog import Cloud
from spotproof.fleet import Capacity, PoolClass, SpecError, TaintEffect, fleet_from_config
from tests.support import REPO, plan_refuses_config, run_cli, set_key, stack_config

pytestmark = pytest.mark.processes


def test_dev_stack_reads_into_a_fleet_with_stated_defaults() -> None:
    fleet = fleet_from_config("gke-dev", stack_config("gke-dev"))
    assert fleet.cloud is Cloud.GKE
    assert fleet.environment == "dev"
    assert fleet.protect is False
    assert [p.name for p in fleet.platform.gpu_pools] == ["l4-spot", "t4-spot", "l4-ondemand"]
    l4 = fleet.platform.gpu_pools[0]
    assert (l4.gpu_type, l4.gpus_per_node, l4.capacity, l4.min_nodes) == (
        "nvidia-l4",
        1,
        Capacity.SPOT,
        0,
    )
    assert fleet.bucket.name == "spotproof-dev-gke-dev-checkpoints"
    assert fleet.bucket.location == "us-central1"
    assert fleet.smoke_test is not None
    assert fleet.smoke_test.grace_period_seconds == 15  # GKE's notice for non-system pods


def test_a_stack_is_protected_unless_it_says_it_is_disposable() -> None:
    assert fleet_from_config("gke-prod", stack_config("gke-prod")).protect is True
    config = stack_config("gke-dev")
    assert config.pop("spotproof:disposable") is True
    assert fleet_from_config("gke-dev", config).protect is True


def test_protection_never_depends_on_the_stacks_name() -> None:
    production = fleet_from_config("production", stack_config("gke-prod"))
    scratch = fleet_from_config("prod", stack_config("gke-dev"))
    assert (production.protect, scratch.protect) == (True, False)


def test_protect_false_is_the_same_setting_as_disposable_true() -> None:
    config = stack_config("gke-dev")
    del config["spotproof:disposable"]
    config["spotproof:protect"] = False
    assert fleet_from_config("gke-dev", config).protect is False


def test_protect_and_disposable_may_not_disagree() -> None:
    config = stack_config("gke-dev")
    config["spotproof:protect"] = True
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", config)
    assert str(raised.value).startswith(
        "spotproof:protect = True: contradicts spotproof:disposable = true; allowed: "
    )


def test_values_arrive_as_strings_from_the_pulumi_engine() -> None:
    config = {
        k: str(v) if not isinstance(v, dict | list) else v
        for k, v in stack_config("gke-dev").items()
    }
    config["spotproof:disposable"] = "false"
    assert fleet_from_config("gke-dev", config).protect is True


def test_taint_spelling_is_parsed_into_kubernetes_effects() -> None:
    config = stack_config("gke-dev")
    config["spotproof:gpuPools"][0]["extraTaints"] = ["team=research:NoExecute"]
    taint = fleet_from_config("gke-dev", config).platform.gpu_pools[0].extra_taints[0]
    assert (taint.key, taint.value, taint.effect) == ("team", "research", TaintEffect.NO_EXECUTE)


def test_pools_are_grouped_by_class() -> None:
    fleet = fleet_from_config("gke-dev", stack_config("gke-dev"))
    assert [p.name for p in fleet.pools_of(PoolClass.SPOT_GPU)] == ["l4-spot", "t4-spot"]
    assert [p.name for p in fleet.pools_of(PoolClass.ON_DEMAND_GPU)] == ["l4-ondemand"]
    assert [p.name for p in fleet.pools_of(PoolClass.FLEX_START)] == ["a100-flex"]


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda config: config.pop(key)


def _both(*mutations: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def mutate(config: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(config)

    return mutate


BAD_INPUT = {
    "unknown taint effect": (
        set_key("spotproof:gpuPools.0.extraTaints", ["team=a:NoEvict"]),
        "spotproof:gpuPools[0].extraTaints[0]",
        "unknown taint effect NoEvict",
    ),
    "unknown GPU type": (
        set_key("spotproof:gpuPools.1.gpuType", "nvidia-tesla-k80"),
        "spotproof:gpuPools[1].gpuType",
        "nvidia-l4",
    ),
    "GPU count an N1 machine cannot carry": (
        set_key("spotproof:gpuPools.1.gpusPerNode", 3),
        "spotproof:gpuPools[1].gpusPerNode = 3",
        "allowed: 1, 2, 4",
    ),
    "GPU count that contradicts an accelerator-optimized type": (
        set_key("spotproof:gpuPools.0.gpusPerNode", 2),
        "spotproof:gpuPools[0].gpusPerNode = 2",
        "carries exactly 1",
    ),
    "machine type that carries no GPU": (
        set_key("spotproof:gpuPools.0.machineType", "e2-standard-8"),
        "spotproof:gpuPools[0].machineType",
        "not a GPU machine type",
    ),
    "negative min nodes": (
        set_key("spotproof:gpuPools.0.minNodes", -1),
        "spotproof:gpuPools[0].minNodes = -1",
        ">= 0",
    ),
    "max below min": (
        set_key("spotproof:systemPool", {"minNodes": 3, "maxNodes": 2}),
        "spotproof:systemPool.maxNodes = 2",
        "below minNodes (3)",
    ),
    "system pool that may scale to zero": (
        set_key("spotproof:systemPool", {"minNodes": 0}),
        "spotproof:systemPool.minNodes = 0",
        ">= 1",
    ),
    "duplicate pool names": (
        set_key("spotproof:gpuPools.1.name", "l4-spot"),
        "spotproof:gpuPools[1].name = 'l4-spot'",
        "duplicate pool name",
    ),
    "flex-start pool named like a GPU pool": (
        set_key("spotproof:flexStartPool.name", "t4-spot"),
        "spotproof:flexStartPool.name",
        "duplicate pool name",
    ),
    "bucket in another region": (
        set_key("spotproof:checkpointBucket", {"location": "europe-west4"}),
        "spotproof:checkpointBucket.location = 'europe-west4'",
        "allowed: us-central1",
    ),
    "grace period longer than GKE's notice": (
        set_key("spotproof:smokeTest.gracePeriodSeconds", 30),
        "spotproof:smokeTest.gracePeriodSeconds = 30",
        "<= 15",
    ),
    "misspelt top-level key": (
        set_key("spotproof:gpuPool", []),
        "spotproof:gpuPool",
        "unknown field",
    ),
    "misspelt pool field": (
        set_key("spotproof:gpuPools.0.maxNode", 3),
        "spotproof:gpuPools[0].maxNode",
        "maxNodes",
    ),
    "zone outside the region": (
        set_key("spotproof:gpuPools.0.zones", ["europe-west4-a"]),
        "spotproof:gpuPools[0].zones[0]",
        "us-central1-a",
    ),
    "unquoted Kubernetes version that YAML turns into 1.3": (
        set_key("spotproof:kubernetesVersion", 1.30),
        "spotproof:kubernetesVersion",
        "quote it",
    ),
    "smoke test aimed at a class without pools": (
        _both(
            _drop("spotproof:flexStartPool"), set_key("spotproof:smokeTest.target", "flex-start")
        ),
        "spotproof:smokeTest.target = 'flex-start'",
        "no pool of that class",
    ),
    "unknown cloud": (set_key("spotproof:cloud", "openstack"), "spotproof:cloud", "allowed: gke"),
    "missing GCP project": (_drop("gcp:project"), "gcp:project", "required"),
    "flex-start run longer than seven days": (
        set_key("spotproof:flexStartPool.maxRunHours", 200),
        "spotproof:flexStartPool.maxRunHours = 200",
        "<= 168",
    ),
    "autoprovisioning limit of zero GPUs": (
        set_key("spotproof:autoprovisioning.gpuLimits", {"nvidia-l4": 0}),
        "spotproof:autoprovisioning.gpuLimits.nvidia-l4",
        ">= 1",
    ),
    "autoprovisioning limit for an unknown GPU": (
        set_key("spotproof:autoprovisioning.gpuLimits", {"nvidia-k80": 4}),
        "spotproof:autoprovisioning.gpuLimits.nvidia-k80",
        "unknown GPU type",
    ),
    "smoke test asking for more GPUs than any target node has": (
        set_key("spotproof:smokeTest.gpus", 2),
        "spotproof:smokeTest.gpus = 2",
        "<= 1",
    ),
    "checkpoint interval beyond the run": (
        set_key("spotproof:smokeTest.totalSteps", 10),
        "spotproof:smokeTest.totalSteps = 10",
        ">= 50",
    ),
    "a pool that is not an object": (
        set_key("spotproof:gpuPools.0", "l4-spot"),
        "spotproof:gpuPools[0]",
        "expected an object",
    ),
    "a zone the region does not have": (
        set_key("spotproof:gpuPools.0.zones", ["us-central1-z"]),
        "spotproof:gpuPools[0].zones[0] = 'us-central1-z': not a zone of us-central1",
        "us-central1-a",
    ),
    "a zone without the pool's GPU": (
        set_key("spotproof:gpuPools.0.zones", ["us-central1-f"]),
        "spotproof:gpuPools[0].zones[0] = 'us-central1-f'",
        "nvidia-l4 is not offered there",
    ),
    "an N1 type with more vCPUs than its GPU count allows": (
        set_key("spotproof:gpuPools.1.machineType", "n1-standard-64"),
        "spotproof:gpuPools[1].machineType = 'n1-standard-64'",
        "1 x nvidia-tesla-t4 allow at most 48 vCPUs and 312 GB",
    ),
    "autoprovisioning CPU limit below the declared pools": (
        set_key("spotproof:autoprovisioning.maxCpu", 64),
        "spotproof:autoprovisioning.maxCpu = 64",
        "below what the declared pools use at their maximum",
    ),
    "autoprovisioning GPU limit below the declared pools": (
        set_key("spotproof:autoprovisioning.gpuLimits", {"nvidia-l4": 2}),
        "spotproof:autoprovisioning.gpuLimits.nvidia-l4 = 2",
        "below what the declared pools use at their maximum",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_config_exits_2_with_one_line_naming_key_and_allowed_values(
    case: str, make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    mutate, key, hint = BAD_INPUT[case]
    config = stack_config("gke-dev")
    mutate(config)

    err = plan_refuses_config(capsys, make_project(config), "gke-test")

    assert key in err and hint in err, err


def test_a_misspelt_key_is_named_with_the_key_it_meant_before_that_key_is_missed() -> None:
    config = stack_config("gke-dev")
    pool = config["spotproof:gpuPools"][0]
    pool["maxNode"] = pool.pop("maxNodes")
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", config)
    assert str(raised.value).startswith(
        "spotproof:gpuPools[0].maxNode = 4: unknown field (did you mean maxNodes?); allowed: "
    )


def test_a_misspelt_key_is_reported_before_any_value_of_its_object_is_judged() -> None:
    config = stack_config("gke-dev")
    config["spotproof:gpuPools"][0].update(machineType="g2-standard-7", zonse=["us-central1-a"])
    with pytest.raises(SpecError, match=r"\.zonse = .*did you mean zones\?"):
        fleet_from_config("gke-dev", config)


def test_a_misspelt_top_level_key_is_reported_before_the_settings_it_leaves_unset() -> None:
    config = stack_config("gke-dev")
    config["spotproof:smokeTets"] = config.pop("spotproof:smokeTest")
    config["spotproof:gpuPools"] = []  # the smoke test's target would now be refused
    with pytest.raises(SpecError, match=r"^spotproof:smokeTets = .*did you mean smokeTest\?"):
        fleet_from_config("gke-dev", config)


def test_an_unknown_key_unlike_any_is_refused_listing_what_is_allowed() -> None:
    config = stack_config("gke-dev")
    config["spotproof:gpuPools"][0]["owner"] = "vision"
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", config)
    assert "owner = 'vision': unknown field; allowed: capacity, diskGb," in str(raised.value)


def test_spec_error_names_key_value_and_allowed() -> None:
    error = SpecError("spotproof:x", 3, "too many", "1 or 2")
    assert str(error) == "spotproof:x = 3: too many; allowed: 1 or 2"


def test_unknown_stack_exits_2_listing_the_stacks(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "plan", "--stack", "gke-staging", "--project-dir", str(REPO))
    assert code == 2
    assert "unknown stack 'gke-staging'" in err and "gke-dev, gke-prod" in err


def test_stack_file_that_is_not_yaml_exits_2(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-dev"))
    (root / "stacks" / "Pulumi.gke-test.yaml").write_text("config: [unclosed\n")
    code, _, err = run_cli(capsys, "plan", "--stack", "gke-test", "--project-dir", str(root))
    assert code == 2
    assert "not valid YAML" in err and err.count("\n") == 1


def test_missing_flag_exits_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "plan")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_bad_input_from_a_real_process_prints_no_traceback(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("gke-dev")
    config["spotproof:gpuPools"][1]["gpusPerNode"] = 3
    root = make_project(config)
    done = subprocess.run(
        [sys.executable, "-m", "spotproof.cli", "plan", "--stack", "gke-test"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("spotproof plan: spotproof:gpuPools[1].gpusPerNode = 3")
