"""AKS workload identity: a Kubernetes service account acting as a user-assigned identity.

A user-assigned identity with a federated credential for
``system:serviceaccount:<namespace>:<name>``, issued by the cluster's OIDC issuer for the
audience ``api://AzureADTokenExchange``; the service account names the identity's client
id in ``azure.workload.identity/client-id`` and its pods opt in with the label
``azure.workload.identity/use: "true"`` (only labelled pods get the token)
(``articles/aks/workload-identity-deploy-cluster.md``). Built-in roles are named by their
GUID under the subscription's ``Microsoft.Authorization/roleDefinitions``.
"""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure

from spotproof.kube.workload import ServiceAccountRef

TOKEN_AUDIENCE = "api://AzureADTokenExchange"
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
USE_LABEL = "azure.workload.identity/use"


def federated_identity(
    name: str,
    *,
    identity_name: str,
    resource_group_name: pulumi.Input[str],
    location: str,
    issuer: pulumi.Input[str],
    pod: ServiceAccountRef,
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
) -> azure.managedidentity.UserAssignedIdentity:
    """A user-assigned identity that the service account ``pod`` federates to."""
    identity = azure.managedidentity.UserAssignedIdentity(
        name,
        resource_name_=identity_name,
        resource_group_name=resource_group_name,
        location=location,
        tags=tags,
        opts=opts,
    )
    azure.managedidentity.FederatedIdentityCredential(
        f"{name}-federation",
        resource_name_=identity.name,
        resource_group_name=resource_group_name,
        federated_identity_credential_resource_name=f"{pod.namespace}-{pod.name}",
        issuer=issuer,
        subject=f"system:serviceaccount:{pod.namespace}:{pod.name}",
        audiences=[TOKEN_AUDIENCE],
        opts=opts,
    )
    return identity


def role_definition(subscription_id: pulumi.Input[str], role: str) -> pulumi.Output[str]:
    """The id of the built-in role ``role`` (a GUID) in the subscription."""
    return pulumi.Output.from_input(subscription_id).apply(
        lambda sub: f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/{role}"
    )
