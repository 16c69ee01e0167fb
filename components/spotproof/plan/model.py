"""The plan's model of a cluster: its pools and how each gets nodes, its workloads, what a
reclaim does to a workload's pods, whether a pool scales, and the controllers it runs.

These are the terms in which each cloud's plan (``plan.cloud.CloudPlan``) and the shared
simulations (``plan.simulation``) speak to each other, so they sit below both: a cloud's
hook returns a :class:`Scaling` or a :class:`PreemptionPath`, and the simulation that asks
for it reads it, neither importing the other. What builds these from a recording, and
what judges them, is the simulations' (``nodes``, ``workloads``, ``preemption``,
``scale_up``, ``controller_versions``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from spotproof import scheduling
from spotproof.catalog import labels as platform_labels
from spotproof.catalog.versions import Introduced
from spotproof.fleet.pools import PoolClass
from spotproof.policy.base import container_key_path
from spotproof.runtime import launcher
from spotproof.scheduling import fit

# --- pools -----------------------------------------------------------------------------


class Provisioner(StrEnum):
    """What creates a pool's nodes when pods are pending."""

    CLUSTER_AUTOSCALER = "cluster autoscaler"
    """The cluster autoscaler, as a cloud runs it for a pool (GKE's, AKS's)."""
    KARPENTER = "Karpenter"
    NONE = "no autoscaler"
    """A fixed-size pool (an EKS managed node group): its size changes only when someone
    changes it."""


@dataclass(frozen=True)
class Scaling:
    provisioner: Provisioner
    resource: str
    """The Pulumi resource name, for reports."""
    min_nodes: int
    """Nodes that always exist (per zone when :attr:`per_zone`)."""
    max_nodes: int | None
    """Most nodes (per zone when :attr:`per_zone`); None where only ``limits`` bound it
    (Karpenter)."""
    zones: tuple[str, ...] = ()
    """Where nodes may be created; empty when the pool inherits the cluster's zones."""
    per_zone: bool = False
    """``min_nodes``/``max_nodes`` were given per zone (GKE ``minNodeCount``)."""
    zones_by_default: int = 1
    """Zones a pool that names none spans (a GKE regional cluster's three), for per-zone
    bounds."""
    offered_zones: frozenset[str] | None = None
    """Which of ``zones`` offer the pool's accelerator, where the cloud's catalog can tell:
    no node is ever created in the others."""
    autoscaler: str = ""
    """Who runs the cluster autoscaler, for reports (``GKE cluster autoscaler``)."""
    machine_type: str | None = None
    accelerator: str | None = None
    queued: bool = False
    """GKE queued provisioning: nodes only through a ProvisioningRequest."""
    limits: Mapping[str, str] = field(default_factory=dict)
    """Karpenter NodePool ``limits``."""
    termination_grace_seconds: int | None = None
    """Karpenter NodePool ``terminationGracePeriod``; None when unset (no bound)."""
    max_run_seconds: int | None = None
    """GKE flex-start ``maxRunDuration``."""


@dataclass(frozen=True)
class Pool:
    shape: fit.NodeShape
    scaling: Scaling

    @property
    def name(self) -> str:
        return self.shape.pool


# --- whether a pool scales -------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    pool: str
    scales: bool
    detail: str
    """How it scales (``0-4 per zone in a, b``) or why it does not."""
    fix: str = ""
    """What would make it scale, when it does not."""

    def reason(self) -> str:
        return f"{self.pool}: {self.detail}" + (f" (fix: {self.fix})" if self.fix else "")


class ClusterLimits(Protocol):
    """Limits a cluster puts on all of its pools together (GKE node auto-provisioning's),
    as the cloud whose cluster it is reads them (``CloudPlan.cluster_limits``)."""

    def room_for(self, pool: Pool) -> Verdict | None:
        """Why one more node of ``pool`` would break a limit; None if it fits."""


# --- workloads -------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    resource: str
    """Pulumi resource name, for the violation report."""
    kind: str
    namespace: str
    name: str
    pod_spec: Mapping[str, Any]
    pod_metadata: Mapping[str, Any] = field(default_factory=dict)
    """The pod template's labels and annotations."""
    pods: int = 1
    """Pods it runs at once (a Job's parallelism, a Deployment's replicas)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The object's own labels (a Kueue queue name is one)."""
    spec: Mapping[str, Any] = field(default_factory=dict)
    """The object's own ``spec`` (a JobSet's failure policy is in it)."""
    cluster: str = ""
    """The cluster it runs in, where the program declares several
    (``plan.recording.clusters``): two clusters may run one Job of one name."""
    pod_spec_path: str | None = None
    """Where its object keeps ``pod_spec`` (``spec.template.spec``,
    ``scheduling.pod_templates.pod_spec_path``); None for the pods a chart or an add-on
    runs, which no object of the plan spells out."""

    def key_path(self, key: str = "") -> str | None:
        """The key path of ``key`` (relative to the pod spec: ``tolerations``,
        ``containers[0].command``; the pod spec itself when empty) in the workload's
        object, for a finding about that key; None where no object spells the pod out."""
        if self.pod_spec_path is None:
            return None
        return f"{self.pod_spec_path}.{key}" if key else self.pod_spec_path

    def job_key_path(self, key: str) -> str | None:
        """The key path of ``key`` of the Job spec whose template holds the pod spec (a
        Job's own, a CronJob's or a JobSet's replicated Job's): ``spec.podFailurePolicy``."""
        key_path = self.key_path()
        return f"{key_path.removesuffix('.template.spec')}.{key}" if key_path else None

    def object_key_path(self, key: str) -> str | None:
        """The key path of ``key`` of the workload's object itself (``metadata.labels``,
        ``spec.failurePolicy``); None where no object spells the workload out."""
        return key if self.pod_spec_path is not None else None

    def first_key_path(self, *keys: str) -> str | None:
        """The key path of the first of ``keys`` (top-level keys of the pod spec, in the
        order a check weighs them) that the pod spec sets, else of the pod spec: where a
        finding judged on several keys is about."""
        return self.key_path(next((key for key in keys if key in self.pod_spec), ""))

    def container_key_path(self, container: Mapping[str, Any], *keys: str) -> str | None:
        """The key path of the first of ``keys`` (relative to ``container``, one of
        ``pod_spec["containers"]``: ``command``, ``resources.limits``) whose first step the
        container sets, else of the container itself; of the pod spec for a container
        not among its ``containers`` (an init container)."""
        if self.pod_spec_path is None:
            return None
        key = next((k for k in keys if re.split(r"[.\[]", k)[0] in container), "")
        return container_key_path(self.pod_spec_path, self.pod_spec, container, key)

    @property
    def pod_labels(self) -> Mapping[str, str]:
        return self.pod_metadata.get("labels") or {}

    @property
    def pod_annotations(self) -> Mapping[str, str]:
        return self.pod_metadata.get("annotations") or {}

    @property
    def label(self) -> str:
        where = f" in {self.cluster}" if self.cluster else ""
        return f"{self.kind} {self.namespace}/{self.name}{where}"

    @property
    def targets(self) -> list[PoolClass]:
        """The pool classes the workload selects (by node selector, or by required node
        affinity when it accepts a fallback class); empty if it selects none."""
        selector = self.pod_spec.get("nodeSelector") or {}
        if selector.get(scheduling.POOL_CLASS_LABEL) in PoolClass._value2member_map_:
            return [PoolClass(selector[scheduling.POOL_CLASS_LABEL])]
        if selector.get(platform_labels.GKE_FLEX_START_LABEL) == "true":
            return [PoolClass.FLEX_START]
        required = ((self.pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        terms = required.get("nodeSelectorTerms") or []
        if len(terms) == 1:
            for expression in terms[0].get("matchExpressions") or []:
                if (
                    expression.get("key") == scheduling.POOL_CLASS_LABEL
                    and expression.get("operator") == "In"
                ):
                    values = expression.get("values") or []
                    return [PoolClass(v) for v in values if v in PoolClass._value2member_map_]
        return []


# --- what a reclaim does to a workload's pods ------------------------------------------


class Ending(StrEnum):
    """How a reclaim ends a pod, named by the ``DisruptionTarget`` reason it adds."""

    KUBELET_SHUTDOWN = "TerminationByKubelet"
    """The kubelet's graceful node shutdown: SIGTERM, the condition, the exit code."""
    EVICTION = "EvictionByEvictionAPI"
    """A drain's eviction: SIGTERM, the condition, the exit code."""
    DELETE = "plain delete"
    """A DELETE of the pod: SIGTERM and the exit code, no condition."""
    NODE_GONE = "DeletionByPodGC"
    """The node vanished first: the pod garbage collector marks the pod Failed with the
    condition; no container exit code is ever recorded."""

    @property
    def condition(self) -> bool:
        """Whether the pod carries ``DisruptionTarget``."""
        return self is not Ending.DELETE

    @property
    def exits(self) -> bool:
        """Whether the Job sees the container's exit code."""
        return self is not Ending.NODE_GONE


@dataclass(frozen=True)
class PreemptionPath:
    """What happens to one workload when one kind of reclaimable capacity is taken back."""

    workload: str
    capacity: str
    """``GKE spot``, ``AKS spot``, ``EKS spot (Karpenter)``, ``AKS spot (Karpenter)``."""
    pools: tuple[str, ...]
    notice_seconds: int
    """From the notice to the node being gone."""
    sigterm_at: float | None
    """Seconds after the notice that SIGTERM arrives; None when it never does."""
    grace_seconds: float
    """Seconds from SIGTERM until the pod is killed (its own period, or the node's end)."""
    declared_grace: int
    steps: tuple[str, ...]
    """What happens, in order, in words."""
    ending: Ending
    """How the pod ends on this path."""

    fix: str = ""
    """What would repair a broken path."""
    unannounced: str = ""
    """Why this capacity's reclaims never reach the pod in time, where nothing in a stack
    could change it (the plan warns with it, at the capacity's stack config key:
    ``plan.simulation.preemption.POOL_KEYS``); empty where a path without SIGTERM is the
    stack's own doing, and a problem."""
    stopped_after: float | None = None
    """Seconds after SIGTERM that the pod's own launcher kills the trainer (torchrun's
    shutdown timeout, ``plan.simulation.preemption.launcher_stop``); None where only the
    grace ends it."""

    @property
    def usable_grace(self) -> float:
        """Seconds from SIGTERM the trainer can use for its final save: the grace, or less
        where its launcher stops it first."""
        if self.stopped_after is None:
            return self.grace_seconds
        return min(self.grace_seconds, self.stopped_after)

    @property
    def problems(self) -> list[str]:
        where = f"on {self.capacity} ({', '.join(self.pools)})"
        if self.unannounced:
            return []
        if self.sigterm_at is None:
            return [f"{where} never gets SIGTERM: {self.steps[-2]}; fix: {self.fix}"]
        found = []
        if self.grace_seconds < self.declared_grace:
            found.append(
                f"{where} gets {self.grace_seconds:g} s of grace, less than the "
                f"{self.declared_grace} s it declares, so its final save would be cut short; "
                f"fix: {self.fix}"
            )
        if self.stopped_after is not None and (
            self.stopped_after + launcher.AGENT_EXIT_SECONDS < self.grace_seconds
        ):
            wanted = launcher.shutdown_timeout_for(int(self.grace_seconds))
            found.append(
                f"{where} gets {self.grace_seconds:g} s of grace, but torchrun SIGKILLs its "
                f"workers {self.stopped_after:g} s after SIGTERM, so a final save has only "
                f"{self.stopped_after:g} s; fix: set {launcher.SHUTDOWN_TIMEOUT_ENV}="
                f"{wanted} in the container (the grace less {launcher.AGENT_EXIT_SECONDS} s "
                "for torchrun to leave; a torch from before pytorch/pytorch#172596, March "
                f"2026, ignores it and always waits {launcher.DEFAULT_SHUTDOWN_TIMEOUT} s)"
            )
        return found

    def line(self) -> str:
        return f"{self.capacity} ({', '.join(self.pools)}): {'; '.join(self.steps)}"


# --- the controllers a stack installs --------------------------------------------------


@dataclass(frozen=True)
class Release:
    """One controller as a stack installs it."""

    controller: str
    version: str
    groups: tuple[str, ...]
    """API groups whose objects it serves."""
    introduced: tuple[Introduced, ...]
