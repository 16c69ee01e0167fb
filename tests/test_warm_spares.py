"""``spotproof.kube.WarmSpares``: spare GPU nodes held by placeholder pods that a gang's
replacement rank preempts, with the trainer's image already pulled; rendered under mocks."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from spotproof import policy, scheduling
from spotproof.catalog import EXPENDABLE_PRIORITY_CUTOFF, Cloud
from spotproof.fleet import PoolClass, Taint
from spotproof.kube import (
    ClusterBaseline,
    ClusterBaselineArgs,
    GangRecovery,
    TrainingJob,
    TrainingJobArgs,
    WarmSpares,
    WarmSparesArgs,
)
from spotproof.kube.spares import PAUSE_IMAGE, PRE_PULL_COMMAND
from spotproof.kube.training import Trainer
from spotproof.kube.workload import LocalQueueRef, TargetPlacement
from spotproof.testing import Recording, record
from tests.test_training_job import IDENTITY

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
IMAGE = "ghcr.io/acme/llm-train:1.4"
ON_DEMAND = TargetPlacement(PoolClass.ON_DEMAND_GPU, ["nvidia-h100-80gb"])
FALLING_BACK = TargetPlacement(
    PoolClass.ON_DEMAND_GPU,
    fallback=[PoolClass.SPOT_GPU],
    platform_taints=[Taint("kubernetes.azure.com/scalesetpriority", "spot")],
)
GANG_TRAINER = Trainer(image=IMAGE, command=("python", "train.py"), gpus=8, state_mib=1024)


def _spares(
    placement: TargetPlacement = ON_DEMAND,
    *,
    baseline: bool = False,
    with_gang: bool = False,
    **options: Any,
) -> Recording:
    arguments: dict[str, Any] = {"image": IMAGE, "gpus": 8, "count": 2, **options}

    def program() -> None:
        if baseline:
            ClusterBaseline("base", ClusterBaselineArgs("ml", cloud=Cloud.GKE))
        if with_gang:
            TrainingJob(
                "llm",
                TrainingJobArgs(
                    trainer=GANG_TRAINER,
                    placement=placement,
                    identity=IDENTITY,
                    checkpoint_url=pulumi.Output.from_input("gs://acme-ckpt/checkpoints/llm"),
                    nodes=4,
                    recovery=GangRecovery.REPLACE_RANK,
                    replica_secret="0123456789abcdef" * 4,
                ),
            )
        WarmSpares("llm-spares", WarmSparesArgs(placement=placement, namespace="ml", **arguments))

    return record(program, stack="research", project="ml", config={})


def _deployment(recording: Recording) -> dict[str, Any]:
    [deployment] = recording.of_type(DEPLOYMENT)
    return deployment.inputs


def _pod(recording: Recording) -> dict[str, Any]:
    return _deployment(recording)["spec"]["template"]["spec"]


def _placeholder_class(recording: Recording) -> dict[str, Any]:
    [spares] = [
        r.inputs
        for r in recording.of_type(PRIORITY_CLASS)
        if r.inputs["metadata"]["name"].startswith(scheduling.WARM_SPARE_PRIORITY.name)
    ]
    return spares


# --- the placeholders' priority -------------------------------------------------------


def test_a_placeholder_is_below_every_workload_class_the_baseline_renders() -> None:
    recording = _spares(baseline=True)
    placeholder = _placeholder_class(recording)["value"]
    workloads = [
        r.inputs["value"]
        for r in recording.of_type(PRIORITY_CLASS)
        if r.inputs["metadata"]["name"] != _placeholder_class(recording)["metadata"]["name"]
    ]
    assert len(workloads) == len(scheduling.PRIORITY_CLASSES)
    assert placeholder < min(workloads)
    assert placeholder < min(spec.value for spec in scheduling.PRIORITY_CLASSES)


def test_a_placeholder_is_not_expendable_so_it_keeps_its_node_and_gets_a_new_one() -> None:
    # Below the cutoff the cluster autoscaler would neither add a node for a placeholder
    # nor keep the node it holds.
    assert _placeholder_class(_spares())["value"] >= EXPENDABLE_PRIORITY_CUTOFF


def test_a_placeholder_never_preempts_anything_and_is_nobodys_default() -> None:
    placeholder = _placeholder_class(_spares())
    assert placeholder["preemptionPolicy"] == "Never"
    assert placeholder["globalDefault"] is False


def test_each_warm_spares_has_its_own_cluster_wide_class_and_its_pods_use_it() -> None:
    recording = _spares()
    name = _placeholder_class(recording)["metadata"]["name"]
    assert name == "spotproof-warm-spare-llm-spares"
    assert _pod(recording)["priorityClassName"] == name


# --- the Deployment ---------------------------------------------------------------------


def test_there_is_one_placeholder_per_spare() -> None:
    assert _deployment(_spares(count=3))["spec"]["replicas"] == 3


def test_each_placeholder_requests_the_gpus_the_trainer_asks_for() -> None:
    [container] = _pod(_spares(gpus=4))["containers"]
    resources = container["resources"]
    assert resources["requests"][scheduling.GPU_RESOURCE] == "4"
    assert resources["limits"][scheduling.GPU_RESOURCE] == "4"


@pytest.mark.parametrize("placement", [ON_DEMAND, FALLING_BACK], ids=["accelerator", "fallback"])
def test_the_placeholders_select_and_tolerate_exactly_what_the_gang_does(
    placement: TargetPlacement,
) -> None:
    recording = _spares(placement, with_gang=True)
    [jobset] = recording.of_type(JOBSET)
    spares = _pod(recording)
    for job in jobset.inputs["spec"]["replicatedJobs"]:
        gang = job["template"]["spec"]["template"]["spec"]
        for field in ("nodeSelector", "tolerations", "affinity"):
            assert spares.get(field) == gang.get(field), field


def test_the_placeholder_sleeps_in_a_pinned_pause_image() -> None:
    [container] = _pod(_spares())["containers"]
    assert container["image"] == PAUSE_IMAGE == "registry.k8s.io/pause:3.10"


def test_an_init_container_pulls_the_trainers_image_and_exits_at_once() -> None:
    [pull] = _pod(_spares())["initContainers"]
    assert pull["image"] == IMAGE
    assert pull["command"] == list(PRE_PULL_COMMAND) == ["/bin/sh", "-c", "true"]
    assert pull["imagePullPolicy"] == "IfNotPresent"


def test_a_preempted_placeholder_leaves_at_once() -> None:
    assert _pod(_spares())["terminationGracePeriodSeconds"] == 0


def test_the_autoscalers_may_move_a_placeholder_and_karpenter_is_not_told_to_keep_it() -> None:
    annotations = _deployment(_spares())["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}


def test_every_placeholder_carries_the_warm_spare_label_and_no_target_class() -> None:
    deployment = _deployment(_spares())
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels[scheduling.WARM_SPARE_LABEL] == "true"
    assert scheduling.WARM_SPARE_LABEL == "spotproof.dev/warm-spare"
    assert scheduling.TARGET_CLASS_LABEL not in labels
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()


def test_a_new_template_replaces_placeholders_one_by_one_without_an_extra_node() -> None:
    strategy = _deployment(_spares())["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }


def test_pulumi_up_does_not_wait_for_the_spares_nodes() -> None:
    annotations = _deployment(_spares())["metadata"]["annotations"]
    assert annotations == {"pulumi.com/skipAwait": "true"}


def test_no_policy_flags_the_spares_in_a_restricted_namespace() -> None:
    recording = _spares(baseline=True)
    assert policy.evaluate(recording.resources, "1.33") == []


# --- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 65, -1, True])
def test_a_count_out_of_range_is_refused(count: Any) -> None:
    with pytest.raises(ValueError, match=r"count = .*; allowed: 1\.\.64 spares"):
        _spares(count=count)


@pytest.mark.parametrize("gpus", [0, -2])
def test_a_placeholder_without_gpus_is_refused(gpus: int) -> None:
    with pytest.raises(ValueError, match=r"gpus = .*; allowed: 1 or more"):
        _spares(gpus=gpus)


def test_the_system_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="targets the system pool"):
        _spares(TargetPlacement(PoolClass.SYSTEM))


def test_spot_work_preempts_so_a_spare_serves_a_spot_gang() -> None:
    # spotproof-spot-batch preempts what is below it: the placeholders; a class that is
    # Never could not (Kubernetes, "Non-preempting PriorityClass").
    assert scheduling.SPOT_BATCH_PRIORITY.preempts
    assert scheduling.SPOT_BATCH_PRIORITY.value > scheduling.WARM_SPARE_PRIORITY.value
    spot = TargetPlacement(PoolClass.SPOT_GPU, max_grace_seconds=15)
    [deployment] = _spares(spot).of_type(DEPLOYMENT)
    assert deployment.inputs["spec"]["replicas"] == 2


def test_a_pool_reached_only_through_a_queue_is_refused() -> None:
    queued = TargetPlacement(PoolClass.FLEX_START, queue=LocalQueueRef("ml", "flex"))
    with pytest.raises(ValueError, match="only through Kueue's queue flex"):
        _spares(queued)


@pytest.mark.parametrize(
    "image", ["ghcr.io/acme/llm-train", "ghcr.io/acme/llm-train:latest", "not an image"]
)
def test_an_image_that_is_not_pinned_is_refused(image: str) -> None:
    with pytest.raises(ValueError, match="allowed: an image with a tag other than latest"):
        _spares(image=image)


def test_a_digest_pins_the_image() -> None:
    digest = "ghcr.io/acme/llm-train@sha256:" + "a" * 64
    [pull] = _pod(_spares(image=digest))["initContainers"]
    assert pull["image"] == digest


def test_a_placement_of_another_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a TargetPlacement"):
        WarmSparesArgs(
            placement=scheduling.placement(PoolClass.ON_DEMAND_GPU),
            image=IMAGE,
            gpus=8,
            namespace="ml",
        )  # type: ignore[arg-type]
