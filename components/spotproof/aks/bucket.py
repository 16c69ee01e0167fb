"""``spotproof:aks:CheckpointBucket``: a storage account container for checkpoints and the
one identity that may write it, through workload identity (no keys anywhere).

Facts this relies on:

- Storage account hardening (pulumi-azure-native ``storage.StorageAccount``, API
  2024-01-01): ``allowSharedKeyAccess: false`` makes every request, SAS included, use
  Microsoft Entra ID; ``defaultToOAuthAuthentication`` makes the portal do the same;
  ``minimumTlsVersion`` defaults to TLS 1.0 when unset, and TLS 1.3 is not accepted as a
  minimum, hence ``TLS1_2``.
- Versioning and soft delete live on ``BlobServiceProperties`` named ``default`` (the
  only name the API takes); lifecycle rules on the ``ManagementPolicy`` named ``default``.
- A deleted checkpoint stays recoverable for ``noncurrentDays``, then is gone. Azure's
  lifecycle cannot count from the deletion: a previous version's
  ``daysAfterCreationGreaterThan`` counts from the version's creation, its key's first
  write (https://learn.microsoft.com/azure/storage/blobs/lifecycle-management-overview,
  "action run conditions"), so a rule of N days would purge an old checkpoint the day
  after its deletion and keep a young one up to N days after. Instead previous versions
  are deleted at the first daily run (0 days), and blob soft delete, which takes what a
  lifecycle rule deletes (.../lifecycle-management-policy-delete), keeps them
  recoverable for ``noncurrentDays``; ``spotproof.plan.simulation.lifecycle`` replays both.
- Workload identity: a user-assigned identity the trainer's service account federates to
  (``spotproof.aks.identity``).
- ``Storage Blob Data Contributor`` (role ``ba92f5b4-2d11-453d-a403-e96b0029c9fe``,
  Azure built-in roles) scoped to the container, with a condition that confines it to
  ``bucket.prefix`` (``spotproof.catalog.aks.blobs_under``), as GKE's and EKS's grants
  are: the trainer cannot read or delete the batch workers' results. Role assignments
  take up to ten minutes to apply, so the first run right after ``pulumi up`` may be
  refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure

from spotproof.aks.identity import (
    CLIENT_ID_ANNOTATION,
    USE_LABEL,
    federated_identity,
    role_definition,
)
from spotproof.catalog import Cloud
from spotproof.catalog.aks import BLOB_DATA_CONTRIBUTOR, blobs_under
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import BucketSpec
from spotproof.fleet.config import judge_bucket
from spotproof.kube.workload import ServiceAccountRef, WorkloadIdentity

CONTAINER = "spotproof"
"""The container checkpoints go in; ``az://spotproof/<prefix>``."""
ACCOUNT_ENV = "AZURE_STORAGE_ACCOUNT_NAME"
"""Names the storage account for the runtime's ``az://`` store."""


@dataclass
class CheckpointBucketArgs:
    bucket: BucketSpec
    """``bucket.name`` is the storage account's name."""
    resource_group_name: pulumi.Input[str]
    location: str
    """The account's region: the cluster's."""
    oidc_issuer_url: pulumi.Input[str]
    """The cluster's OIDC issuer (``ManagedCluster.oidcIssuerProfile.issuerURL``)."""
    trainer: ServiceAccountRef
    protect: bool = True
    """On unless a disposable stack turns it off: refuse to delete the storage account."""
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (the trainer's managed identity);
    default the component's name. Two components in one resource group need different
    prefixes."""

    def __post_init__(self) -> None:
        judge_bucket(Cloud.AKS, self.bucket, self.location, "CheckpointBucketArgs.bucket")


class CheckpointBucket(pulumi.ComponentResource):
    """A private, versioned container in a hardened storage account, and a user-assigned
    identity the trainer's service account federates to, allowed on that container only."""

    name: pulumi.Output[str]
    url: pulumi.Output[str]
    container_id: pulumi.Output[str]
    identity: WorkloadIdentity

    def __init__(
        self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:aks:CheckpointBucket", name, args.bucket.recorded(), opts)
        self._prefix = args.name_prefix or name
        settings, group = args.bucket, args.resource_group_name
        child = pulumi.ResourceOptions(parent=self)
        tags = stack_tags(pulumi.get_stack(), purpose="checkpoints")
        account = azure.storage.StorageAccount(
            f"{name}-account",
            account_name=settings.name,
            resource_group_name=group,
            location=args.location,
            kind=azure.storage.Kind.STORAGE_V2,
            sku=azure.storage.SkuArgs(name=azure.storage.SkuName.STANDARD_LRS),
            minimum_tls_version=azure.storage.MinimumTlsVersion.TLS1_2,
            enable_https_traffic_only=True,
            allow_blob_public_access=False,
            allow_shared_key_access=False,
            default_to_o_auth_authentication=True,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        retention = {"enabled": True, "days": settings.noncurrent_days}
        azure.storage.BlobServiceProperties(
            f"{name}-blob-service",
            account_name=account.name,
            resource_group_name=group,
            blob_services_name="default",
            is_versioning_enabled=True,
            delete_retention_policy=retention,
            container_delete_retention_policy=retention,
            opts=child,
        )
        container = azure.storage.BlobContainer(
            f"{name}-container",
            account_name=account.name,
            resource_group_name=group,
            container_name=CONTAINER,
            public_access=azure.storage.PublicAccess.NONE,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        azure.storage.ManagementPolicy(
            f"{name}-lifecycle",
            account_name=account.name,
            resource_group_name=group,
            management_policy_name="default",
            policy={
                "rules": [
                    {
                        "name": "expire-previous-versions",
                        "enabled": True,
                        "type": "Lifecycle",
                        "definition": {
                            "filters": {
                                "blob_types": ["blockBlob"],
                                "prefix_match": [f"{CONTAINER}/"],
                            },
                            "actions": {
                                # Soft delete keeps them for noncurrentDays (above).
                                "version": {"delete": {"days_after_creation_greater_than": 0}}
                            },
                        },
                    }
                ]
            },
            opts=child,
        )

        trainer = federated_identity(
            f"{name}-trainer",
            identity_name=f"{self._prefix}-trainer",
            resource_group_name=group,
            location=args.location,
            issuer=args.oidc_issuer_url,
            pod=args.trainer,
            tags=tags,
            opts=child,
        )
        subscription = azure.authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self)
        ).subscription_id
        azure.authorization.RoleAssignment(
            f"{name}-trainer-writes-container",
            principal_id=trainer.principal_id,
            principal_type=azure.authorization.PrincipalType.SERVICE_PRINCIPAL,
            role_definition_id=role_definition(subscription, BLOB_DATA_CONTRIBUTOR),
            scope=container.id,
            condition=blobs_under(settings.prefix),
            condition_version="2.0",
            opts=child,
        )

        self.name = account.name
        self.container_id = container.id
        self.url = pulumi.Output.from_input(f"az://{CONTAINER}")
        self.identity = WorkloadIdentity(
            service_account=args.trainer,
            cloud_identity=trainer.client_id,
            service_account_annotations=trainer.client_id.apply(
                lambda client_id: {CLIENT_ID_ANNOTATION: client_id}
            ),
            pod_labels={USE_LABEL: "true"},
            environment={ACCOUNT_ENV: settings.name},
            granted_by=(self,),
        )
        self.register_outputs({"name": self.name, "url": self.url})
