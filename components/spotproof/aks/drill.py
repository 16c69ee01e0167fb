"""``spotproof:aks:DrillGrant``: who may evict this cluster's Spot VMs with ``spotproof drill``.

A custom role of the drill's actions (``policy.aks_drill.DRILL_ACTIONS``: the two
``simulateEviction`` actions and the reads before them), defined and assignable at the
cluster's node resource group only, and assigned there to each principal. The group holds
the cluster's nodes and AKS's infrastructure for them, no other VM; nothing is granted on
the subscription or on the cluster's own resource group (its storage account, its
identities). ``[aks-drill-scoped]`` holds a hand-edited role or assignment to the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_azure_native as azure

from spotproof.policy.aks_drill import DRILL_ACTIONS

ROLE_NAMESPACE = uuid.UUID("0b6f3d5e-7f3a-5c2e-9a51-5d1f0c7e2a41")
"""Names each stack's role definition by a GUID derived from its subscription and node
resource group, so an up after a destroy defines the same role again."""


@dataclass
class DrillGrantArgs:
    cluster_name: str
    node_resource_group: pulumi.Input[str]
    """The cluster's node resource group (``ManagedCluster.nodeResourceGroup``)."""
    principals: Sequence[str]
    """Who may run drills: ``TYPE:OBJECT_ID`` (``Group:...``, ``User:...``,
    ``ServicePrincipal:...``), the principal type Azure checks against the object id."""


class DrillGrant(pulumi.ComponentResource):
    """The custom role and its assignments; :attr:`outputs` is the stack output ``drill``
    on AKS (``spotproof.drill.reclaim.aks.Grant``, camelCase)."""

    outputs: dict[str, pulumi.Input[str]]

    def __init__(
        self, name: str, args: DrillGrantArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:aks:DrillGrant", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        subscription = azure.authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self)
        ).subscription_id
        group = pulumi.Output.from_input(args.node_resource_group)
        scope = pulumi.Output.all(subscription, group).apply(
            lambda parts: f"/subscriptions/{parts[0]}/resourceGroups/{parts[1]}"
        )
        guid = scope.apply(lambda at: str(uuid.uuid5(ROLE_NAMESPACE, at.lower())))
        # Input names as pulumi-azure-native 3 ``authorization.RoleDefinition`` takes them:
        # ``scope`` is where the definition is made, ``assignable_scopes`` where it may be
        # assigned (a resource group is one), ``role_definition_id`` its GUID. A custom
        # role's display name "must be unique at the scope of the Microsoft Entra
        # directory", so it carries the node resource group and the subscription
        # (https://learn.microsoft.com/azure/role-based-access-control/custom-roles,
        # "Custom role properties").
        role = azure.authorization.RoleDefinition(
            f"{name}-role",
            role_definition_id=guid,
            role_name=pulumi.Output.all(subscription, group).apply(
                lambda parts: f"spotproof drill {parts[1]} {parts[0][:8]}"
            ),
            description=f"Simulate the eviction of {args.cluster_name}'s Spot VMs (drill)",
            role_type="CustomRole",
            permissions=[{"actions": list(DRILL_ACTIONS)}],
            assignable_scopes=[scope],
            scope=scope,
            opts=child,
        )
        # "a role definition is a management group or subscription-level resource" (same
        # page): it is referred to as the subscription's, as built-in ones are
        # (``aks.identity.role_definition``); through role.id, assignments wait for it.
        definition = pulumi.Output.all(subscription, guid, role.id).apply(
            lambda parts: (
                f"/subscriptions/{parts[0]}/providers/Microsoft.Authorization/"
                f"roleDefinitions/{parts[1]}"
            )
        )
        for principal in args.principals:
            kind, _, object_id = principal.partition(":")
            azure.authorization.RoleAssignment(
                f"{name}-{kind.lower()}-{object_id.lower()}",
                principal_id=object_id,
                principal_type=kind,
                role_definition_id=definition,
                scope=scope,
                description=f"spotproof drill on {args.cluster_name}",
                opts=child,
            )
        self.outputs = {
            "subscriptionId": subscription,
            "nodeResourceGroup": group,
            "roleDefinitionId": definition,
        }
        self.register_outputs(dict(self.outputs))
