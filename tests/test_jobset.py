"""JobSet: the controller every cluster installs, pinned, on its system pool; the plan's
check of JobSet objects against the API's fields and webhook; gang pods seen by the
checks with the label the controller adds."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spotproof.fleet import SpecError, fleet_from_config
from spotproof.plan import check
from spotproof.plan.recording.manifests import schema_errors
from spotproof.plan.recording.recorder import Resource
from spotproof.plan.schemas.jobset import errors
from spotproof.policy.disruption import budget_valid_for_owner
from spotproof.scheduling import pod_templates
from tests.support import plan_of, stack_config

CHART = "kubernetes:helm.sh/v4:Chart"


def _chart(stack: str) -> dict[str, Any]:
    [chart] = [
        c for c in plan_of(stack).recording.of_type(CHART) if c.inputs.get("name") == "jobset"
    ]
    return chart.inputs


@pytest.mark.parametrize("stack", ["gke-dev", "eks-dev", "aks-dev"])
def test_every_cluster_installs_the_jobset_controller_pinned(stack: str) -> None:
    chart = _chart(stack)
    assert chart["chart"] == "oci://registry.k8s.io/jobset/charts/jobset"
    assert chart["version"] == "0.12.0"
    assert chart["namespace"] == "jobset-system"


@pytest.mark.parametrize("stack", ["gke-dev", "eks-dev", "aks-dev"])
def test_the_controller_runs_on_the_system_pool_only(stack: str) -> None:
    result = plan_of(stack)
    placements = {o.workload.label: [p.name for p in o.fits] for o in result.outcomes}
    system = [
        p.name for p in result.pools if p.shape.labels.get("spotproof.dev/pool-class") == "system"
    ]
    assert placements["Chart jobset-system/jobset"] == system
    assert result.violations == []


def test_a_stack_can_leave_jobset_out() -> None:
    config = {**stack_config("gke-dev"), "spotproof:jobset": {"enabled": False}}
    assert fleet_from_config("gke-dev", config).jobset is None


def test_an_unpublished_jobset_version_is_refused_in_one_line() -> None:
    config = {**stack_config("gke-dev"), "spotproof:jobset": {"version": "0.8.1"}}
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", config)
    assert str(raised.value) == (
        "spotproof:jobset.version = '0.8.1': not a published JobSet chart version (quote it in "
        "YAML); allowed: 0.10.1 to 0.12.0, e.g. 0.12.0"
    )


def test_a_jobset_whose_crd_lacks_the_message_patterns_is_refused_saying_why() -> None:
    config = {**stack_config("gke-dev"), "spotproof:jobset": {"version": "0.10.0"}}
    with pytest.raises(SpecError) as raised:
        fleet_from_config("gke-dev", config)
    assert str(raised.value).startswith(
        "spotproof:jobset.version = '0.10.0': its CRD has no "
        "failurePolicy.rules[].onJobFailureMessagePatterns"
    )
    assert str(raised.value).endswith("allowed: 0.10.1 to 0.12.0, e.g. 0.12.0")


# --- the JobSet API, offline ----------------------------------------------------------------

JOBSET: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "pretrain", "namespace": "ml"},
    "spec": {
        "failurePolicy": {
            "maxRestarts": 3,
            "rules": [
                {
                    "name": "ReclaimRestartsFree",
                    "action": "RestartJobSetAndIgnoreMaxRestarts",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                }
            ],
        },
        "replicatedJobs": [
            {
                "name": "workers",
                "replicas": 1,
                "template": {
                    "spec": {
                        "completions": 4,
                        "parallelism": 4,
                        "backoffLimit": 0,
                        "template": {
                            "metadata": {"labels": {"app": "pretrain"}},
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "trainer", "image": "acme/train:1"}],
                            },
                        },
                    }
                },
            }
        ],
    },
}


def _resource(type_: str, inputs: dict[str, Any], name: str = "pretrain") -> Resource:
    return Resource(type_, name, f"urn:pulumi:test::p::{type_}::{name}", None, True, inputs)


def _job_errors(job: dict[str, Any]) -> list[str]:
    return schema_errors(job, "1.33")


def _broken(change: Any) -> list[str]:
    obj = copy.deepcopy(JOBSET)
    change(obj["spec"])
    return errors(obj, _job_errors)


def test_a_valid_jobset_has_no_errors() -> None:
    assert errors(JOBSET, _job_errors) == []


def test_a_failure_reason_jobs_never_report_is_refused() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["failurePolicy"]["rules"][0]["onJobFailureReasons"] = ["Preempted"]

    [error] = _broken(change)
    assert error.startswith(
        "spec.failurePolicy.rules[0].onJobFailureReasons: 'Preempted' is not a Job failure reason"
    )


def test_a_rule_name_the_webhook_refuses_is_reported() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["failurePolicy"]["rules"][0]["name"] = "restart-on-reclaim"

    [error] = _broken(change)
    assert "rules[0].name: 'restart-on-reclaim' is not a rule name" in error


def test_an_alpha_only_action_is_refused() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["failurePolicy"]["rules"][0]["action"] = "RestartJob"

    [error] = _broken(change)
    assert error.startswith("spec.failurePolicy.rules[0].action: 'RestartJob' not allowed")


def test_the_replicated_jobs_template_is_checked_as_a_batch_job() -> None:
    def change(spec: dict[str, Any]) -> None:
        spec["replicatedJobs"][0]["template"]["spec"]["maxParallelism"] = 4

    [error] = _broken(change)
    assert error.startswith("spec.replicatedJobs[0].template.spec: ")
    assert "maxParallelism" in error


def test_pod_names_longer_than_a_dns_label_are_refused() -> None:
    obj = copy.deepcopy(JOBSET)
    obj["metadata"]["name"] = "x" * 50
    [error] = errors(obj, _job_errors)
    assert "pod name" in error and "longer than 63" in error


def test_a_broken_jobset_fails_the_plan_as_a_schema_violation() -> None:
    result = plan_of("gke-dev")
    recording = copy.deepcopy(result.recording)
    broken = copy.deepcopy(JOBSET)
    broken["spec"]["surprise"] = True
    recording.resources.append(_resource("kubernetes:jobset.x-k8s.io/v1alpha2:JobSet", broken))
    messages = [v.message for v in check(result.spec, recording).violations]
    assert any("JobSet/ml/pretrain: spec.surprise: unknown field" in m for m in messages)


# --- gang pods in the checks -----------------------------------------------------------------


def test_a_jobsets_pods_carry_the_labels_the_controllers_add() -> None:
    """JobSet v0.12.0 ``labelAndAnnotateObject`` and the Job API's ``generateSelector``:
    with one child Job, its index, key (SHA-1 of ``ml/pretrain-workers-0``) and name are
    known; the uids, the restart count and each pod's completion index are not."""
    [template] = pod_templates.pod_templates(JOBSET)
    assert template.part == "workers"
    assert template.pods == 4
    assert template.metadata["labels"] == {
        "app": "pretrain",
        "jobset.sigs.k8s.io/jobset-name": "pretrain",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        "jobset.sigs.k8s.io/global-replicas": "1",
        "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "1",
        "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/job-global-index": "0",
        "jobset.sigs.k8s.io/job-group-index": "0",
        "jobset.sigs.k8s.io/job-key": "86917cb639cb38756205185e4a98d8aa0d01f8a0",
        "job-name": "pretrain-workers-0",
        "batch.kubernetes.io/job-name": "pretrain-workers-0",
    }
    assert template.unknown_labels == {
        "jobset.sigs.k8s.io/jobset-uid",
        "jobset.sigs.k8s.io/restart-attempt",
        "controller-uid",
        "batch.kubernetes.io/controller-uid",
        "batch.kubernetes.io/job-completion-index",
    }


def test_a_percentage_budget_over_a_jobsets_pods_is_invalid() -> None:
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "pretrain", "namespace": "ml"},
        "spec": {
            "maxUnavailable": "25%",
            "selector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "pretrain"}},
        },
    }
    resources = [
        _resource("kubernetes:policy/v1:PodDisruptionBudget", budget, "pdb"),
        _resource("kubernetes:jobset.x-k8s.io/v1alpha2:JobSet", JOBSET),
    ]
    [(name, message)] = list(budget_valid_for_owner(resources))
    assert name == "pdb"
    assert "JobSet pretrain, which has no scale subresource" in message
