"""GPUs count only where something advertises them: AKS installs the driver alone, so its
clusters deploy NVIDIA's device plugin, and the plan takes the GPUs off every pool whose
nodes nothing advertises, reporting the pool."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.plan import PlanResult, check, run_plan
from spotproof.policy.pod_security import refused
from tests.support import plan_of, stack_config

pytestmark = pytest.mark.processes

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
NAMESPACE = "kubernetes:core/v1:Namespace"


def _plugin(plan: PlanResult) -> dict[str, Any]:
    [daemon_set] = plan.recording.of_type(DAEMON_SET)
    return daemon_set.inputs


def _violations(plan: PlanResult, policy: str) -> list[tuple[str, str]]:
    result = check(plan.spec, plan.recording)
    return [(v.resource, v.message) for v in result.violations if v.policy == policy]


@pytest.mark.parametrize("stack", ["aks-dev", "aks-prod"])
def test_aks_clusters_run_nvidias_device_plugin_on_every_gpu_node(stack: str) -> None:
    plan = plan_of(stack)
    pod = _plugin(plan)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.18.0"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["priorityClassName"] == "system-node-critical"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["matchExpressions"][0]["key"] for t in terms["nodeSelectorTerms"]] == [
        "kubernetes.azure.com/accelerator",
        "karpenter.azure.com/sku-gpu-manufacturer",
    ]
    # Exactly the GPU pools' taints: never a toleration of everything.
    assert all(t.get("key") for t in pod["tolerations"])
    assert {p.name for p in plan.pools if p.shape.gpus} <= {
        p.name for p in plan.pools if not _misfits(pod, p)
    }


def _misfits(pod: dict[str, Any], pool: Any) -> list[str]:
    from spotproof.scheduling import fit  # noqa: PLC0415

    return fit.misfits(pod, pool.shape)


def test_the_plugins_namespace_admits_its_host_path_and_nothing_stricter_would() -> None:
    plan = plan_of("aks-dev")
    [namespace] = [
        n
        for n in plan.recording.of_type(NAMESPACE)
        if n.inputs["metadata"]["name"] == "nvidia-device-plugin"
    ]
    assert namespace.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "privileged"
    )
    pod = _plugin(plan)["spec"]["template"]["spec"]
    assert "hostPath volume device-plugins" in refused("baseline", pod, {})
    assert plan.violations == []


@pytest.mark.parametrize(
    ("stack", "pools"),
    [("aks-dev", ["aks-dev-gpu-spota100", "aks-dev-gpu-spott4"]), ("aks-prod", None)],
)
def test_without_the_plugin_an_aks_gpu_pool_advertises_nothing(
    stack: str, pools: list[str] | None
) -> None:
    plan = plan_of(stack)
    plan.recording.resources.remove(plan.recording.one(DAEMON_SET, _daemon_set_name(plan)))
    found = _violations(plan, "gpu-advertised")
    if pools is not None:
        assert sorted(resource for resource, _ in found) == pools
    assert found and all(
        "that nothing advertises as nvidia.com/gpu (AKS installs the driver only" in message
        for _, message in found
    )
    # And so the GPU pods fit nowhere, as on the cluster they would stay Pending.
    assert _violations(plan, "scheduling-fit")


def _daemon_set_name(plan: PlanResult) -> str:
    [daemon_set] = plan.recording.of_type(DAEMON_SET)
    return daemon_set.name


def test_a_plugin_that_does_not_tolerate_aks_spot_taint_leaves_spot_pools_dark() -> None:
    plan = plan_of("aks-dev")
    pod = _plugin(plan)["spec"]["template"]["spec"]
    pod["tolerations"] = [
        t for t in pod["tolerations"] if t["key"] != "kubernetes.azure.com/scalesetpriority"
    ]
    found = _violations(plan, "gpu-advertised")
    assert sorted(r for r, _ in found) == ["aks-dev-gpu-spota100", "aks-dev-gpu-spott4"]


def test_a_gke_pool_whose_driver_gke_does_not_install_advertises_nothing() -> None:
    plan = plan_of("gke-dev")
    pool = plan.recording.one("gcp:container/nodePool:NodePool", "gke-dev-l4-spot")
    for accelerator in pool.inputs["nodeConfig"]["guestAccelerators"]:
        accelerator["gpuDriverInstallationConfig"] = {"gpuDriverVersion": "INSTALLATION_DISABLED"}
    [(resource, message)] = _violations(plan, "gpu-advertised")
    assert resource == "gke-dev-l4-spot"
    assert "GKE installs no driver" in message


def test_an_eks_nodepool_off_bottlerocket_needs_a_plugin_daemon_set() -> None:
    plan = plan_of("eks-dev")
    node_class = plan.recording.one(
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass", "eks-dev-karpenter-gpu-spot-nodeclass"
    )
    node_class.inputs["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest"}]
    [(resource, message)] = _violations(plan, "gpu-advertised")
    assert "gpu-spot" in resource and "its AMI is not Bottlerocket's" in message


def test_pools_left_to_the_gpu_operator_get_no_plugin_and_are_taken_as_advertised(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("aks-dev")
    for pool in config["spotproof:gpuPools"]:
        pool["gpuDriver"] = "None"
    plan = run_plan("aks-test", make_project(config, stack="aks-test"))
    assert plan.recording.of_type(DAEMON_SET) == []
    assert _violations(plan, "gpu-advertised") == []
    assert all(p.shape.gpus for p in plan.pools if p.name.startswith("spot"))
