"""Batch work on a stack (``spotproof:batch``): each cloud's work queue, the identities that
touch it, the workers' Deployment and KEDA, as the offline plan renders them; and the
plan's checks failing, naming the resource, for each way a queue or a scaler would
silently lose or strand work."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof import policy
from spotproof.catalog.aks import BLOB_ACTION, CHANGING_ACTIONS
from spotproof.fleet import SpecError, fleet_from_config
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.recording.recorder import Resource
from spotproof.plan.schemas import keda
from tests.support import plan_of, stack_config

SUBSCRIPTION = "gcp:pubsub/subscription:Subscription"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
TRIGGER_AUTH = "kubernetes:keda.sh/v1alpha1:TriggerAuthentication"
CHART = "kubernetes:helm.sh/v4:Chart"


def _inputs(plan: PlanResult, type_: str, name: str) -> dict[str, Any]:
    return plan.recording.one(type_, name).inputs


def _all(plan: PlanResult, type_: str) -> list[dict[str, Any]]:
    return [r.inputs for r in plan.recording.of_type(type_)]


def _env(plan: PlanResult, name: str) -> dict[str, str]:
    pod = _inputs(plan, DEPLOYMENT, name)["spec"]["template"]["spec"]
    return {e["name"]: e["value"] for e in pod["containers"][0]["env"]}


def _violations(plan: PlanResult, rule: str) -> list[tuple[str, str]]:
    return [
        (v.resource, v.message)
        for v in policy.evaluate(plan.recording.resources)
        if v.policy == rule
    ]


# --- GKE: Pub/Sub ------------------------------------------------------------------------


def test_the_gke_work_subscription_is_exactly_once_and_dead_letters_to_a_kept_topic(
    gke_dev: PlanResult,
) -> None:
    work = _inputs(gke_dev, SUBSCRIPTION, "gke-dev-work-subscription")
    assert work["topic"] == "projects/spotproof-dev/topics/gke-dev-work"
    assert (work["ackDeadlineSeconds"], work["enableExactlyOnceDelivery"]) == (60, True)
    assert work["deadLetterPolicy"] == {
        "deadLetterTopic": "projects/spotproof-dev/topics/gke-dev-work-dead",
        "maxDeliveryAttempts": 5,
    }
    assert work["expirationPolicy"] == {"ttl": ""}
    dead = _inputs(gke_dev, SUBSCRIPTION, "gke-dev-work-dead-subscription")
    assert dead["topic"] == "projects/spotproof-dev/topics/gke-dev-work-dead"
    assert dead["messageRetentionDuration"] == "2678400s"


def test_the_pubsub_service_agent_may_forward_dead_letters(gke_dev: PlanResult) -> None:
    agent = "serviceAccount:service-123456789012@gcp-sa-pubsub.iam.gserviceaccount.com"
    topic = _inputs(
        gke_dev,
        "gcp:pubsub/topicIAMMember:TopicIAMMember",
        "gke-dev-work-agent-publishes-dead-letters",
    )
    assert (topic["topic"], topic["role"], topic["member"]) == (
        "gke-dev-work-dead",
        "roles/pubsub.publisher",
        agent,
    )
    forwards = _inputs(
        gke_dev,
        "gcp:pubsub/subscriptionIAMMember:SubscriptionIAMMember",
        "gke-dev-work-agent-forwards",
    )
    assert (forwards["subscription"], forwards["role"], forwards["member"]) == (
        "gke-dev-work",
        "roles/pubsub.subscriber",
        agent,
    )


def test_the_gke_worker_consumes_one_subscription_and_touches_only_its_results_prefix(
    gke_dev: PlanResult,
) -> None:
    worker = "serviceAccount:gke-dev-batch@spotproof-dev.iam.gserviceaccount.com"
    grants = [
        g
        for type_ in (
            "gcp:pubsub/subscriptionIAMMember:SubscriptionIAMMember",
            "gcp:storage/bucketIAMMember:BucketIAMMember",
            "gcp:projects/iAMMember:IAMMember",
        )
        for g in _all(gke_dev, type_)
        if g["member"] == worker
    ]
    bucket = "projects/_/buckets/spotproof-dev-gke-dev-checkpoints"
    objects = f'resource.name.startsWith("{bucket}/objects/results/")'
    assert sorted((g["role"], (g.get("condition") or {}).get("expression")) for g in grants) == [
        ("roles/pubsub.subscriber", None),
        ("roles/storage.objectCreator", objects),
        (
            "roles/storage.objectViewer",
            f'{objects} || (resource.name == "{bucket}" && '
            'api.getAttribute("storage.googleapis.com/objectListPrefix", "")'
            '.startsWith("results/"))',
        ),
    ]


def test_keda_reads_the_pubsub_backlog_as_its_own_workload_identity(gke_dev: PlanResult) -> None:
    values = _inputs(gke_dev, CHART, "gke-dev-keda-chart")["values"]
    assert values["podIdentity"] == {
        "gcp": {
            "enabled": True,
            "gcpIAMServiceAccount": "gke-dev-keda@spotproof-dev.iam.gserviceaccount.com",
        }
    }
    assert values["webhooks"] == {"failurePolicy": "Fail"}
    metrics = _inputs(
        gke_dev, "gcp:projects/iAMMember:IAMMember", "gke-dev-work-keda-reads-metrics"
    )
    assert metrics["role"] == "roles/monitoring.viewer"
    binding = _inputs(
        gke_dev, "gcp:serviceaccount/iAMMember:IAMMember", "gke-dev-work-keda-workload-identity"
    )
    assert binding["member"] == "serviceAccount:spotproof-dev.svc.id.goog[keda/keda-operator]"
    assert _inputs(gke_dev, TRIGGER_AUTH, "gke-dev-batch-trigger-auth")["spec"] == {
        "podIdentity": {"provider": "gcp"}
    }


# --- EKS: SQS ------------------------------------------------------------------------------


def test_the_sqs_work_queue_is_encrypted_tls_only_and_dead_letters_after_max_deliveries(
    eks_dev: PlanResult,
) -> None:
    queue = _inputs(eks_dev, "aws:sqs/queue:Queue", "eks-dev-work-queue")
    dead = _inputs(eks_dev, "aws:sqs/queue:Queue", "eks-dev-work-dead")
    assert json.loads(queue["redrivePolicy"]) == {
        "deadLetterTargetArn": "arn:aws:sqs:us-west-2:123456789012:eks-dev-work-dead",
        "maxReceiveCount": 5,
    }
    assert queue["sqsManagedSseEnabled"] and dead["sqsManagedSseEnabled"]
    assert (queue["visibilityTimeoutSeconds"], queue["messageRetentionSeconds"]) == (60, 7 * 86400)
    assert dead["messageRetentionSeconds"] == 14 * 86400
    policies = _all(eks_dev, "aws:sqs/queuePolicy:QueuePolicy")
    tls = [
        p["queueUrl"].rsplit("/", 1)[1]
        for p in policies
        if json.loads(p["policy"])["Statement"][-1].get("Condition")
        == {"Bool": {"aws:SecureTransport": "false"}}
    ]
    assert {"eks-dev-work", "eks-dev-work-dead"} <= set(tls)
    allow = _inputs(
        eks_dev, "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy", "eks-dev-work-dead-admits-work"
    )
    assert json.loads(allow["redriveAllowPolicy"]) == {
        "redrivePermission": "byQueue",
        "sourceQueueArns": ["arn:aws:sqs:us-west-2:123456789012:eks-dev-work"],
    }


def test_the_eks_worker_role_consumes_one_queue_and_never_deletes_results(
    eks_dev: PlanResult,
) -> None:
    document = json.loads(
        _inputs(eks_dev, "aws:iam/rolePolicy:RolePolicy", "eks-dev-work-worker-policy")["policy"]
    )
    by_sid = {s["Sid"]: s for s in document["Statement"]}
    assert (
        by_sid["ConsumeWorkQueue"]["Resource"] == "arn:aws:sqs:us-west-2:123456789012:eks-dev-work"
    )
    assert "sqs:ReceiveMessage" in by_sid["ConsumeWorkQueue"]["Action"]
    assert by_sid["ReadCreateResults"]["Action"] == ["s3:GetObject", "s3:PutObject"]
    assert by_sid["ReadCreateResults"]["Resource"] == (
        "arn:aws:s3:::spotproof-eks-dev-checkpoints-usw2/results/*"
    )
    assert by_sid["ListResultsPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["results/*"]}}
    associations = {
        (a["namespace"], a["serviceAccount"]): a["roleArn"]
        for a in _all(eks_dev, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    assert associations[("spotproof", "batch-worker")].endswith(":role/eks-dev-batch")
    assert associations[("keda", "keda-operator")].endswith(":role/eks-dev-keda")
    keda_policy = json.loads(
        _inputs(eks_dev, "aws:iam/rolePolicy:RolePolicy", "eks-dev-work-keda-policy")["policy"]
    )
    assert [s["Action"] for s in keda_policy["Statement"]] == ["sqs:GetQueueAttributes"]


# --- AKS: storage queues -------------------------------------------------------------------


def test_the_aks_worker_holds_one_queue_its_poison_queue_and_a_path_limited_container(
    aks_dev: PlanResult,
) -> None:
    assignments = [
        a
        for r in aks_dev.recording.of_type("azure-native:authorization:RoleAssignment")
        if r.name.startswith("aks-dev-work-worker-")
        for a in [r.inputs]
    ]
    scopes = sorted(
        (a["roleDefinitionId"].rsplit("/", 1)[1], a["scope"].rsplit("/", 2)[1:])
        for a in assignments
    )
    assert scopes == [
        ("974c5e8b-45b9-4653-ba55-5f855dd0fb88", ["queues", "aks-dev-work"]),
        ("ba92f5b4-2d11-453d-a403-e96b0029c9fe", ["containers", "spotproof"]),
        ("c6a89b2d-59bc-44d0-9896-0f6e12d7b80a", ["queues", "aks-dev-work-poison"]),
    ]
    [blob] = [a for a in assignments if a.get("condition")]
    assert blob["conditionVersion"] == "2.0"
    assert "blobs:path] StringStartsWith 'results/'" in blob["condition"]
    assert "blobs/delete'}" in blob["condition"]


def test_keda_reads_the_storage_queue_as_its_own_federated_identity(aks_dev: PlanResult) -> None:
    values = _inputs(aks_dev, CHART, "aks-dev-keda-chart")["values"]["podIdentity"]
    assert values["azureWorkload"]["enabled"] and values["azureWorkload"]["clientId"]
    federation = _inputs(
        aks_dev,
        "azure-native:managedidentity:FederatedIdentityCredential",
        "aks-dev-work-keda-federation",
    )
    assert federation["subject"] == "system:serviceaccount:keda:keda-operator"
    reader = _inputs(
        aks_dev, "azure-native:authorization:RoleAssignment", "aks-dev-work-keda-reads-queue"
    )
    assert reader["roleDefinitionId"].endswith("19e7f393-937e-4f77-808e-94535e297925")
    assert reader["scope"].endswith("/queues/aks-dev-work")


# --- the workers ---------------------------------------------------------------------------


def test_workers_run_on_spot_with_the_preemption_paths_grace(gke_dev: PlanResult) -> None:
    deployment = _inputs(gke_dev, DEPLOYMENT, "gke-dev-batch-deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"spotproof.dev/pool-class": "spot-gpu"}
    assert (pod["terminationGracePeriodSeconds"], pod["priorityClassName"]) == (
        15,
        "spotproof-spot-batch",
    )
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert _env(gke_dev, "gke-dev-batch-deployment") == {
        "QUEUE_URL": "pubsub://spotproof-dev/gke-dev-work",
        "RESULTS_URL": "gs://spotproof-dev-gke-dev-checkpoints/results",
        "GRACE_SECONDS": "15",
        "LEASE_SECONDS": "60",
        "BATCH_SIZE": "4",
        "MAX_DELIVERIES": "5",
        "PROGRESS_SECONDS": "30",
    }
    scaled = _inputs(gke_dev, SCALED_OBJECT, "gke-dev-batch-scaler")["spec"]
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (0, 8)
    assert scaled["triggers"][0]["metadata"] == {
        "subscriptionName": "gke-dev-work",
        "mode": "SubscriptionSize",
        "value": "10",
    }


def test_workers_start_at_zero_and_leave_their_count_to_keda(gke_dev: PlanResult) -> None:
    # Left out, replicas defaults to 1: one GPU worker before KEDA first scales it.
    deployment = gke_dev.recording.one(DEPLOYMENT, "gke-dev-batch-deployment")
    assert deployment.inputs["spec"]["replicas"] == 0
    assert deployment.ignore_changes == ("spec.replicas",)


def test_workers_carry_no_disruption_budget(gke_dev: PlanResult) -> None:
    budgets = _all(gke_dev, "kubernetes:policy/v1:PodDisruptionBudget")
    assert all("batch" not in b["metadata"]["name"] for b in budgets)


@pytest.mark.parametrize(
    ("stack", "environment"),
    [
        ("eks-dev", {"QUEUE_URL": "sqs://eks-dev-work", "AWS_REGION": "us-west-2"}),
        ("aks-dev", {"QUEUE_URL": "azqueue://aks-dev-work?max_deliveries=5&ttl_days=7"}),
    ],
)
def test_each_clouds_workers_are_told_their_queue(stack: str, environment: dict[str, str]) -> None:
    env = _env(plan_of(stack), f"{stack}-batch-deployment")
    assert environment.items() <= env.items()


def test_without_keda_min_workers_run_and_nothing_scales_them(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("gke-dev")
    config["spotproof:batch"] = {"minWorkers": 2}
    config["spotproof:keda"] = {"enabled": False}
    plan = run_plan("gke-test", make_project(config))
    [deployment] = _all(plan, DEPLOYMENT)
    assert deployment["spec"]["replicas"] == 2
    assert _all(plan, SCALED_OBJECT) == []
    assert all(c["chart"] != "keda" for c in _all(plan, CHART))
    assert plan.violations == []


def test_a_stack_without_batch_declares_no_queue_and_no_keda(gke_prod: PlanResult) -> None:
    types = {r.type for r in gke_prod.recording.resources}
    assert SUBSCRIPTION not in types and SCALED_OBJECT not in types


# --- the plan's KEDA checks ----------------------------------------------------------------


def _drop(plan: PlanResult, type_: str, name: str) -> None:
    plan.recording.resources.remove(plan.recording.one(type_, name))


def test_a_scaled_object_without_keda_installed_is_reported(gke_dev: PlanResult) -> None:
    _drop(gke_dev, CHART, "gke-dev-keda-chart")
    [(resource, message)] = _violations(gke_dev, "keda-scaling")
    assert resource == "gke-dev-batch-scaler" and "KEDA is not installed" in message


def test_a_scaled_object_whose_target_is_missing_is_reported(gke_dev: PlanResult) -> None:
    _inputs(gke_dev, SCALED_OBJECT, "gke-dev-batch-scaler")["spec"]["scaleTargetRef"]["name"] = "x"
    [(resource, message)] = _violations(gke_dev, "keda-scaling")
    assert resource == "gke-dev-batch-scaler"
    assert "targets Deployment spotproof/x, which this stack does not declare" in message


def test_a_trigger_without_its_authentication_is_reported(gke_dev: PlanResult) -> None:
    _drop(gke_dev, TRIGGER_AUTH, "gke-dev-batch-trigger-auth")
    [(_, message)] = _violations(gke_dev, "keda-scaling")
    assert (
        "TriggerAuthentication spotproof/gke-dev-batch, which this stack does not declare"
        in message
    )


def test_keda_without_the_identity_its_trigger_uses_is_reported(gke_dev: PlanResult) -> None:
    _inputs(gke_dev, CHART, "gke-dev-keda-chart")["values"].pop("podIdentity")
    [(_, message)] = _violations(gke_dev, "keda-scaling")
    assert "the operator was given no such identity" in message


def test_keda_on_eks_without_a_pod_identity_association_is_reported(eks_dev: PlanResult) -> None:
    _drop(
        eks_dev,
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "eks-dev-work-keda-identity",
    )
    [(_, message)] = _violations(eks_dev, "keda-scaling")
    assert "aws pod identity" in message


def test_a_pod_identity_the_cloud_does_not_offer_is_reported(gke_dev: PlanResult) -> None:
    _inputs(gke_dev, TRIGGER_AUTH, "gke-dev-batch-trigger-auth")["spec"]["podIdentity"][
        "provider"
    ] = "aws"
    [(_, message)] = _violations(gke_dev, "keda-scaling")
    assert "pod identity 'aws', which a GKE cluster does not offer; allowed: gcp" in message


def test_a_scaled_deployment_that_starts_a_worker_before_keda_is_reported(
    gke_dev: PlanResult,
) -> None:
    del _inputs(gke_dev, DEPLOYMENT, "gke-dev-batch-deployment")["spec"]["replicas"]
    [(resource, message)] = _violations(gke_dev, "keda-scaling")
    assert resource == "gke-dev-batch-deployment"
    assert "starts with 1 pod(s) before KEDA scales it; allowed: replicas 0" in message


def test_a_scaled_deployment_whose_updates_reset_the_count_is_reported(
    gke_dev: PlanResult,
) -> None:
    gke_dev.recording.one(DEPLOYMENT, "gke-dev-batch-deployment").ignore_changes = ()
    [(_, message)] = _violations(gke_dev, "keda-scaling")
    assert "every update would reset the scaler's count" in message
    assert "ignore_changes=['spec.replicas']" in message


def test_a_second_scaler_of_the_same_workers_is_reported(gke_dev: PlanResult) -> None:
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "cpu", "namespace": "spotproof"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "gke-dev-batch"}},
    }
    extra = Resource(
        type="kubernetes:autoscaling/v2:HorizontalPodAutoscaler",
        name="user-hpa",
        urn="urn:pulumi:gke-dev::spotproof::user-hpa",
        parent=None,
        custom=True,
        inputs=hpa,
    )
    gke_dev.recording.resources.append(extra)
    [(_, message)] = _violations(gke_dev, "keda-scaling")
    assert "is scaled by user-hpa, gke-dev-batch-scaler" in message


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            lambda s: s["triggers"][0]["metadata"].update(value=10),
            "metadata.value = 10: allowed a string (quote it)",
        ),
        (
            lambda s: s.update(minReplicaCount=9),
            "spec.minReplicaCount 9 is above spec.maxReplicaCount 8",
        ),
        (lambda s: s.update(replicas=3), "spec.replicas: unknown field"),
        (
            lambda s: s["triggers"][0]["metadata"].pop("subscriptionName"),
            "metadata.subscriptionName is required by the gcp-pubsub scaler",
        ),
        (lambda s: s.update(idleReplicaCount=1), "spec.idleReplicaCount 1 must be below"),
    ],
)
def test_a_scaled_object_keda_would_refuse_is_a_schema_violation(
    gke_dev: PlanResult, change: Callable[[dict[str, Any]], None], error: str
) -> None:
    obj = _inputs(gke_dev, SCALED_OBJECT, "gke-dev-batch-scaler")
    change(obj["spec"])
    assert any(error in e for e in keda.errors(obj)), keda.errors(obj)


def test_a_scaled_object_name_too_long_for_its_hpa_is_refused() -> None:
    obj = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "w" * 55},
        "spec": {"scaleTargetRef": {"name": "w"}, "triggers": [{"type": "cron", "metadata": {}}]},
    }
    [error] = keda.errors(obj)
    assert "allowed: at most 54 characters" in error


def test_a_pod_identity_keda_does_not_know_is_refused() -> None:
    obj = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": "a"},
        "spec": {"podIdentity": {"provider": "azure", "identityOwner": "pod"}},
    }
    assert keda.errors(obj) == [
        "spec.podIdentity.provider = 'azure'; allowed: aws, aws-eks, azure-workload, gcp, none",
        "spec.podIdentity.identityOwner = 'pod'; allowed: keda, workload",
    ]


# --- the queue checks ----------------------------------------------------------------------


def test_a_dead_letter_topic_without_a_subscription_is_reported(gke_dev: PlanResult) -> None:
    _drop(gke_dev, SUBSCRIPTION, "gke-dev-work-dead-subscription")
    [(resource, message)] = _violations(gke_dev, "pubsub-work-queue")
    assert resource == "gke-dev-work-subscription"
    assert "topic gke-dev-work-dead, which has no subscription" in message


def test_dead_lettering_without_the_service_agents_roles_is_reported(gke_dev: PlanResult) -> None:
    _drop(
        gke_dev,
        "gcp:pubsub/topicIAMMember:TopicIAMMember",
        "gke-dev-work-agent-publishes-dead-letters",
    )
    [(_, message)] = _violations(gke_dev, "pubsub-work-queue")
    assert "needs roles/pubsub.publisher on dead-letter topic gke-dev-work-dead" in message


def test_a_queue_without_tls_only_policy_is_reported(eks_dev: PlanResult) -> None:
    _drop(eks_dev, "aws:sqs/queuePolicy:QueuePolicy", "eks-dev-work-queue-tls-only")
    assert _violations(eks_dev, "sqs-work-queue") == [
        ("eks-dev-work-queue", "queue eks-dev-work has no policy denying requests without TLS")
    ]


def test_a_worker_role_that_may_delete_results_is_reported(eks_dev: PlanResult) -> None:
    inputs = _inputs(eks_dev, "aws:iam/rolePolicy:RolePolicy", "eks-dev-work-worker-policy")
    document = json.loads(inputs["policy"])
    document["Statement"][2]["Action"].append("s3:DeleteObject")
    inputs["policy"] = json.dumps(document)
    [(_, message)] = _violations(eks_dev, "queue-consumer-scope")
    assert "may delete objects" in message


def test_an_aks_worker_reaching_anywhere_in_the_container_is_reported(aks_dev: PlanResult) -> None:
    _inputs(
        aks_dev, "azure-native:authorization:RoleAssignment", "aks-dev-work-worker-writes-results"
    ).pop("condition")
    [(_, message)] = _violations(aks_dev, "queue-consumer-scope")
    assert "may reach the whole container" in message


def test_an_aks_worker_confined_for_writes_but_not_for_reads_is_reported(
    aks_dev: PlanResult,
) -> None:
    role = _inputs(
        aks_dev, "azure-native:authorization:RoleAssignment", "aks-dev-work-worker-writes-results"
    )
    changes = " AND ".join(f"!(ActionMatches{{'{BLOB_ACTION}/{a}'}})" for a in CHANGING_ACTIONS)
    path = f"@Resource[{BLOB_ACTION}:path] StringStartsWith 'results/'"
    role["condition"] = f"(({changes}) OR ({path}))"  # reads and listings left open
    [(_, message)] = _violations(aks_dev, "queue-consumer-scope")
    assert "may reach the whole container" in message


# --- the spec ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stack", "settings", "message"),
    [
        ("gke-dev", {"resultsPrefix": "checkpoints/results"}, "overlaps the checkpoint prefix"),
        ("gke-dev", {"minWorkers": 5, "maxWorkers": 2}, r"below minWorkers \(5\)"),
        ("gke-dev", {"maxDeliveries": 3}, "spotproof:batch.maxDeliveries = 3: out of range"),
        ("gke-dev", {"leaseSeconds": 601}, "spotproof:batch.leaseSeconds = 601: out of range"),
        ("gke-dev", {"retentionDays": 14}, "spotproof:batch.retentionDays = 14: out of range"),
        ("aks-dev", {"target": "on-demand-gpu"}, "no pool of that class in this stack"),
        ("gke-prod", {"target": "flex-start"}, "admits Jobs, not a Deployment's workers"),
    ],
)
def test_a_batch_setting_the_platform_cannot_honour_is_refused(
    stack: str, settings: dict[str, Any], message: str
) -> None:
    config = {**stack_config(stack), "spotproof:batch": settings}
    with pytest.raises(SpecError, match=message):
        fleet_from_config(stack, config)


def test_keda_off_with_no_minimum_workers_is_refused() -> None:
    config = {**stack_config("gke-dev"), "spotproof:keda": {"enabled": False}}
    with pytest.raises(SpecError, match="without KEDA nothing would start a worker"):
        fleet_from_config("gke-dev", config)


def test_keda_asked_for_without_batch_work_is_refused() -> None:
    config = {**stack_config("gke-prod"), "spotproof:keda": {"enabled": True}}
    with pytest.raises(SpecError, match="KEDA is installed to scale batch workers"):
        fleet_from_config("gke-prod", config)


def _rendered(type_: str, name: str, inputs: dict[str, Any]) -> Resource:
    return Resource(
        type=type_,
        name=name,
        urn=f"urn:pulumi:gke-dev::spotproof::{name}",
        parent=None,
        custom=True,
        inputs=inputs,
    )


def _as_in_a_real_preview(plan: PlanResult, operator_annotations: dict[str, str]) -> None:
    """What CrossGuard sees of KEDA in a real preview: the v4 Chart's children, not its
    inputs."""
    chart = plan.recording.one(CHART, "gke-dev-keda-chart")
    chart.inputs = {"resources": []}
    metadata = {"name": "keda-operator", "namespace": "keda"}
    plan.recording.resources += [
        _rendered(DEPLOYMENT, "keda/keda-operator", {"metadata": metadata, "spec": {}}),
        _rendered(
            "kubernetes:core/v1:ServiceAccount",
            "keda/keda-operator-account",
            {"metadata": {**metadata, "annotations": operator_annotations}},
        ),
    ]


def test_keda_rendered_by_its_chart_counts_as_installed(gke_dev: PlanResult) -> None:
    annotation = {
        "iam.gke.io/gcp-service-account": "gke-dev-keda@spotproof-dev.iam.gserviceaccount.com"
    }
    _as_in_a_real_preview(gke_dev, annotation)
    assert _violations(gke_dev, "keda-scaling") == []


def test_keda_rendered_without_its_identity_is_reported(gke_dev: PlanResult) -> None:
    _as_in_a_real_preview(gke_dev, {})
    [(_, message)] = _violations(gke_dev, "keda-scaling")
    assert "the operator was given no such identity" in message


def test_an_idle_count_is_refused_when_the_minimum_is_left_unset(gke_dev: PlanResult) -> None:
    obj = _inputs(gke_dev, SCALED_OBJECT, "gke-dev-batch-scaler")
    del obj["spec"]["minReplicaCount"]
    obj["spec"]["idleReplicaCount"] = 0
    assert "spec.idleReplicaCount 0 must be below the minimum replica count 0" in (keda.errors(obj))


def test_a_subscription_that_is_no_work_queue_is_left_alone(gke_dev: PlanResult) -> None:
    gke_dev.recording.resources.append(
        _rendered(
            SUBSCRIPTION,
            "audit-log-subscription",
            {"name": "audit", "topic": "projects/spotproof-dev/topics/audit"},
        )
    )
    assert _violations(gke_dev, "pubsub-work-queue") == []


@pytest.mark.parametrize("namespace", ["keda", "kube-system", "default"])
def test_workers_in_a_platform_namespace_are_refused(namespace: str) -> None:
    config = {**stack_config("gke-dev"), "spotproof:batch": {"namespace": namespace}}
    with pytest.raises(SpecError, match="belongs to the platform or an add-on"):
        fleet_from_config("gke-dev", config)


def test_workers_in_a_namespace_of_their_own_get_it_created_and_isolated(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("eks-dev")
    config["spotproof:batch"]["namespace"] = "batch-jobs"
    result = run_plan("eks-test", make_project(config, stack="eks-test"))
    namespaces = {
        r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
        for r in result.recording.of_type("kubernetes:core/v1:Namespace")
    }
    assert namespaces["batch-jobs"]["pod-security.kubernetes.io/enforce"] == "restricted"
    policies = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in result.recording.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if r.inputs["metadata"]["namespace"] == "batch-jobs"
    }
    assert set(policies) == {"default-deny", "allow-workload-egress", "allow-workload-ingress"}
    identity = policies["allow-workload-egress"]["egress"][-1]
    assert identity["to"] == [{"ipBlock": {"cidr": "169.254.170.23/32"}}]  # EKS Pod Identity
    assert result.violations == []


def test_a_namespace_of_their_own_exists_before_anything_the_stack_puts_in_it(
    make_project: Callable[..., Path],
) -> None:
    config = stack_config("eks-dev")
    config["spotproof:batch"]["namespace"] = "batch-jobs"
    config["spotproof:monitoring"] = {"enabled": True}
    result = run_plan("eks-test", make_project(config, stack="eks-test"))
    (namespace,) = (
        r
        for r in result.recording.of_type("kubernetes:core/v1:Namespace")
        if r.inputs["metadata"]["name"] == "batch-jobs"
    )
    inside = [
        r
        for r in result.recording.resources
        if r.is_kubernetes and r.inputs["metadata"].get("namespace") == "batch-jobs"
    ]
    kinds = {r.inputs["kind"] for r in inside}
    assert {"Deployment", "ServiceAccount", "NetworkPolicy"} <= kinds
    scrape = [r for r in inside if r.inputs["metadata"]["name"] == "allow-metrics-scrape"]
    assert scrape, "the monitoring's scrape policy reaches the workers' namespace"
    by_urn = {r.urn: r for r in result.recording.resources}

    def waits_for(resource: Resource, urn: str) -> bool:
        seen, todo = set(), list(resource.dependencies or ())
        while todo:
            current = todo.pop()
            if current == urn:
                return True
            if current not in seen and current in by_urn:
                seen.add(current)
                todo += by_urn[current].dependencies or ()
        return False

    for resource in inside:
        assert waits_for(resource, namespace.urn), resource.name
    assert result.violations == []


def test_a_scaled_manifest_applied_outside_pulumi_must_leave_replicas_out(
    gke_dev: PlanResult,
) -> None:
    # kubectl apply re-sends whatever the manifest says: there, only leaving it out works.
    deployment = gke_dev.recording.one(DEPLOYMENT, "gke-dev-batch-deployment")
    deployment.dependencies = None
    assert _violations(gke_dev, "keda-scaling") == [
        (
            "gke-dev-batch-deployment",
            "Deployment spotproof/gke-dev-batch sets replicas although a ScaledObject scales "
            "it: every apply would reset the scaler's count; leave replicas out",
        )
    ]
    del deployment.inputs["spec"]["replicas"]
    assert _violations(gke_dev, "keda-scaling") == []
