"""``spotproof:gke:DrillGrant``: who may reclaim this cluster's Spot VMs with ``spotproof drill``.

A project custom role of the drill's three calls (``policy.gke_drill.DRILL_PERMISSIONS``),
bound to each principal under the IAM condition that admits this cluster's node VMs and no
other VM of the project (``policy.gke_drill.node_condition``). Nothing else is granted: no
role on the cluster, no list, no write. ``[gke-drill-scoped]`` holds a hand-edited role or
binding to the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from spotproof.policy.gke_drill import DRILL_PERMISSIONS, instance_prefix, node_condition


def role_id(cluster: str) -> str:
    """``spotproof_drill_<cluster>``: a role id "cannot contain ``-`` characters" (pulumi-gcp
    ``projects.IAMCustomRole``, ``role_id``) and is unique in its project; a cluster name
    is a DNS label of at most 40 characters (``fleet.config``), so the id stays within
    IAM's 64."""
    return f"spotproof_drill_{cluster.replace('-', '_')}"


@dataclass
class DrillGrantArgs:
    project: str
    region: str
    """The cluster's region: its nodes are in its zones."""
    cluster_name: str
    """The GKE cluster, whose name its node VMs' names begin with."""
    principals: Sequence[str]
    """IAM members (``group:sre@example.com``) who may run drills."""


class DrillGrant(pulumi.ComponentResource):
    """The custom role and its conditional bindings; :attr:`outputs` is the stack output
    ``drill`` on GKE (``spotproof.drill.reclaim.gke.Grant``, camelCase)."""

    role_name: pulumi.Output[str]
    outputs: dict[str, pulumi.Input[str]]

    def __init__(
        self, name: str, args: DrillGrantArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:DrillGrant", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Deleting a custom role keeps its id taken for a while; the provider undeletes and
        # updates a soft-deleted role of the same id instead of failing, so a disposable
        # stack's next pulumi up gets its role back (terraform-provider-google, which
        # pulumi-gcp bridges, resourceGoogleProjectIamCustomRoleCreate).
        role = gcp.projects.IAMCustomRole(
            f"{name}-role",
            project=args.project,
            role_id=role_id(args.cluster_name),
            title=f"spotproof drill ({args.cluster_name})",
            description=(
                f"Simulate maintenance on (reclaim) the Spot VMs of GKE cluster "
                f"{args.cluster_name}; bound only under a condition naming its nodes"
            ),
            permissions=list(DRILL_PERMISSIONS),
            stage="GA",
            opts=child,
        )
        condition = {
            "title": f"nodes of {args.cluster_name}"[:100],
            "description": "Only this cluster's node VMs, in its region's zones",
            "expression": node_condition(args.region, args.cluster_name),
        }
        for member in args.principals:
            # Named by a digest: a member's ':' and '@' are no part of a resource name, and
            # reordering the list must not replace a binding.
            gcp.projects.IAMMember(
                f"{name}-{hashlib.sha256(member.encode()).hexdigest()[:8]}",
                project=args.project,
                role=role.name,
                member=member,
                condition=condition,
                opts=child,
            )
        self.role_name = role.name
        self.outputs = {
            "project": args.project,
            "role": role.name,
            "instancePrefix": instance_prefix(args.cluster_name),
        }
        self.register_outputs(dict(self.outputs))
