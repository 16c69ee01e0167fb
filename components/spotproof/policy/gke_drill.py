"""What a drill may do on GKE, and the rule that holds a stack's grant to it.

``spotproof drill`` reclaims a GKE node by asking Compute Engine to simulate a host
maintenance event on its Spot VM (``spotproof.drill.reclaim.gke``). The stack grants that,
with ``spotproof:drill``, as a custom role of the calls the drill makes and nothing else,
bound to the stack's principals under an IAM condition that admits no VM but this
cluster's nodes (``spotproof.gke.drill``). A user who edits either (a permission added to
the role, a condition dropped or widened) is told by ``[gke-drill-scoped]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spotproof.policy.base import PlannedResource, StackRule

CUSTOM_ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
PROJECT_IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
CLUSTER = "gcp:container/cluster:Cluster"

SIMULATE = "compute.instances.simulateMaintenanceEvent"
DRILL_PERMISSIONS = ("compute.instances.get", SIMULATE, "compute.zoneOperations.get")
"""What the drill's calls need, and all the role holds. ``instances.simulateMaintenanceEvent``
needs ``compute.instances.simulateMaintenanceEvent`` on the instance
(https://cloud.google.com/compute/docs/reference/rest/v1/instances/simulateMaintenanceEvent,
"IAM Permissions"); the drill first reads the instance (``instances.get``:
``compute.instances.get``) to refuse a VM that is not Spot, not running or not labelled
with this cluster, and then polls the zonal operation the call returns until Compute
Engine has taken it (``zoneOperations.get``: ``compute.zoneOperations.get``,
https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get). No list
permission: the drill names its VM from the node's provider id."""

INSTANCE_TYPE = "compute.googleapis.com/Instance"
"""The IAM Conditions resource type of a Compute Engine VM, whose ``resource.name`` is
``projects/PROJECT/zones/ZONE/instances/NAME``
(https://cloud.google.com/iam/docs/conditions-resource-attributes)."""

NODE_PREFIX_LENGTH = 24
"""GKE names a node VM ``gke-<cluster>-<pool>-<hash>-<suffix>`` and cuts ``gke-<cluster>``
to 24 characters: kubernetes/ingress-gce ``hack/setup-local.sh`` derives its
``node-instance-prefix`` as ``echo "gke-$clusterName" | head -c 24``, "VM instances names
created by gke are truncated up to 24 characters" (kubernetes/ingress-gce#1623, commit
9eee970; kubernetes/kubernetes#42493 names the same truncation of GKE's node prefix)."""


def instance_prefix(cluster: str) -> str:
    """How every node VM of ``cluster`` begins. Uncut, the name's ``-`` after the cluster
    is part of it, so ``gke-dev`` does not admit ``gke-dev2``'s nodes; cut, nothing after
    the 24th character is known, so two clusters of one project and region whose names
    share their first 20 characters share the prefix too."""
    full = f"gke-{cluster}"
    return full[:NODE_PREFIX_LENGTH] if len(full) > NODE_PREFIX_LENGTH else f"{full}-"


def node_condition(region: str, cluster: str) -> str:
    """The IAM condition that admits ``cluster``'s node VMs, in ``region``'s zones, and
    no other VM of the project the role is granted on.

    ``resource.name`` admits only ``startsWith``, ``endsWith``, ``extract`` and equality
    (https://cloud.google.com/iam/docs/conditions-attribute-reference, "Resource name");
    ``extract("/zones/{zone}/")`` and ``extract("/instances/{name}")`` take the zone and
    the VM's name out of it, so the condition holds whichever zone of the region a node is
    in and whether Compute names the project by id or by number. A call on anything but a
    VM passes it (``resource.type !=``): of the role's permissions that is only
    ``compute.zoneOperations.get``, the poll of the operation the drill's own call
    returned, whose name (``operation-...``) says nothing of the VM it acts on; a condition
    that required a VM would refuse that poll and stop every drill."""
    return (
        f'resource.type != "{INSTANCE_TYPE}" || '
        f'(resource.name.extract("/zones/{{zone}}/").startsWith("{region}-") && '
        f'resource.name.extract("/instances/{{name}}").startsWith("{instance_prefix(cluster)}"))'
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def drill_scoped(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """Every custom role that may simulate maintenance holds the drill's permissions only,
    and every binding of it carries the node condition of a cluster of the stack."""
    admitted = {
        node_condition(_text(c.inputs.get("location")), _text(c.inputs.get("name")))
        for c in resources
        if c.type == CLUSTER
    }
    allowed = " or ".join(sorted(admitted)) or node_condition("REGION", "CLUSTER")
    drill_roles: set[str] = set()
    for role in (r for r in resources if r.type == CUSTOM_ROLE):
        permissions = {_text(p) for p in role.inputs.get("permissions") or []}
        if SIMULATE not in permissions:
            continue
        project, role_id = _text(role.inputs.get("project")), _text(role.inputs.get("roleId"))
        drill_roles.add(f"projects/{project}/roles/{role_id}")
        if extra := sorted(permissions - set(DRILL_PERMISSIONS)):
            yield (
                role.name,
                f"drill role {role_id} also grants {', '.join(extra)}; allowed: "
                f"{', '.join(DRILL_PERMISSIONS)}",
            )
    for binding in (r for r in resources if r.type == PROJECT_IAM_MEMBER):
        if _text(binding.inputs.get("role")) not in drill_roles:
            continue
        expression = _text((binding.inputs.get("condition") or {}).get("expression"))
        if expression not in admitted:
            reach = "every VM of the project" if not expression else "VMs beyond its nodes'"
            yield (
                binding.name,
                f"{binding.inputs.get('member')} may simulate maintenance on {reach}; "
                f"allowed: the condition {allowed}",
            )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "gke-drill-scoped",
        "The drill's role holds its calls only, granted on this cluster's nodes only.",
        drill_scoped,
    ),
)
