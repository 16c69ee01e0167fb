"""GKE Workload Identity: a Kubernetes service account acting as a Google service account.

``<project>.svc.id.goog[<namespace>/<name>]`` is the member the cluster's Workload
Identity pool gives the Kubernetes service account; ``roles/iam.workloadIdentityUser`` on
the Google service account lets it impersonate that account, and the Kubernetes service
account names it in ``iam.gke.io/gcp-service-account``
(https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity).
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from spotproof.kube.workload import ServiceAccountRef

ANNOTATION = "iam.gke.io/gcp-service-account"


def bind_workload_identity(
    name: str,
    account: gcp.serviceaccount.Account,
    project: pulumi.Input[str],
    pod: ServiceAccountRef,
    opts: pulumi.ResourceOptions,
) -> gcp.serviceaccount.IAMMember:
    """Lets the Kubernetes service account ``pod`` act as ``account``."""
    return gcp.serviceaccount.IAMMember(
        name,
        service_account_id=account.name,
        role="roles/iam.workloadIdentityUser",
        member=pulumi.Output.from_input(project).apply(
            lambda p: f"serviceAccount:{p}.svc.id.goog[{pod.namespace}/{pod.name}]"
        ),
        opts=opts,
    )


def annotations(account: gcp.serviceaccount.Account) -> pulumi.Output[dict[str, str]]:
    """What the Kubernetes service account carries to name ``account``."""
    return account.email.apply(lambda email: {ANNOTATION: email})
