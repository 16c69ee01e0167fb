"""Rendered pool resources read back into :class:`~spotproof.scheduling.fit.NodeShape`: one reader
per pool type, used by ``spotproof plan`` (fit, scale-up, preemption) and by the policy
rules alike, so both judge the same nodes.

Readers take a resource's inputs as Pulumi presents them (camelCase, the cloud's spelling
of taint effects) and add what the platform puts on nodes by itself (GKE's labels and GPU
taint, EKS's node group labels, Karpenter's per-launch choices), because the scheduler
will see it. Each cloud's pool types are read in its own module (``scheduling.gke``,
``scheduling.eks``, ``scheduling.aks``), which contributes them as :class:`CloudShapes`;
Karpenter's NodePool, which runs on several clouds, is read here, with what the cloud's
provider launches asked of the cloud whose node class it names. No Pulumi import: the
policy pack's environment imports this module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotproof import clouds, scheduling
from spotproof.catalog import labels as platform_labels
from spotproof.fleet.pools import Taint
from spotproof.scheduling import fit

KARPENTER_NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"

Inputs = Mapping[str, Any]
Reader = Callable[[Inputs], fit.NodeShape]
KarpenterInstances = Callable[[Inputs], tuple[dict[str, list[str]], int]]
"""A cloud's Karpenter provider: the labels its nodes get from what the NodePool allows,
and the most GPUs one node may have."""


@dataclass(frozen=True)
class CloudShapes:
    """The pool types one cloud renders and how each reads as nodes."""

    readers: Mapping[str, Reader]
    """By Pulumi type token."""
    embedded: Mapping[str, tuple[str, Callable[[Inputs], list[Inputs]]]] = field(
        default_factory=dict
    )
    """Resources that declare pools inside themselves: the pool type and how to list them."""
    karpenter: Mapping[str, KarpenterInstances] = field(default_factory=dict)
    """The cloud's Karpenter provider, by the ``nodeClassRef.group`` a NodePool names."""


def taint(raw: Mapping[str, Any]) -> Taint:
    """A taint as a cloud API or a Kubernetes object spells it."""
    return Taint(
        raw["key"], str(raw.get("value") or ""), scheduling.kubernetes_effect(raw["effect"])
    )


def labels(raw: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def requirement_values(node_pool: Inputs, key: str) -> list[str] | None:
    """Values a Karpenter NodePool's ``In`` requirement on ``key`` allows; None when no
    ``In`` requirement pins the key."""
    template = ((node_pool.get("spec") or {}).get("template") or {}).get("spec") or {}
    for requirement in template.get("requirements") or []:
        if requirement.get("key") == key and requirement.get("operator") == "In":
            return [str(v) for v in requirement.get("values") or []]
    return None


def capacity_types(node_pool: Inputs) -> list[str]:
    """What a NodePool may launch. Without a requirement on the key it is read as both,
    the conservative reading: a pool that might launch spot is checked as a spot pool."""
    return requirement_values(node_pool, platform_labels.KARPENTER_CAPACITY_LABEL) or [
        "spot",
        "on-demand",
    ]


def karpenter_node_pool(inputs: Inputs) -> fit.NodeShape:
    spec = inputs.get("spec") or {}
    template = spec.get("template") or {}
    node_spec = template.get("spec") or {}
    name = str((inputs.get("metadata") or {}).get("name"))

    node_labels = {
        **labels((template.get("metadata") or {}).get("labels")),
        platform_labels.KARPENTER_NODEPOOL_LABEL: name,
    }
    choices: dict[str, frozenset[str]] = {}

    def allow(key: str, values: list[str]) -> None:
        if len(set(values)) == 1:
            node_labels[key] = values[0]
        elif values:
            choices[key] = frozenset(values)

    for requirement in node_spec.get("requirements") or []:
        allow(str(requirement.get("key")), requirement_values(inputs, requirement.get("key")) or [])
    group = str((node_spec.get("nodeClassRef") or {}).get("group"))
    provider = karpenter_providers().get(group)
    instance_labels, gpus = provider(inputs) if provider else ({}, 0)
    for key, values in instance_labels.items():
        allow(key, values)

    return fit.NodeShape(
        pool=name,
        labels=node_labels,
        taints=tuple(taint(t) for t in node_spec.get("taints") or []),
        gpus=gpus,
        spot="spot" in capacity_types(inputs),
        choices=choices,
    )


def _every_cloud() -> list[CloudShapes]:
    return [module.SHAPES for module in clouds.modules("spotproof.scheduling")]


@functools.cache
def readers() -> dict[str, Reader]:
    """Every pool resource type spotproof renders, by Pulumi type token."""
    return {
        KARPENTER_NODE_POOL: karpenter_node_pool,
        **{type_: read for shapes in _every_cloud() for type_, read in shapes.readers.items()},
    }


@functools.cache
def embedded_pools() -> dict[str, tuple[str, Callable[[Inputs], list[Inputs]]]]:
    return {type_: pools for shapes in _every_cloud() for type_, pools in shapes.embedded.items()}


@functools.cache
def karpenter_providers() -> dict[str, KarpenterInstances]:
    return {group: read for shapes in _every_cloud() for group, read in shapes.karpenter.items()}


def pools_in(type_: str, inputs: Inputs) -> list[tuple[str, Inputs]]:
    """The pools one resource declares, as (pool type, pool inputs): itself when it is a
    pool, the pools inside it when it embeds some, else none."""
    if type_ in readers():
        return [(type_, inputs)]
    if type_ in embedded_pools():
        pool_type, extract = embedded_pools()[type_]
        return [(pool_type, pool) for pool in extract(inputs)]
    return []


def pool_class(shape: fit.NodeShape) -> str | None:
    """The contract's pool class the pool declares (``system``, ``spot-gpu``, ...)."""
    return shape.labels.get(scheduling.POOL_CLASS_LABEL)
