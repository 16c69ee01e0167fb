"""``spotproof:aks:WorkQueue``: the storage queue batch workers pull from, its poison
queue, and the two identities that touch it (the workers', KEDA's).

Facts this relies on:

- Queues live in the stack's storage account (pulumi-azure-native ``storage.Queue``; names
  of 3-63 lower-case letters, digits and single hyphens). Storage queues have no
  dead-lettering: the runtime moves an item delivered more than ``maxDeliveries`` times
  to ``<queue>-poison`` (``spotproof.runtime.batch.azure_queue``), so that queue exists too.
- Roles (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage):
  hiding a message again (Update Message: a heartbeat, or a hand-back) is
  ``queues/messages/write``, which "Storage Queue Data Message Processor" lacks, so the
  worker gets "Storage Queue Data Contributor" on the work queue alone; "Storage Queue Data
  Message Sender" on the poison queue alone; "Storage Blob Data Contributor" on the
  container with a condition that confines reads, listings and changes to the results
  prefix (``spotproof.catalog.aks.blobs_under``), so a worker cannot read checkpoints.
  Azure has no create-only role: the runtime's writes are create-only
  (``If-None-Match: *``).
- KEDA's ``azure-queue`` scaler accepts only the ``azure-workload`` identity, which is the
  KEDA operator's own: a user-assigned identity federated with ``keda/keda-operator``,
  named in the chart's ``podIdentity.azureWorkload`` values, with "Storage Queue Data
  Reader" on the work queue (Get Queue Metadata and Peek Messages, ``catalog.keda``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_azure_native as azure
from pulumi_azure_native.managedidentity import UserAssignedIdentity

from spotproof.aks.bucket import ACCOUNT_ENV
from spotproof.aks.identity import (
    CLIENT_ID_ANNOTATION,
    USE_LABEL,
    federated_identity,
    role_definition,
)
from spotproof.catalog import keda
from spotproof.catalog.aks import BLOB_DATA_CONTRIBUTOR, blobs_under
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import BatchSpec
from spotproof.kube.batch import QueueScaler, WorkQueueBinding
from spotproof.kube.workload import ServiceAccountRef, WorkloadIdentity
from spotproof.runtime.batch.azure_queue import POISON_SUFFIX

QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
QUEUE_MESSAGE_SENDER = "c6a89b2d-59bc-44d0-9896-0f6e12d7b80a"
QUEUE_DATA_READER = "19e7f393-937e-4f77-808e-94535e297925"


@dataclass
class WorkQueueArgs:
    batch: BatchSpec
    resource_group_name: pulumi.Input[str]
    location: str
    account_name: pulumi.Input[str]
    """The stack's storage account (the checkpoint bucket's), as its resource's output so
    the queues wait for it."""
    account: str
    """The same account's name as the spec gives it, for the workers' environment."""
    container_id: pulumi.Input[str]
    """The checkpoint container; results go under ``batch.results_prefix`` in it."""
    container: str
    oidc_issuer_url: pulumi.Input[str]
    worker: ServiceAccountRef
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (queues and managed identities);
    default the component's name. Two components in one storage account need different
    prefixes."""


class WorkQueue(pulumi.ComponentResource):
    """A work queue and its poison queue, the worker's and KEDA's identities, and what the
    workers and KEDA are told about them."""

    binding: WorkQueueBinding
    keda_identity: pulumi.Output[dict[str, Any]]
    """The KEDA chart's ``podIdentity`` values."""

    def __init__(
        self, name: str, args: WorkQueueArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:aks:WorkQueue", name, None, opts)
        self._prefix = args.name_prefix or name
        batch, prefix = args.batch, self._prefix
        child = pulumi.ResourceOptions(parent=self)
        queue_name = f"{prefix}-work"
        queue, poison = (
            azure.storage.Queue(
                f"{name}-{suffix}",
                account_name=args.account_name,
                resource_group_name=args.resource_group_name,
                queue_name=each,
                opts=child,
            )
            for suffix, each in (("queue", queue_name), ("poison", queue_name + POISON_SUFFIX))
        )
        client = azure.authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self)
        )

        def identity(suffix: str, purpose: str, pod: ServiceAccountRef) -> UserAssignedIdentity:
            return federated_identity(
                f"{name}-{suffix}",
                identity_name=f"{prefix}-{purpose}",
                resource_group_name=args.resource_group_name,
                location=args.location,
                issuer=args.oidc_issuer_url,
                pod=pod,
                tags=stack_tags(pulumi.get_stack(), purpose="batch"),
                opts=child,
            )

        worker = identity("worker", "batch", args.worker)
        grants = (
            ("consumes", QUEUE_DATA_CONTRIBUTOR, queue.id, None),
            ("poisons", QUEUE_MESSAGE_SENDER, poison.id, None),
            (
                "writes-results",
                BLOB_DATA_CONTRIBUTOR,
                args.container_id,
                blobs_under(batch.results_prefix),
            ),
        )
        for verb, definition, scope, condition in grants:
            azure.authorization.RoleAssignment(
                f"{name}-worker-{verb}",
                principal_id=worker.principal_id,
                principal_type=azure.authorization.PrincipalType.SERVICE_PRINCIPAL,
                role_definition_id=role_definition(client.subscription_id, definition),
                scope=scope,
                condition=condition,
                condition_version="2.0" if condition else None,
                opts=child,
            )
        operator = identity(
            "keda", "keda", ServiceAccountRef(keda.NAMESPACE, keda.OPERATOR_SERVICE_ACCOUNT)
        )
        azure.authorization.RoleAssignment(
            f"{name}-keda-reads-queue",
            principal_id=operator.principal_id,
            principal_type=azure.authorization.PrincipalType.SERVICE_PRINCIPAL,
            role_definition_id=role_definition(client.subscription_id, QUEUE_DATA_READER),
            scope=queue.id,
            opts=child,
        )
        self.keda_identity = pulumi.Output.all(operator.client_id, client.tenant_id).apply(
            lambda ids: {"azureWorkload": {"enabled": True, "clientId": ids[0], "tenantId": ids[1]}}
        )
        self.binding = WorkQueueBinding(
            queue_url=(
                f"azqueue://{queue_name}?max_deliveries={batch.max_deliveries}"
                f"&ttl_days={batch.retention_days}"
            ),
            results_url=f"az://{args.container}/{batch.results_prefix}",
            identity=WorkloadIdentity(
                service_account=args.worker,
                cloud_identity=worker.client_id,
                service_account_annotations=worker.client_id.apply(
                    lambda client_id: {CLIENT_ID_ANNOTATION: client_id}
                ),
                pod_labels={USE_LABEL: "true"},
                environment={ACCOUNT_ENV: args.account},
                granted_by=(self,),
            ),
            scaler=QueueScaler(
                "azure-queue",
                pulumi.Output.from_input(args.account_name).apply(
                    lambda account: {
                        "queueName": queue_name,
                        "accountName": account,
                        "queueLength": str(batch.items_per_worker),
                    }
                ),
            ),
            ready=[self],
        )
        self.register_outputs({"queue": queue.name, "poison_queue": poison.name})
