"""Objects of a pinned controller are checked against the release the stack installs: a
field or value its CRD only accepts from a later release is reported, naming both."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from spotproof.catalog import aks as aks_catalog
from spotproof.plan import PlanResult
from spotproof.plan.simulation.controller_versions import check, values_at
from tests.support import STACKS, plan_of

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"


def _messages(plan: PlanResult, spec: Any = None) -> list[str]:
    return [v.message for v in check(spec or plan.spec, plan.recording)]


def _with_karpenter(plan: PlanResult, version: str) -> Any:
    karpenter = dataclasses.replace(plan.spec.platform.karpenter, version=version)
    platform = dataclasses.replace(plan.spec.platform, karpenter=karpenter)
    return dataclasses.replace(plan.spec, platform=platform)


def _gte(plan: PlanResult) -> None:
    pool = next(
        r for r in plan.recording.of_type(NODE_POOL) if r.name.endswith("gpu-spot-nodepool")
    )
    requirements = pool.inputs["spec"]["template"]["spec"]["requirements"]
    requirements.append(
        {"key": "karpenter.k8s.aws/instance-memory", "operator": "Gte", "values": ["16384"]}
    )


def test_the_stacks_as_shipped_use_nothing_their_releases_lack() -> None:
    for stack in STACKS:
        assert _messages(plan_of(stack)) == [], stack


def test_a_requirement_operator_newer_than_the_pinned_karpenter_is_reported() -> None:
    plan = plan_of("eks-dev")
    _gte(plan)
    [message] = _messages(plan, _with_karpenter(plan, "1.6.3"))
    assert message == (
        "NodePool gpu-spot: spec.template.spec.requirements[].operator Gte is accepted by "
        "Karpenter from 1.9.0 on, and the stack installs 1.6.3, whose CRD prunes it (or "
        "refuses the object under strict field validation); allowed: Karpenter 1.9.0 or "
        "later, or leave it out"
    )
    assert _messages(plan, _with_karpenter(plan, "1.9.0")) == []


def test_a_gpu_mode_older_nap_would_prune_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_of("aks-prod")
    monkeypatch.setattr(aks_catalog, "NAP_KARPENTER_VERSION", "1.10.0")
    messages = _messages(plan)
    assert messages and all(
        "spec.gpu is accepted by AKS node auto-provisioning" in m for m in messages
    )
    assert all("from 1.12.0 on, and the stack installs 1.10.0" in m for m in messages)


def test_a_keda_fallback_behaviour_newer_than_the_pinned_keda_is_reported() -> None:
    plan = plan_of("gke-dev")
    scaler = plan.recording.one(SCALED_OBJECT, "gke-dev-batch-scaler")
    scaler.inputs["spec"]["fallback"] = {
        "failureThreshold": 3,
        "replicas": 1,
        "behavior": "scalingModifiers",
    }
    keda = dataclasses.replace(plan.spec.keda, version="2.19.0")
    [message] = _messages(plan, dataclasses.replace(plan.spec, keda=keda))
    assert "spec.fallback.behavior scalingModifiers is accepted by KEDA from 2.20.0 on" in message


def test_a_cluster_queue_field_newer_than_the_pinned_kueue_is_reported() -> None:
    plan = plan_of("gke-prod")
    [queue] = plan.recording.of_type(CLUSTER_QUEUE)
    queue.inputs["spec"]["concurrentAdmissionPolicy"] = {}
    kueue = dataclasses.replace(plan.spec.kueue, version="0.17.8")
    [message] = _messages(plan, dataclasses.replace(plan.spec, kueue=kueue))
    assert "spec.concurrentAdmissionPolicy is accepted by Kueue from 0.18.0 on" in message
    assert _messages(plan) == []  # 0.19.2, the default


@pytest.mark.parametrize(
    ("path", "values"),
    [
        ("spec.a", [1]),
        ("spec.list[].b", [2, 3]),
        ("spec.list[].missing", []),
        ("spec.nope.b", []),
    ],
)
def test_values_are_found_through_lists(path: str, values: list[int]) -> None:
    obj = {"spec": {"a": 1, "list": [{"b": 2}, {"b": 3}, "x"]}}
    assert list(values_at(obj, path)) == values
