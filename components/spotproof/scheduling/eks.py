"""How EKS's pools look to the scheduler: a managed node group with the labels EKS adds,
and what Karpenter's AWS provider launches for a NodePool. Karpenter chooses the instance
type per pod, so no one size's allocatable resources are known, and none are checked."""

from __future__ import annotations

from spotproof.catalog import eks as eks_catalog
from spotproof.catalog import labels as platform_labels
from spotproof.scheduling import fit, node_shapes

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
KARPENTER_GROUP = "karpenter.k8s.aws"


def node_group(inputs: node_shapes.Inputs) -> fit.NodeShape:
    """``capacityType`` defaults to ON_DEMAND
    (https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateNodegroup.html)."""
    name = str(inputs.get("nodeGroupName"))
    labels = {
        **node_shapes.labels(inputs.get("labels")),
        **platform_labels.eks_injected_labels(name),
    }
    return fit.NodeShape(
        pool=name,
        labels=labels,
        taints=tuple(node_shapes.taint(t) for t in inputs.get("taints") or []),
        spot=inputs.get("capacityType") == "SPOT",
    )


def karpenter_instances(node_pool: node_shapes.Inputs) -> tuple[dict[str, list[str]], int]:
    """What EC2 launches for the pool's families and GPU counts: the instance types the
    catalog offers, their families and GPU names; and the most GPUs a node may have."""
    families = tuple(
        f
        for f in node_shapes.requirement_values(node_pool, eks_catalog.INSTANCE_FAMILY_LABEL) or ()
        if f in eks_catalog.FAMILIES
    )
    counts = [
        int(c)
        for c in node_shapes.requirement_values(node_pool, eks_catalog.INSTANCE_GPU_COUNT_LABEL)
        or ()
        if c.isdigit()
    ]
    return {
        eks_catalog.INSTANCE_TYPE_LABEL: [
            t for n in counts for t in eks_catalog.instance_types(families, n)
        ],
        eks_catalog.INSTANCE_FAMILY_LABEL: list(families),
        eks_catalog.INSTANCE_GPU_NAME_LABEL: [eks_catalog.FAMILIES[f].gpu for f in families],
    }, max(counts, default=0)


SHAPES = node_shapes.CloudShapes(
    readers={NODE_GROUP: node_group}, karpenter={KARPENTER_GROUP: karpenter_instances}
)
