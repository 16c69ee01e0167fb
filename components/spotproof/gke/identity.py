"""GKE Workload Identity: a Kubernetes service account acting as a Google service account.

``<project>.svc.id.goog[<namespace>/<name>]`` is the member the cluster's Workload
Identity pool gives the Kubernetes service account; ``roles/iam.workloadIdentityUser`` on
the Google service account lets it impersonate that account, and the Kubernetes service
account names it in ``iam.gke.io/gcp-service-account``
(https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity).

Grants on a bucket are narrowed to a key prefix with an IAM condition on
``resource.name``, which for an object is ``projects/_/buckets/BUCKET/objects/KEY``
(https://cloud.google.com/iam/docs/conditions-resource-attributes#resource-name; conditions
need uniform bucket-level access, which the checkpoint bucket enforces). A listing is a
call on the bucket itself (``resource.name == "projects/_/buckets/BUCKET"``), which a
name condition cannot narrow; the request attribute
``api.getAttribute("storage.googleapis.com/objectListPrefix", "")`` can, since it holds the
``prefix`` of the list call (https://cloud.google.com/iam/docs/conditions-attribute-reference,
"API attributes"). So a holder that must list may list only under its own prefix, and a
listing of the bucket's root is refused: the runtime lists nothing else
(``runtime.storage.gcs.GcsStore.check_reachable``).
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from spotproof.catalog import gke as gke_catalog
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


def objects_under(bucket: str, prefix: str) -> str:
    """The condition expression for the objects under ``prefix/`` of ``bucket``."""
    return f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}/")'


def listings_under(bucket: str, prefix: str) -> str:
    """The condition expression for listing ``bucket`` with a ``prefix`` under ``prefix/``."""
    return (
        f'(resource.name == "projects/_/buckets/{bucket}" && '
        f'api.getAttribute("{gke_catalog.LIST_PREFIX_ATTRIBUTE}", "").startsWith("{prefix}/"))'
    )


def under_prefix(
    bucket: pulumi.Input[str], prefix: str, *, listing: bool
) -> pulumi.Output[dict[str, str]]:
    """A ``condition`` for a bucket grant: the objects under ``prefix/`` and, with
    ``listing``, listings of the bucket under ``prefix/``."""

    def condition(name: str) -> dict[str, str]:
        if listing:
            expression = f"{objects_under(name, prefix)} || {listings_under(name, prefix)}"
            return {"title": f"{prefix}/ and listing", "expression": expression}
        return {"title": f"{prefix}/", "expression": objects_under(name, prefix)}

    return pulumi.Output.from_input(bucket).apply(condition)
