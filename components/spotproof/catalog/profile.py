"""What spotproof's shared code asks of a cloud, as one record per cloud.

Each cloud's catalog module holds its :class:`CloudProfile` (``catalog.gke.PROFILE``) beside
the facts it is read from, and ``catalog.PROFILES`` registers it. Shared code (the
scheduling contract, the policy rules, the offline plan, the CI matrix) reads a cloud's
profile rather than branching on the cloud, so a cloud it does not know yet needs no edit
there. What differs as behaviour rather than data lives in each layer's module named after
the cloud (``scheduling.gke``, ``plan.gke``), found through ``spotproof.clouds``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

CRITICAL_ADDONS_ONLY = ("CriticalAddonsOnly", "true")
"""(key, value) of the taint Kubernetes add-ons conventionally tolerate on the nodes kept
for them: EKS's and AKS's add-ons (CoreDNS, and Karpenter as spotproof configures it) do."""


@dataclass(frozen=True)
class PublishedRate:
    """How often a cloud takes a spot node back, as it publishes it: the rate the plan's
    goodput model assumes where a stack states none (``spotproof:reclaimModel``)."""

    per_node_hour: float
    """Reclaims per node-hour, as a Poisson rate: what a published share of nodes reclaimed
    within a period comes to (:meth:`of_share`)."""
    source: str
    """Where the figure is published (URL), what it says there, and how it was converted."""
    read_on: str
    """When the source was read (ISO date): clouds revise these figures, or withdraw them."""

    @classmethod
    def of_share(cls, share: float, hours: float, source: str, read_on: str) -> PublishedRate:
        """A share of nodes reclaimed within ``hours``, read as a Poisson process: a node
        survives the period with chance ``1 - share``, so the rate is ``-ln(1 - share) /
        hours`` (slightly above ``share / hours``)."""
        return cls(-math.log1p(-share) / hours, source, read_on)


@dataclass(frozen=True)
class ScrapeFloor:
    """The shortest scrape interval a cloud's managed collector takes, where that is longer
    than the shortest spotproof's own setting allows (``scrapeIntervalSeconds``, 5 s)."""

    seconds: int
    by: str
    """Who refuses a shorter one, as the one-line error names it."""


@dataclass(frozen=True)
class ManagedPrometheus:
    """What a cloud's managed Prometheus takes from a stack's ``spotproof:monitoring``
    (``fleet.monitoring``): where its alerts can go, and how often it scrapes."""

    notify_target: re.Pattern[str]
    """One target of the cloud's alert routing, matched as a whole (``notify``)."""
    notify_target_form: str
    """That format in words, for the one-line error that refuses another."""
    scrape_floor: ScrapeFloor | None
    """The collector's shortest interval: a stack's interval defaults up to it and a shorter
    one is refused. None where the collector takes every interval spotproof allows."""


@dataclass(frozen=True)
class CloudProfile:
    """One cloud's facts that shared code needs; every field says where it is used."""

    preemption_notice_seconds: int
    """Seconds a non-system pod has between the preemption notice and its node going away:
    what a grace period above it loses (``policy.kubernetes``, ``plan.simulation.preemption``)."""
    interruption_delivery_seconds: int
    """Budget for the notice to reach whatever stops the pod, taken off the notice."""
    cluster_type: str
    """Pulumi type of the managed cluster: a plan that declares one is this cloud's."""
    provider_prefix: str
    """What every type of the cloud's Pulumi provider starts with (``gcp:``): a program of
    components on an existing cluster declares no cluster, so its resources say the cloud,
    in the plan and in the CI matrix alike."""
    region_key: str
    """The provider's config key for the region, where a program that reads no spotproof
    config finds it (the offline plan fakes regional ids with it)."""
    extra: str
    """The pip extra that installs the cloud's Pulumi provider with the components."""
    sdk_module: str
    """Import name of that provider, for the one-line error when it is missing."""
    keda_identity: str
    """The pod identity (``podIdentity.provider``) the cloud's clusters offer KEDA's
    scalers; any other is refused when the operator reconciles (``policy.autoscaling``)."""
    reclaims: PublishedRate
    """How often a spot node is reclaimed where the stack does not say
    (``plan.simulation.intervals``)."""
    node_ready_seconds: int
    """From a pod left pending by a reclaim to a new GPU node it can be scheduled on: the
    first part of every restart (``plan.simulation.intervals``)."""
    managed_prometheus: ManagedPrometheus
    """Where the stack's alerts go and how often its workloads are scraped
    (``fleet.monitoring``)."""
    system_taint: tuple[str, str] = CRITICAL_ADDONS_ONLY
    """(key, value) of the NoSchedule taint on the system pool: one the platform's own
    add-ons tolerate, or they are left without a node."""
    network_type: str | None = None
    """Pulumi type of the network a run creates for its cluster, whose API a private
    endpoint then keeps from any runner (``plan.simulation.reachability``); None where the cluster's
    network is always created with it."""
    existing_network_setting: str | None = None
    """The stack setting that puts the cluster into a network that exists before the run,
    which a runner can already be inside; None where spotproof cannot."""
    project_key: str | None = None
    """The provider's config key for the project ids derive from, where it has one."""
    host_dns: tuple[str, ...] = ()
    """DNS servers on the node's host network, which NetworkPolicies must let pods reach."""
    identity_endpoints: tuple[tuple[str, int], ...] = ()
    """(address, TCP port) of the node-local endpoint that hands pods their cloud identity."""
    reclaim_waits_on_budgets: bool = False
    """A spot reclaim drains through the Eviction API and nothing ends a blocking
    PodDisruptionBudget's wait before the VM is gone: a budget that keeps a gang whole would
    cost it its SIGTERM, so none is asked for (``plan.simulation.pitfalls``)."""
    spot_pool_taint: tuple[str, str] | None = None
    """(key, value) of the NoSchedule taint the cloud puts on its spot pools by itself, which
    work aimed at spot tolerates besides the contract's (``kube.workload.TargetPlacement``);
    None where the cloud adds none."""
    karpenter_reclaim_unannounced: str = ""
    """Why a spot reclaim of a node Karpenter provisions reaches no pod on this cloud (no
    drain, no SIGTERM with time to use), with its sources; empty where Karpenter drains on
    the notice. The plan then models those reclaims as unannounced: no final save, the
    work since the last checkpoint lost (``plan.simulation.preemption``)."""
    karpenter_pools_key: str = "spotproof:cloud"
    """The stack setting that declares the cloud's Karpenter pools, where the plan files
    what it says of them."""
    unique_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per resource type, the inputs that name it where the cloud requires names unique:
    a second create with the same names fails with "already exists"
    (``plan.simulation.uniqueness``)."""

    @property
    def grace_seconds(self) -> int:
        """Default (and largest) ``terminationGracePeriodSeconds`` on the cloud's own spot
        capacity: what the preemption path delivers, the notice less its delivery. A longer
        period is cut short when the node goes away, and the final save with it. A pool may
        leave more (a GKE spot pool's ``shutdownSeconds``:
        ``fleet.pools.CapacityPool.reclaim_grace_seconds``)."""
        return self.preemption_notice_seconds - self.interruption_delivery_seconds
