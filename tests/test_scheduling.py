"""The scheduling contract: pools and workloads derived from one table always agree, and
the fit check answers like kube-scheduler's filters."""

from __future__ import annotations

import pytest

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.catalog import labels as platform_labels
from spotproof.fleet import PoolClass, Taint, TaintEffect
from spotproof.scheduling import aks as aks_shapes
from spotproof.scheduling import fit, node_resources
from spotproof.scheduling import gke as gke_shapes

SPOT_NODE = fit.NodeShape(
    pool="l4-spot",
    labels={
        **scheduling.contract(PoolClass.SPOT_GPU).labels,
        **platform_labels.gke_injected_labels("l4-spot", "nvidia-l4", spot=True, flex_start=False),
    },
    taints=scheduling.contract(PoolClass.SPOT_GPU).taints,
    gpus=1,
    spot=True,
)


def _pod(placement: scheduling.Placement, gpus: int = 1) -> dict:
    pod = {
        "tolerations": list(placement.tolerations),
        "nodeSelector": placement.node_selector,
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
    }
    if placement.node_affinity:
        pod["affinity"] = {"nodeAffinity": placement.node_affinity}
    return pod


@pytest.mark.parametrize("pool_class", [c for c in PoolClass if c is not PoolClass.SYSTEM])
def test_workload_placed_on_a_class_tolerates_every_taint_of_that_class(
    pool_class: PoolClass,
) -> None:
    placement = scheduling.placement(pool_class, ["nvidia-l4"])
    for taint in scheduling.contract(pool_class).taints:
        assert fit.tolerates(placement.tolerations, taint)


def test_spot_workload_fits_a_spot_node_of_its_gpu_model() -> None:
    assert (
        fit.misfits(_pod(scheduling.placement(PoolClass.SPOT_GPU, ["nvidia-l4"])), SPOT_NODE) == []
    )


def test_spot_workload_for_another_gpu_model_is_kept_off_by_affinity() -> None:
    pod = _pod(scheduling.placement(PoolClass.SPOT_GPU, ["nvidia-h100-80gb"]))
    assert fit.misfits(pod, SPOT_NODE) == ["required node affinity not satisfied"]


def test_missing_toleration_is_reported_with_the_taint() -> None:
    pod = _pod(scheduling.placement(PoolClass.SPOT_GPU))
    pod["tolerations"] = [
        t for t in pod["tolerations"] if t["key"] != scheduling.CAPACITY_TAINT_KEY
    ]
    assert fit.misfits(pod, SPOT_NODE) == [
        "taint spotproof.dev/capacity=spot:NoSchedule not tolerated"
    ]


def test_exists_toleration_without_key_tolerates_everything() -> None:
    pod = {"tolerations": [{"operator": "Exists"}], "containers": []}
    assert fit.misfits(pod, SPOT_NODE) == []


def test_toleration_with_another_effect_does_not_count() -> None:
    taint = Taint("k", "v", TaintEffect.NO_SCHEDULE)
    assert not fit.tolerates(
        [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}], taint
    )


def test_prefer_no_schedule_taints_do_not_block() -> None:
    node = fit.NodeShape("p", {}, (Taint("k", "v", TaintEffect.PREFER_NO_SCHEDULE),))
    assert fit.misfits({"containers": []}, node) == []


def test_node_selector_must_match_a_label_exactly() -> None:
    pod = {
        "nodeSelector": {scheduling.POOL_CLASS_LABEL: "system"},
        "tolerations": [{"operator": "Exists"}],
    }
    assert fit.misfits(pod, SPOT_NODE) == [
        "nodeSelector spotproof.dev/pool-class=system not on the node"
    ]


@pytest.mark.parametrize(
    ("operator", "values", "fits"),
    [
        ("In", ["nvidia-l4"], True),
        ("NotIn", ["nvidia-l4"], False),
        ("Exists", [], True),
        ("DoesNotExist", [], False),
    ],
)
def test_affinity_operators(operator: str, values: list[str], fits: bool) -> None:
    expression = {
        "key": platform_labels.GKE_ACCELERATOR_LABEL,
        "operator": operator,
        "values": values,
    }
    pod = {
        "tolerations": [{"operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expression]}]
                }
            }
        },
    }
    assert (fit.misfits(pod, SPOT_NODE) == []) is fits


def test_more_gpus_than_the_node_has_does_not_fit() -> None:
    pod = _pod(scheduling.placement(PoolClass.SPOT_GPU), gpus=2)
    assert fit.misfits(pod, SPOT_NODE) == ["needs 2 nvidia.com/gpu, node has 1"]


def test_reference_system_pod_is_kept_off_spot_by_the_contract() -> None:
    for cloud in Cloud:
        assert fit.misfits(fit.reference_system_pod(cloud), SPOT_NODE)


def test_flex_start_workload_selects_the_labels_gke_documents() -> None:
    placement = scheduling.placement(PoolClass.FLEX_START, ["nvidia-tesla-a100"])
    assert placement.node_selector == {
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
    }


def test_spot_work_runs_at_a_negative_priority() -> None:
    name = scheduling.placement(PoolClass.SPOT_GPU).priority_class_name
    assert name == scheduling.SPOT_BATCH_PRIORITY.name
    assert scheduling.SPOT_BATCH_PRIORITY.value < 0


@pytest.mark.parametrize("effect", list(TaintEffect))
def test_effect_spellings_round_trip_between_kubernetes_and_cloud_apis(effect: TaintEffect) -> None:
    assert scheduling.kubernetes_effect(scheduling.cloud_effect(effect)) is effect


def test_effect_spellings_per_api() -> None:
    taint = Taint("CriticalAddonsOnly", "true", TaintEffect.NO_SCHEDULE)
    assert scheduling.cloud_effect(taint.effect) == "NO_SCHEDULE"
    assert scheduling.aks_taint(taint) == "CriticalAddonsOnly=true:NoSchedule"


# --- CPU and memory against what a node allocates -------------------------------------

G2_NODE = fit.NodeShape(
    pool="l4-spot",
    labels=SPOT_NODE.labels,
    taints=SPOT_NODE.taints,
    gpus=1,
    spot=True,
    allocatable=gke_shapes.allocatable(8, 32),  # g2-standard-8
)


def _requesting(**requests: str) -> dict:
    pod = _pod(scheduling.placement(PoolClass.SPOT_GPU))
    pod["containers"][0]["resources"]["requests"] = requests
    return pod


def test_gke_keeps_part_of_a_node_for_itself_by_its_documented_tiers() -> None:
    # 8 vCPUs: 6% + 1% + 2 x 0.5% + 4 x 0.25% of a core = 90 millicores kept.
    # 32 GiB: 25% of 4 + 20% of 4 + 10% of 8 + 6% of 16 GiB = 3.56 GiB, and 100 MiB.
    assert gke_shapes.allocatable(8, 32) == node_resources.Allocatable(
        7910, int(32 * 2**30 - 3.56 * 2**30 - 100 * 2**20)
    )


def test_a_pod_asking_for_more_cpu_than_the_node_allocates_does_not_fit() -> None:
    assert fit.misfits(_requesting(cpu="1000"), G2_NODE) == [
        "requests 1000 CPU, node's allocatable CPU is 7.91"
    ]


def test_a_pod_asking_for_all_of_a_nodes_cores_does_not_fit_its_allocatable_share() -> None:
    assert fit.misfits(_requesting(cpu="8"), G2_NODE) != []
    assert fit.misfits(_requesting(cpu="7500m"), G2_NODE) == []


def test_a_pod_asking_for_more_memory_than_the_node_allocates_does_not_fit() -> None:
    [reason] = fit.misfits(_requesting(memory="100Ti"), G2_NODE)
    assert reason.startswith("requests 102400.0 GiB of memory, node's allocatable memory is 28.")


def test_init_containers_count_by_their_largest_not_their_sum() -> None:
    pod = _requesting(cpu="2")
    pod["initContainers"] = [
        {"name": f"i{n}", "resources": {"requests": {"cpu": "6"}}} for n in (1, 2)
    ]
    assert fit.pod_request(pod, "cpu") == 6
    assert fit.misfits(pod, G2_NODE) == []


def test_an_aks_size_bounds_cpu_by_the_vcpus_in_its_name() -> None:
    assert aks_shapes.allocatable("Standard_NC24ads_A100_v4").cpu_millis == 24_000
    assert aks_shapes.allocatable("custom").cpu_millis is None
