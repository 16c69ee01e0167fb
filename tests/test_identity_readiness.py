"""A workload is created only after its service account's cloud identity is bound and
granted: ``pulumi up`` creates resources in parallel, and a pod created first starts
without credentials (EKS sets Pod Identity variables only at pod creation)."""

from __future__ import annotations

from typing import Any

import pytest

from spotproof.plan import PlanResult
from spotproof.plan.recording.recorder import Resource
from spotproof.policy.identity_readiness import identity_ready
from tests.support import plan_of

JOB = "kubernetes:batch/v1:Job"


def _resource(
    type_: str,
    name: str,
    inputs: dict[str, Any],
    dependencies: tuple[str, ...] | None = (),
    parent: str | None = None,
) -> Resource:
    return Resource(type_, name, f"urn:{name}", parent, True, inputs, dependencies=dependencies)


def _job(dependencies: tuple[str, ...] | None, parent: str | None = None) -> Resource:
    pod = {"spec": {"serviceAccountName": "trainer", "containers": [{"name": "t", "image": "i"}]}}
    return _resource(
        JOB,
        "job",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {"template": pod},
        },
        dependencies,
        parent,
    )


ASSOCIATION = _resource(
    "aws:eks/podIdentityAssociation:PodIdentityAssociation",
    "association",
    {"namespace": "ml", "serviceAccount": "trainer", "roleArn": "arn:aws:iam::1:role/trainer"},
)
ROLE_POLICY = _resource("aws:iam/rolePolicy:RolePolicy", "policy", {"role": "trainer"})
ACCOUNT = _resource(
    "kubernetes:core/v1:ServiceAccount",
    "account",
    {"metadata": {"name": "trainer", "namespace": "ml"}},
    ("urn:association", "urn:policy"),
)


GKE_GRANT = _resource(
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "grant",
    {"role": "roles/storage.objectUser", "member": "serviceAccount:t@p.iam.gserviceaccount.com"},
)
"""The bucket's grant to the Google service account ``t@p``."""


def _gke_account(dependencies: tuple[str, ...] = ()) -> Resource:
    """The service account ml/trainer, annotated to act as ``t@p``."""
    annotations = {"iam.gke.io/gcp-service-account": "t@p.iam.gserviceaccount.com"}
    metadata = {"name": "trainer", "namespace": "ml", "annotations": annotations}
    return _resource(
        "kubernetes:core/v1:ServiceAccount", "account", {"metadata": metadata}, dependencies
    )


def test_a_job_created_beside_its_pod_identity_association_is_flagged() -> None:
    [(name, message)] = identity_ready([ASSOCIATION, ROLE_POLICY, ACCOUNT, _job(())])
    assert name == "job"
    assert "before association (PodIdentityAssociation), policy (RolePolicy), which" in message
    assert "identity of service account ml/trainer" in message


def test_a_job_that_waits_for_its_service_account_waits_for_what_the_account_waited_for() -> None:
    assert list(identity_ready([ASSOCIATION, ROLE_POLICY, ACCOUNT, _job(("urn:account",))])) == []


def test_a_child_waits_for_what_its_component_parent_waited_for() -> None:
    component = _resource(
        "spotproof:kube:Workers", "workers", {}, ("urn:association", "urn:policy")
    )
    job = _job((), parent="urn:workers")
    assert list(identity_ready([ASSOCIATION, ROLE_POLICY, component, job])) == []


def test_a_gke_job_waits_for_the_bucket_grant_to_its_google_service_account() -> None:
    binding = _resource(
        "gcp:serviceaccount/iAMMember:IAMMember",
        "binding",
        {
            "role": "roles/iam.workloadIdentityUser",
            "member": "serviceAccount:p.svc.id.goog[ml/trainer]",
        },
    )
    account = _gke_account(("urn:binding",))
    [(_, message)] = identity_ready([binding, GKE_GRANT, account, _job(("urn:account",))])
    assert message.startswith("may be created before grant (BucketIAMMember), which")


def test_a_grant_found_through_two_bindings_of_one_account_is_named_once() -> None:
    def binding(name: str, account: str) -> Resource:
        return _resource(
            "gcp:serviceaccount/iAMMember:IAMMember",
            name,
            {
                "role": "roles/iam.workloadIdentityUser",
                "member": "serviceAccount:p.svc.id.goog[ml/trainer]",
                "serviceAccountId": f"projects/p/serviceAccounts/{account}",
            },
        )

    resources = [binding("one", "t@p"), binding("two", "u@p"), GKE_GRANT, _gke_account(), _job(())]
    [(_, message)] = identity_ready(resources)
    assert message.startswith(
        "may be created before one (IAMMember), grant (BucketIAMMember), two (IAMMember), which"
    )


def test_an_aks_job_waits_for_its_federated_credential() -> None:
    federation = _resource(
        "azure-native:managedidentity:FederatedIdentityCredential",
        "federation",
        {"subject": "system:serviceaccount:ml:trainer"},
    )
    [(_, message)] = identity_ready([federation, _job(())])
    assert "before federation (FederatedIdentityCredential), which" in message


def test_objects_applied_outside_the_program_are_not_judged() -> None:
    assert list(identity_ready([ASSOCIATION, ROLE_POLICY, _job(None)])) == []


@pytest.mark.parametrize("stack", ["gke-dev", "eks-dev", "aks-dev", "eks-prod"])
def test_every_stacks_workloads_wait_for_their_identity(stack: str) -> None:
    assert list(identity_ready(plan_of(stack).recording.resources)) == []


def test_the_recording_holds_the_dependencies_the_sdk_sends(eks_dev: PlanResult) -> None:
    """The trainer's service account waits for the checkpoint bucket component, which the
    SDK expands into its children: the association and the role's policy among them."""
    account = eks_dev.recording.one("kubernetes:core/v1:ServiceAccount", "eks-dev-trainer")
    association = eks_dev.recording.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "eks-dev-checkpoints-trainer-identity",
    )
    policy = eks_dev.recording.one(
        "aws:iam/rolePolicy:RolePolicy", "eks-dev-checkpoints-trainer-checkpoints"
    )
    assert {association.urn, policy.urn} <= set(account.dependencies or ())
