"""A cluster spotproof did not create: what a program that adds components to it cannot
know, given in the stack's config so that ``spotproof plan`` can judge what it adds.

A program built from ``GpuNodePools``, ``CheckpointBucket`` and the like (not from
``spotproof.program``) sets no ``spotproof:cloud``; its stack may describe the cluster
under ``spotproof:existingCluster``, every key optional::

    spotproof:existingCluster:
      cloud: gke                 # default: the cloud of the resources the program declares
      kubernetesVersion: "1.33"  # the schema and Pod Security version pods are judged at
      gpusAdvertised: true       # a device plugin (or the GPU Operator) already runs
      systemPool:                # the nodes the cluster keeps for its add-ons
        taints: [components.gke.io/gke-managed-components=true:NoSchedule]
        labels: {cloud.google.com/gke-nodepool: default-pool}
      reclaimModel:              # what checkpoint-interval advice assumes (fleet.reclaims)
        reclaimsPerNodeHour: 0.01
      monitoring:                # alert thresholds and targets (fleet.monitoring)
        notify: [projects/my-project/notificationChannels/1234567890]

The system pool matters to one question: can the platform's own add-ons (and the
program's system workloads) land on the spot pools the program adds? They must fit the
system pool described here and no reclaimable pool. Undescribed, it is taken as
untainted and unlabelled: where add-ons land on any node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spotproof.catalog import Cloud
from spotproof.fleet.config import kubernetes_version
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import Checked, ConfigObject, judged, read_settings, setting
from spotproof.fleet.monitoring import Monitoring, read_monitoring
from spotproof.fleet.pools import Taint, TaintEffect
from spotproof.fleet.readers import boolean, check_label, decode, enumeration, items
from spotproof.fleet.reclaims import ReclaimModel

KEY = "spotproof:existingCluster"


def _observed_taints(key: str, raw: Any) -> tuple[Taint, ...]:
    """Taints as the cluster has them: platform prefixes allowed (``CriticalAddonsOnly``,
    ``components.gke.io/...``), unlike the taints a stack adds to its own pools."""
    found = []
    for item_key, item in items(key, raw):
        head, _, effect = (item if isinstance(item, str) else "").rpartition(":")
        taint_key, _, value = head.partition("=")
        if not taint_key or effect not in TaintEffect._value2member_map_:
            raise SpecError(
                item_key,
                item,
                "not a taint",
                "key[=value]:Effect (NoSchedule, PreferNoSchedule, NoExecute), e.g. "
                "CriticalAddonsOnly=true:NoSchedule",
            )
        found.append(Taint(taint_key, value, TaintEffect(effect)))
    return tuple(found)


def _observed_labels(key: str, raw: Any) -> dict[str, str]:
    raw = decode(raw)
    if not isinstance(raw, dict):
        raise SpecError(key, raw, "expected an object", "a mapping of label keys to values")
    for label_key, value in raw.items():
        check_label(f"{key}.{label_key}", str(label_key), str(value), reserved_ok=True)
    return {str(k): str(v) for k, v in raw.items()}


@dataclass(frozen=True)
class ExistingSystemPool(Checked):
    """The nodes an existing cluster keeps for its add-ons."""

    taints: tuple[Taint, ...] = setting("taints", _observed_taints, ())
    labels: dict[str, str] = setting("labels", _observed_labels, factory=dict)


@dataclass(frozen=True)
class ExistingCluster(Checked):
    """What the plan is told about a cluster a program adds components to."""

    cloud: Cloud | None = setting("cloud", enumeration(Cloud), None)
    """Default: the cloud whose resources the program declares."""
    kubernetes_version: str | None = setting("kubernetesVersion", kubernetes_version, None)
    """The cluster's minor; unstated, manifests are checked against the schema of
    ``FleetSpec.kubernetes_version`` and pods against Pod Security at every minor."""
    gpus_advertised: bool = setting("gpusAdvertised", boolean, False)
    """The cluster already advertises ``nvidia.com/gpu`` on every GPU node (the NVIDIA GPU
    Operator or device plugin runs there), so pools the program adds need no plugin of
    its own; otherwise the plan asks for one where the platform installs none (AKS)."""
    system_pool: ExistingSystemPool = setting("systemPool", None, factory=ExistingSystemPool)
    reclaim_model: ReclaimModel = setting("reclaimModel", None, factory=ReclaimModel)
    """What the plan's checkpoint-interval advice assumes (``fleet.reclaims``)."""
    monitoring: Monitoring = setting("monitoring", None, factory=Monitoring)
    """Alert thresholds and notification targets (``fleet.monitoring``); on by default, as
    a cluster spotproof did not create is never a disposable stack of its own."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> ExistingCluster:
        obj = ConfigObject(key, raw, fields_of=cls)
        system = obj.section("systemPool", ExistingSystemPool.judge)
        reclaim_model = obj.section("reclaimModel", ReclaimModel.judge)
        values = read_settings(cls, obj)
        monitoring = obj.section("monitoring", read_monitoring(values["cloud"], disposable=False))
        cluster = cls(
            **values, system_pool=system, reclaim_model=reclaim_model, monitoring=monitoring
        )
        obj.finish()
        return cluster


def existing_cluster(config: dict[str, Any]) -> ExistingCluster:
    """The ``spotproof:existingCluster`` facts of a stack's config (all optional)."""
    with judged():
        return ExistingCluster.judge(KEY, config.get(KEY) or {})


def builds_a_cluster(config: dict[str, Any]) -> bool:
    """Whether a stack's config asks spotproof's program for a whole fleet."""
    return any(key.startswith("spotproof:") and key != KEY for key in config)
