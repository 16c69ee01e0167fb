"""The nodes a plan would create, as the scheduler would see them.

Built from the *rendered* pool resources (not from the spec), so that what is checked is
what would be deployed; what the platform adds on its own (GKE's labels, its GPU taint)
is added here because the scheduler will see it.
"""

from __future__ import annotations

from spotproof import scheduling
from spotproof.plan.recorder import Recording
from spotproof.spec.types import Taint

GKE_NODE_POOL = "gcp:container/nodePool:NodePool"


def node_shapes(recording: Recording) -> list[scheduling.NodeShape]:
    """Sorted by pool name: registration order under mocks depends on timing."""
    shapes = [_gke_pool(resource.inputs) for resource in recording.of_type(GKE_NODE_POOL)]
    return sorted(shapes, key=lambda shape: shape.pool)


def _gke_pool(inputs: dict) -> scheduling.NodeShape:
    config = inputs.get("nodeConfig") or {}
    accelerators = config.get("guestAccelerators") or []
    gpus = sum(int(a.get("count") or 0) for a in accelerators)
    accelerator = accelerators[0].get("type") if accelerators else None
    spot = bool(config.get("spot") or config.get("preemptible"))
    flex_start = bool(config.get("flexStart"))
    name = str(inputs.get("name"))

    taints = [
        Taint(t["key"], str(t.get("value") or ""), scheduling.kubernetes_effect(t["effect"]))
        for t in config.get("taints") or []
    ]
    if gpus and scheduling.GPU_TAINT not in taints:
        taints.append(scheduling.GPU_TAINT)  # GKE adds it whether declared or not
    labels = {
        **{str(k): str(v) for k, v in (config.get("labels") or {}).items()},
        **scheduling.gke_injected_labels(name, accelerator, spot=spot, flex_start=flex_start),
    }
    return scheduling.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(taints),
        gpus=gpus,
        spot=spot,
        flex_start=flex_start,
    )
