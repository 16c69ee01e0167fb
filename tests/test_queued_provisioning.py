"""Queued flex-start: Kueue and a ProvisioningRequest queue on stacks with a queued pool,
TrainingJobs submitted to it, and the plan following every workload's route through Kueue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.fleet import SpecError, fleet_from_config
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.schemas import kueue
from spotproof.plan.simulation import admission
from tests.support import plan_of, run_cli, stack_config

KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:"
CHART = "kubernetes:helm.sh/v4:Chart"


@pytest.fixture(scope="module")
def gke_prod() -> Recording:
    return plan_of("gke-prod").recording


def _kueue(recording: Recording, kind: str) -> dict[str, Any]:
    [obj] = recording.of_type(KUEUE + kind)
    return obj.inputs


# --- what a stack with a queued pool builds ----------------------------------------------


def test_kueue_is_installed_pinned_on_the_system_pool_where_a_pool_is_queued(
    gke_prod: Recording,
) -> None:
    [chart] = [c for c in gke_prod.of_type(CHART) if c.inputs["name"] == "kueue"]
    assert chart.inputs["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert chart.inputs["version"] == "0.19.2"
    assert chart.inputs["namespace"] == "kueue-system"
    placement = chart.inputs["values"]["controllerManager"]
    assert placement["nodeSelector"] == {"spotproof.dev/pool-class": "system"}
    assert placement["tolerations"][0]["key"] == "components.gke.io/gke-managed-components"


def test_stacks_without_a_queued_pool_get_no_kueue() -> None:
    recording = plan_of("gke-dev").recording
    assert not [c for c in recording.of_type(CHART) if c.inputs["name"] == "kueue"]
    assert not [r for r in recording.resources if r.type.startswith(KUEUE)]


def test_the_queue_asks_gke_for_queued_provisioning_of_gpus_pinned_to_their_own_request(
    gke_prod: Recording,
) -> None:
    config = _kueue(gke_prod, "ProvisioningRequestConfig")["spec"]
    assert config["provisioningClassName"] == "queued-provisioning.gke.io"
    assert config["managedResources"] == ["nvidia.com/gpu"]
    assert config["podSetUpdates"]["nodeSelector"] == [
        {
            "key": "autoscaling.gke.io/provisioning-request",
            "valueFromProvisioningClassDetail": "ResizeRequestName",
        }
    ]
    check = _kueue(gke_prod, "AdmissionCheck")["spec"]
    assert check["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["parameters"]["name"] == "h100-flex"


def test_the_cluster_queue_holds_the_pool_at_its_maximum_and_admits_only_the_trainers(
    gke_prod: Recording,
) -> None:
    spec = _kueue(gke_prod, "ClusterQueue")["spec"]
    [group] = spec["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    # h100-flex: a3-highgpu-8g (208 vCPU, 1872 GB, 8 GPUs), 4 nodes in each of 3 zones.
    assert group["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "2496"},
        {"name": "memory", "nominalQuota": "22464G"},
        {"name": "nvidia.com/gpu", "nominalQuota": "96"},
    ]
    assert spec["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "spotproof"}
    }
    assert spec["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": "h100-flex-provisioning", "onFlavors": ["h100-flex"]}
    ]
    local = _kueue(gke_prod, "LocalQueue")
    assert local["metadata"]["namespace"] == "spotproof"
    assert local["spec"] == {"clusterQueue": "h100-flex"}


def test_kueue_asked_for_on_a_stack_without_a_queued_pool_is_refused_in_one_line() -> None:
    config = {**stack_config("gke-dev"), "spotproof:kueue": {"enabled": True}}
    with pytest.raises(SpecError, match=r"spotproof:kueue\.enabled.*has none.*allowed"):
        fleet_from_config("gke-dev", config)


def test_kueue_can_be_left_out_of_a_stack_with_a_queued_pool() -> None:
    config = {**stack_config("gke-prod"), "spotproof:kueue": {"enabled": False}}
    assert fleet_from_config("gke-prod", config).kueue is None


# --- a user's TrainingJob aimed at the queued pool ---------------------------------------

PROGRAM = """
import pulumi
from spotproof.kube import TrainingJob, TrainingJobArgs
from spotproof.kube.training import Trainer
from spotproof.program import hybrid_cluster, stack_config
from spotproof.fleet import PoolClass, fleet_from_config

spec = fleet_from_config(pulumi.get_stack(), stack_config())
cluster = hybrid_cluster(spec)
TrainingJob(
    "llm-pretrain",
    TrainingJobArgs(
        trainer=Trainer(image="ghcr.io/acme/llm:2.0", command=("python", "train.py"), gpus=8,
                        cpu="100", memory="900Gi"),
        placement=cluster.placement(PoolClass.FLEX_START),
        identity=cluster.workload_identity,
        checkpoint_url=cluster.bucket.url.apply(lambda url: url + "/checkpoints/pretrain"),
        nodes=NODES,
        controllers=cluster.controllers,
    ),
    opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster.baseline]),
)
"""


def _plan(
    make_project: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    nodes: int,
    config: dict[str, Any] | None = None,
) -> tuple[int, str]:
    program = PROGRAM.replace("NODES", str(nodes))
    root = make_project(config or stack_config("gke-prod"), stack="gke-prod", program=program)
    code, out, _ = run_cli(capsys, "plan", "--stack", "gke-prod", "--project-dir", str(root))
    return code, out


@pytest.mark.parametrize(
    ("nodes", "label"),
    [(1, "Job spotproof/llm-pretrain"), (4, "JobSet spotproof/llm-pretrain/workers")],
)
def test_a_training_job_aimed_at_the_queued_pool_gets_nodes_through_its_queue(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str], nodes: int, label: str
) -> None:
    code, out = _plan(make_project, capsys, nodes)
    assert code == 0, out
    assert (
        f"  {label}: gets nodes from h100-flex (GKE cluster autoscaler, 0-4 nodes per zone in "
        "us-central1-a, us-central1-b, us-central1-c, queued through queue h100-flex -> "
        "ClusterQueue h100-flex (ProvisioningRequest queued-provisioning.gke.io))"
    ) in out


def test_without_kueue_a_job_aimed_at_the_queued_pool_fails_the_plan_naming_the_label(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = {**stack_config("gke-prod"), "spotproof:kueue": {"enabled": False}}
    code, out = _plan(make_project, capsys, 1, config)
    assert code == 1
    assert (
        "[scale-up] llm-pretrain-job: Job spotproof/llm-pretrain fits pools of class "
        "flex-start but none would get a node for it: h100-flex: queued-provisioning pool: "
        "nodes come only through a ProvisioningRequest, and the workload is in no Kueue queue "
        "(no kueue.x-k8s.io/queue-name label)"
    ) in out


def test_a_gang_beyond_the_queues_quota_is_never_admitted(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _plan(make_project, capsys, 13)
    assert code == 1
    assert (
        "[queue-admission] llm-pretrain-jobset: JobSet spotproof/llm-pretrain/workers is "
        "submitted to queue h100-flex -> ClusterQueue h100-flex (ProvisioningRequest "
        "queued-provisioning.gke.io), which would never admit it: 13 pod(s) at once need "
        "104 nvidia.com/gpu (quota 96) in flavor h100-flex of ClusterQueue h100-flex"
    ) in out


# --- the route through Kueue, step by step -----------------------------------------------

POD = {
    "containers": [
        {
            "name": "main",
            "resources": {
                "requests": {"cpu": "4", "memory": "16Gi"},
                "limits": {"nvidia.com/gpu": "8"},
            },
        }
    ]
}


def _objects(**changes: Any) -> admission.KueueObjects:
    """The chain spotproof builds for a pool ``flex``, with ``changes`` (kind -> spec
    update, or None to leave the object out)."""
    specs: dict[str, tuple[str, dict[str, Any]]] = {
        "ResourceFlavor": ("flex", {"nodeLabels": {"spotproof.dev/pool-class": "flex-start"}}),
        "ProvisioningRequestConfig": (
            "flex",
            {
                "provisioningClassName": "queued-provisioning.gke.io",
                "managedResources": ["nvidia.com/gpu"],
            },
        ),
        "AdmissionCheck": (
            "flex-provisioning",
            {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "ProvisioningRequestConfig",
                    "name": "flex",
                },
            },
        ),
        "ClusterQueue": (
            "flex",
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml"}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "flex",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100"},
                                    {"name": "memory", "nominalQuota": "1000Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "32"},
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": "flex-provisioning"}]},
            },
        ),
        "LocalQueue": ("flex", {"clusterQueue": "flex"}),
    }
    objects = []
    for kind, (name, spec) in specs.items():
        change = changes.get(kind, {})
        if change is None:
            continue
        metadata = {"name": name, **({"namespace": "ml"} if kind == "LocalQueue" else {})}
        obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": metadata}
        objects.append({**obj, "spec": {**spec, **change}})
    return admission.KueueObjects(objects, {})


def _route(
    objects: admission.KueueObjects, pods: int = 1, namespace: str = "ml"
) -> admission.Route:
    return admission.route(objects, "flex", namespace, POD, pods)


def test_a_complete_chain_admits_and_provisions_through_gkes_queued_class() -> None:
    route = _route(_objects())
    assert route.problems == ()
    assert route.provisioning_classes == ("queued-provisioning.gke.io",)


@pytest.mark.parametrize(
    ("changes", "namespace", "pods", "problem"),
    [
        ({"LocalQueue": None}, "ml", 1, "no LocalQueue flex in namespace ml"),
        ({}, "research", 1, "no LocalQueue flex in namespace research"),
        ({"ClusterQueue": None}, "ml", 1, "LocalQueue flex names no ClusterQueue flex"),
        (
            {"ClusterQueue": {"namespaceSelector": None}},
            "ml",
            1,
            "ClusterQueue flex has no namespaceSelector, which admits no namespace",
        ),
        (
            {"ClusterQueue": {"namespaceSelector": {"matchLabels": {"team": "infra"}}}},
            "ml",
            1,
            "ClusterQueue flex's namespaceSelector does not select ml",
        ),
        (
            {"AdmissionCheck": None},
            "ml",
            1,
            "AdmissionCheck flex-provisioning does not exist (the queue is inactive)",
        ),
        (
            {"ProvisioningRequestConfig": None},
            "ml",
            1,
            "AdmissionCheck flex-provisioning names no ProvisioningRequestConfig that exists",
        ),
        (
            {"ResourceFlavor": None},
            "ml",
            1,
            "ResourceFlavor flex does not exist (the queue is inactive)",
        ),
        (
            {},
            "ml",
            5,
            "5 pod(s) at once need 40 nvidia.com/gpu (quota 32) in flavor flex of "
            "ClusterQueue flex",
        ),
    ],
)
def test_each_broken_step_of_the_chain_is_named(
    changes: dict[str, Any], namespace: str, pods: int, problem: str
) -> None:
    objects = _objects(**changes)
    if namespace != "ml":
        assert problem in _route(objects, namespace=namespace).problems
        return
    assert any(p.startswith(problem) for p in _route(objects, pods).problems), _route(objects, pods)


def test_a_resource_the_queue_does_not_cover_blocks_admission() -> None:
    group = {
        "coveredResources": ["cpu", "memory"],
        "flavors": [
            {
                "name": "flex",
                "resources": [
                    {"name": "cpu", "nominalQuota": "100"},
                    {"name": "memory", "nominalQuota": "1000Gi"},
                ],
            }
        ],
    }
    route = _route(_objects(ClusterQueue={"resourceGroups": [group]}))
    assert route.problems == (
        "ClusterQueue flex does not cover nvidia.com/gpu, and Kueue admits nothing that "
        "requests an undeclared resource",
    )


def test_only_jobs_and_jobsets_are_managed_by_the_queue_label() -> None:
    labels = {"kueue.x-k8s.io/queue-name": "flex"}
    assert admission.queue_name("Job", labels) == "flex"
    assert admission.queue_name("JobSet", labels) == "flex"
    assert admission.queue_name("Deployment", labels) is None


# --- Kueue's objects as its API server checks them ---------------------------------------


def test_spotprooofs_own_kueue_objects_pass_the_api_checks(gke_prod: Recording) -> None:
    for resource in gke_prod.resources:
        if resource.type.startswith(KUEUE):
            assert kueue.errors(resource.inputs) == [], resource.name


def test_a_flavor_listing_resources_out_of_order_is_refused() -> None:
    [cluster_queue] = [o for k, o in _objects().by_kind["ClusterQueue"].items()]
    flavor = cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["resources"].reverse()
    [error] = kueue.errors(cluster_queue)
    assert error.startswith("spec.resourceGroups[0].flavors[0].resources: lists ['nvidia.com/gpu'")
    assert "in the same order" in error


def test_unknown_fields_and_the_deprecated_api_are_refused() -> None:
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "spec": {"queue": "x"}}
    assert kueue.errors(local) == [
        "spec.queue: unknown field (allowed: clusterQueue, fairSharing, stopPolicy)",
        "spec.clusterQueue: required",
    ]
    old = {**local, "apiVersion": "kueue.x-k8s.io/v1beta1"}
    assert kueue.errors(old) == [
        "apiVersion: 'kueue.x-k8s.io/v1beta1' not checked (use kueue.x-k8s.io/v1beta2)"
    ]


def test_a_kueue_that_does_not_serve_v1beta2_is_refused_saying_why() -> None:
    config = {**stack_config("gke-prod"), "spotproof:kueue": {"version": "0.14.8"}}
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-prod", config)
    assert str(raised.value) == (
        "spotproof:kueue.version = '0.14.8': serves kueue.x-k8s.io/v1beta1 only, and "
        "spotproof's queue objects are v1beta2, first served in 0.15.0: every one of them "
        "would be refused; allowed: 0.15.0 to 0.19.2, e.g. 0.19.2"
    )
