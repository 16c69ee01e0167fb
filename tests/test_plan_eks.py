"""``spotproof plan`` on EKS stacks: the manifests it writes order node classes, pools and the
Job, Karpenter objects validate against Karpenter's published schemas, and NodePools take
part in the scheduling check as pools."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from spotproof import plan as spotproof_plan
from spotproof.plan import PlanResult
from spotproof.plan.simulation import nodes, workloads
from tests.support import REPO, run_cli, stack_config

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"


@pytest.mark.parametrize("stack", ["eks-dev", "eks-prod"])
def test_manifests_written_put_node_classes_before_pools_before_the_job(
    stack: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli(
        capsys, "plan", "--stack", stack, "--project-dir", str(REPO), "--out", str(tmp_path)
    )
    assert (code, err) == (0, "")
    kinds = [yaml.safe_load(p.read_text())["kind"] for p in sorted(tmp_path.glob("*.yaml"))]
    assert {"Job", "NodePool", "EC2NodeClass", "PriorityClass"} <= set(kinds)
    # Node classes before the pools that name them, both before the Job that needs nodes.
    assert kinds.index("EC2NodeClass") < kinds.index("NodePool") < kinds.index("Job")


def _schema_violations(plan: PlanResult) -> list[str]:
    result = spotproof_plan.check(plan.spec, plan.recording)
    return [v.message for v in result.violations if v.policy == "kubernetes-schema"]


def _node_pool(plan: PlanResult) -> dict:
    return plan.recording.one(NODE_POOL, "eks-dev-karpenter-gpu-spot-nodepool").inputs


def _node_class(plan: PlanResult) -> dict:
    return plan.recording.one(NODE_CLASS, "eks-dev-karpenter-gpu-spot-nodeclass").inputs


def test_misspelt_node_pool_field_fails_karpenter_schema(eks_dev: PlanResult) -> None:
    template = _node_pool(eks_dev)["spec"]["template"]["spec"]
    template["requirments"] = template.pop("requirements")
    messages = _schema_violations(eks_dev)
    assert any("/spec/template/spec/requirments: unknown field" in m for m in messages), messages
    assert any("missing required field requirements" in m for m in messages), messages


def test_unknown_requirement_operator_fails_karpenter_schema(eks_dev: PlanResult) -> None:
    _node_pool(eks_dev)["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Equals"
    [message] = _schema_violations(eks_dev)
    assert message.startswith("NodePool/gpu-spot: /spec/template/spec/requirements/0/operator")
    assert message.endswith("must be one of DoesNotExist, Exists, Gt, In, Lt, NotIn")


def test_wrong_enum_in_node_class_fails_karpenter_schema(eks_dev: PlanResult) -> None:
    _node_class(eks_dev)["spec"]["blockDeviceMappings"][1]["ebs"]["volumeType"] = "gp4"
    [message] = _schema_violations(eks_dev)
    assert "EC2NodeClass/gpu-spot: /spec/blockDeviceMappings/1/ebs/volumeType" in message


def test_days_are_not_a_karpenter_duration(eks_dev: PlanResult) -> None:
    _node_pool(eks_dev)["spec"]["template"]["spec"]["expireAfter"] = "30d"
    [message] = _schema_violations(eks_dev)
    assert "/spec/template/spec/expireAfter: must match pattern" in message


def test_karpenter_cel_rules_the_npm_schemas_omit_are_checked(eks_dev: PlanResult) -> None:
    node_class = _node_class(eks_dev)["spec"]
    node_class["amiSelectorTerms"] = [{"alias": "bottlerocket"}]
    node_class["instanceProfile"] = "also-a-profile"
    node_class["tags"]["eks:eks-cluster-name"] = "other"
    budgets = _node_pool(eks_dev)["spec"]["disruption"]["budgets"]
    budgets.append({"nodes": "0", "schedule": "@daily"})
    messages = _schema_violations(eks_dev)
    assert any("alias 'bottlerocket' is not family@version" in m for m in messages), messages
    assert any("exactly one of role and instanceProfile" in m for m in messages), messages
    assert any("eks:eks-cluster-name: reserved for Karpenter" in m for m in messages), messages
    assert any("schedule and duration go together" in m for m in messages), messages


def test_karpenter_node_pool_becomes_a_pool_with_its_guaranteed_labels_taints_and_gpus(
    eks_dev: PlanResult,
) -> None:
    shapes = {shape.pool: shape for shape in nodes.shapes_of(eks_dev.recording)}
    assert sorted(shapes) == ["gpu-on-demand", "gpu-spot", "system"]
    spot = shapes["gpu-spot"]
    assert spot.labels["spotproof.dev/pool-class"] == "spot-gpu"
    assert spot.labels["karpenter.sh/nodepool"] == "gpu-spot"
    assert spot.labels["karpenter.sh/capacity-type"] == "spot"
    assert spot.gpus == 1 and spot.spot
    assert spot.choices["karpenter.k8s.aws/instance-gpu-name"] == {"l4", "a10g", "l40s"}
    assert "g6e.2xlarge" in spot.choices["node.kubernetes.io/instance-type"]
    assert "g6e.12xlarge" not in spot.choices["node.kubernetes.io/instance-type"]
    assert not shapes["gpu-on-demand"].spot
    assert shapes["system"].labels["eks.amazonaws.com/nodegroup"] == "system"


def _with_gpu_model(plan: PlanResult, model: str) -> list[str]:
    job = plan.recording.one("kubernetes:batch/v1:Job", "eks-dev-smoke-job").inputs
    job["spec"]["template"]["spec"]["nodeSelector"] = {"karpenter.k8s.aws/instance-gpu-name": model}
    return [v.message for v in spotproof_plan.check(plan.spec, plan.recording).violations]


def test_job_asking_for_a_gpu_model_both_pools_offer_fits(eks_dev: PlanResult) -> None:
    assert _with_gpu_model(eks_dev, "l4") == []


def test_job_whose_gpu_model_the_fallback_lacks_is_told_its_fallback_is_empty(
    eks_dev: PlanResult,
) -> None:
    [message] = _with_gpu_model(eks_dev, "l40s")
    assert message.startswith("Job spotproof/spotproof-smoke fits no pool of class on-demand-gpu")


def test_job_asking_for_a_gpu_model_no_pool_offers_fits_nowhere(eks_dev: PlanResult) -> None:
    messages = _with_gpu_model(eks_dev, "h100")
    assert [m.split(":")[0] for m in messages] == [
        "Job spotproof/spotproof-smoke fits no pool of class spot-gpu",
        "Job spotproof/spotproof-smoke fits no pool of class on-demand-gpu",
    ]


def test_karpenter_controller_and_coredns_fit_only_the_system_node_group(
    eks_dev: PlanResult,
) -> None:
    fits = workloads.placements(eks_dev.recording, eks_dev.nodes)
    assert fits["Chart kube-system/karpenter"] == ["system"]
    assert fits["Deployment kube-system/coredns"] == ["system"]
    assert fits["Pod kube-system/reference-add-on"] == ["system"]
    assert fits["Job spotproof/spotproof-smoke"] == ["gpu-on-demand", "gpu-spot"]


def test_node_pool_with_a_taint_the_smoke_job_does_not_tolerate_exits_1(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = stack_config("eks-dev")
    config["spotproof:gpuPools"][0]["extraTaints"] = ["team=research:NoSchedule"]
    root = make_project(config, stack="eks-test")

    code, out, err = run_cli(capsys, "plan", "--stack", "eks-test", "--project-dir", str(root))

    assert (code, err) == (1, "")
    assert "[scheduling-fit] eks-test-smoke-job" in out
    assert "fits no pool of class spot-gpu" in out
    assert "gpu-spot: taint team=research:NoSchedule not tolerated" in out
