"""The pools a plan would create: their nodes as the scheduler sees them, and how they
get nodes.

Built from the *rendered* pool resources (not from the spec), so that what is checked is
what would be deployed. The nodes' shapes come from :mod:`spotproof.scheduling.node_shapes`, the
readers the policy rules use too.

Each :class:`Pool` (``plan.model``) also carries its :class:`Scaling`: who creates its
nodes (a cluster autoscaler, Karpenter, or nobody for a fixed node group), within which
bounds and zones, read by the cloud whose pool type it is (``CloudPlan.scalings``;
Karpenter's NodePool here). ``plan.simulation.scale_up`` and ``plan.simulation.preemption``
read that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from spotproof.fleet.pools import PoolClass, Taint
from spotproof.plan.cloud import ScalingReader, every_plan
from spotproof.plan.model import Pool, Provisioner, Scaling
from spotproof.plan.recording.recorder import Recording
from spotproof.scheduling import POOL_CLASS_LABEL, fit, node_shapes


def pools(recording: Recording) -> list[Pool]:
    """Sorted by pool name: registration order under mocks depends on timing."""
    scalings: dict[str, ScalingReader] = {
        node_shapes.KARPENTER_NODE_POOL: _karpenter_scaling,
        **{type_: read for plan in every_plan() for type_, read in plan.scalings.items()},
    }
    found = [
        Pool(
            _named(node_shapes.readers()[pool_type](inputs), r.name),
            scalings[pool_type](r.name, inputs),
        )
        for r in recording.resources
        for pool_type, inputs in node_shapes.pools_in(r.type, r.inputs)
    ]
    return sorted(found, key=lambda pool: pool.name)


def _named(shape: fit.NodeShape, resource: str) -> fit.NodeShape:
    """A pool declared without a name gets the one Pulumi derives from its resource's."""
    return shape if shape.pool not in ("", "None") else replace(shape, pool=resource)


EXISTING_SYSTEM_POOL = "existing-system-pool"


def existing_system_pool(taints: tuple[Taint, ...], labels: Mapping[str, str]) -> Pool:
    """The nodes a cluster spotproof did not create keeps for its add-ons, as its stack
    describes them (``spotproof:existingCluster.systemPool``): taken as the system pool
    class, whose nodes always exist."""
    shape = fit.NodeShape(
        pool=EXISTING_SYSTEM_POOL,
        labels={**labels, POOL_CLASS_LABEL: PoolClass.SYSTEM.value},
        taints=taints,
    )
    return Pool(shape, Scaling(Provisioner.NONE, "spotproof:existingCluster", 1, None))


def shapes_of(recording: Recording) -> list[fit.NodeShape]:
    return [pool.shape for pool in pools(recording)]


# --- how each pool gets nodes ----------------------------------------------------------


def node_count(value: Any, default: int = 0) -> int:
    """A pool's node count as its inputs give it (absent: ``default``)."""
    return int(value) if value is not None else default


def _karpenter_scaling(resource: str, inputs: Mapping[str, Any]) -> Scaling:
    spec = inputs.get("spec") or {}
    node_spec = (spec.get("template") or {}).get("spec") or {}
    return Scaling(
        provisioner=Provisioner.KARPENTER,
        resource=resource,
        min_nodes=0,
        max_nodes=None,
        limits={str(k): str(v) for k, v in (spec.get("limits") or {}).items()},
        termination_grace_seconds=duration_seconds(node_spec.get("terminationGracePeriod")),
    )


def duration_seconds(value: Any) -> int | None:
    """A Go duration as Karpenter writes it (``90s``, ``2m``, ``1h30m``) in seconds."""
    if not isinstance(value, str) or not value:
        return None
    units = {"h": 3600, "m": 60, "s": 1}
    total, number = 0.0, ""
    for char in value:
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total += float(number) * units[char]
            number = ""
        else:
            return None
    return None if number else int(total)
