"""What a drill may do on AKS, and the rule that holds a stack's grant to it.

``spotproof drill`` evicts an AKS node's Spot VM with ``simulateEviction``, after reading
the VM (and its scale set) to refuse one that is not Spot or not this cluster's
(``spotproof.drill.reclaim.aks``). With ``spotproof:drill`` the stack defines a custom role
of exactly those actions, assignable only in the cluster's node resource group, and
assigns it there to each principal (``spotproof.aks.drill``). AKS creates that group for
the cluster's own infrastructure alone (https://learn.microsoft.com/azure/aks/faq#why-are-two-resource-groups-created-with-aks),
so a role confined to it reaches no other VM. ``[aks-drill-scoped]`` tells a user who
widens the role or its scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from spotproof.policy.base import PlannedResource, StackRule

_COMPUTE = "Microsoft.Compute"
EVICTIONS = (
    f"{_COMPUTE}/virtualMachineScaleSets/virtualMachines/simulateEviction/action",
    f"{_COMPUTE}/virtualMachines/simulateEviction/action",
)
"""Evicting a Spot scale-set instance (an agent pool's node) and a Spot VM (one node
auto-provisioning makes): "Simulates the eviction of spot Virtual Machine [in Virtual
Machine Scale Set]" (https://learn.microsoft.com/azure/role-based-access-control/permissions/compute)."""
READS = (
    f"{_COMPUTE}/virtualMachineScaleSets/read",
    f"{_COMPUTE}/virtualMachineScaleSets/virtualMachines/read",
    f"{_COMPUTE}/virtualMachines/read",
)
"""What the drill reads first, same page: the scale set (its Spot priority and eviction
policy), its instance, or the standalone VM."""
DRILL_ACTIONS = (*EVICTIONS, *READS)

RESOURCE_GROUP_SCOPE = re.compile(r"/subscriptions/[^/]+/resourceGroups/([^/]+)", re.IGNORECASE)
"""A scope that is one resource group: not the subscription, and nothing wider."""

CLUSTER = "azure-native:containerservice:ManagedCluster"
ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"


def _actions(role: PlannedResource) -> set[str]:
    return {
        str(action)
        for permission in role.inputs.get("permissions") or []
        for field in ("actions", "dataActions")
        for action in permission.get(field) or []
    }


def _scope_problem(scope: Any, cluster_groups: set[str]) -> str | None:
    found = RESOURCE_GROUP_SCOPE.fullmatch(str(scope))
    if not found:
        return "is not one resource group"
    if found.group(1).lower() in cluster_groups:
        return "is the cluster's own resource group, not its node resource group"
    return None


def drill_scoped(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """Every role that may simulate evictions holds the drill's actions only, and it and
    its assignments reach one resource group, not the cluster's own."""
    cluster_groups = {
        str(r.inputs.get("resourceGroupName", "")).lower() for r in resources if r.type == CLUSTER
    }
    allowed = (
        "allowed: the cluster's node resource group (/subscriptions/SUB/resourceGroups/MC_...)"
    )
    drill_roles: dict[str, set[str]] = {}
    for role in (r for r in resources if r.type == ROLE_DEFINITION):
        actions = _actions(role)
        if not actions & set(EVICTIONS):
            continue
        scopes = {str(s) for s in role.inputs.get("assignableScopes") or []}
        drill_roles[str(role.inputs.get("roleDefinitionId", "")).lower()] = scopes
        if extra := sorted(actions - set(DRILL_ACTIONS)):
            yield (
                role.name,
                f"drill role also grants {', '.join(extra)}; allowed: {', '.join(DRILL_ACTIONS)}",
            )
        for scope in sorted(scopes) or ["(none)"]:
            if problem := _scope_problem(scope, cluster_groups):
                yield role.name, f"drill role assignable at {scope}, which {problem}; {allowed}"
    for assignment in (r for r in resources if r.type == ROLE_ASSIGNMENT):
        definition = str(assignment.inputs.get("roleDefinitionId", "")).rpartition("/")[2]
        if definition.lower() not in drill_roles:
            continue
        scope = str(assignment.inputs.get("scope", ""))
        problem = _scope_problem(scope, cluster_groups)
        if problem is None and scope not in drill_roles[definition.lower()]:
            problem = "is not among the role's assignable scopes"
        if problem:
            yield (
                assignment.name,
                f"{assignment.inputs.get('principalId')} may evict VMs at {scope}, which "
                f"{problem}; {allowed}",
            )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "aks-drill-scoped",
        "The drill's role evicts and reads VMs of the node resource group only.",
        drill_scoped,
    ),
)
