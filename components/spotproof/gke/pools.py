"""``spotproof:gke:GpuNodePools``: GPU node pools, one function per pool class, for a
cluster spotproof builds or one the user already has; taints and labels come from the
contract.

GKE holds one machine type per pool, so a diversified spot fleet is several of these.
Spot and flex-start pools use ``location_policy="ANY"``: the autoscaler takes capacity in
whichever zone has it instead of balancing, which is what makes spot obtainable at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from spotproof import scheduling
from spotproof.catalog import Cloud, gke_spot
from spotproof.catalog import gke as gke_catalog
from spotproof.catalog.labels import GKE_COMPUTE_CLASS_LABEL
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import PoolClass, SpecError, SystemPool, Taint
from spotproof.fleet.gke_compute_class import ComputeClassSpec, class_of_pool
from spotproof.fleet.gke_pools import FlexStartPool, GkeGpuPool

CLOUD_PLATFORM_SCOPE = ["https://www.googleapis.com/auth/cloud-platform"]


@dataclass
class GpuNodePoolsArgs:
    cluster_name: pulumi.Input[str]
    """The GKE cluster the pools join; built by ``HybridCluster`` or an existing one."""
    project: pulumi.Input[str]
    location: pulumi.Input[str]
    """The cluster's region (or zone, for a zonal cluster)."""
    node_service_account: pulumi.Input[str]
    """Email of the Google service account the nodes run as; give it only
    ``roles/container.defaultNodeServiceAccount`` and image pull rights."""
    pools: Sequence[GkeGpuPool] = ()
    flex_start: FlexStartPool | None = None
    compute_classes: Sequence[ComputeClassSpec] = ()
    """The ComputeClasses the pools serve: a pool of a class's pool class carries its label
    and taint (``fleet.gke_compute_class``)."""
    ready: Sequence[pulumi.Resource] = ()
    """What must exist before a node boots: the node account's role grants."""
    name_prefix: str | None = None
    """Starts the pools' resource names (``<prefix>-<pool>``); default the component's
    name. Two components of one cluster need different prefixes."""

    def __post_init__(self) -> None:
        # A pool built in a program was judged in the region of its own zones; a location
        # known now (not an Output) must be that region, or the pool fails to create.
        if not isinstance(self.location, str):
            return
        region = gke_catalog.region_of_location(self.location)
        named = [(f"pools[{i}]", pool) for i, pool in enumerate(self.pools)]
        named += [("flex_start", self.flex_start)] if self.flex_start else []
        for where, pool in named:
            for index, zone in enumerate(pool.zones):
                if not zone.startswith(f"{region}-"):
                    raise SpecError(
                        f"GpuNodePoolsArgs.{where}.zones[{index}]",
                        zone,
                        f"not a zone of the cluster's region {region}",
                        f"{region}-a, {region}-b, ...",
                    )


@dataclass(frozen=True)
class PoolContext:
    """What every pool of one cluster shares."""

    cluster_name: pulumi.Input[str]
    project: pulumi.Input[str]
    location: pulumi.Input[str]
    service_account: pulumi.Input[str]
    """Email of the nodes' least-privileged Google service account."""
    prefix: str
    """Starts each pool's resource name: ``<prefix>-<pool>``."""
    opts: pulumi.ResourceOptions

    def node_pool(
        self,
        name: str,
        pool_class: PoolClass,
        *,
        machine_type: str,
        disk_gb: int,
        node_config: dict[str, Any],
        extra_taints: Iterable[Taint] = (),
        extra_labels: dict[str, str] | None = None,
        **pool_args: Any,
    ) -> gcp.container.NodePool:
        """A pool of ``pool_class``: contract taints and labels, Workload Identity metadata,
        shielded nodes; ``node_config`` and ``pool_args`` add what the class needs."""
        contract = scheduling.contract(pool_class, Cloud.GKE)
        return gcp.container.NodePool(
            f"{self.prefix}-{name}",
            name=name,
            cluster=self.cluster_name,
            location=self.location,
            project=self.project,
            node_config={
                "machine_type": machine_type,
                "disk_size_gb": disk_gb,
                "disk_type": gke_catalog.boot_disk_type(machine_type),
                "service_account": self.service_account,
                "oauth_scopes": CLOUD_PLATFORM_SCOPE,
                "labels": {**contract.labels, **(extra_labels or {})},
                "taints": scheduling.cloud_taints([*contract.taints, *extra_taints]),
                "resource_labels": stack_tags(pulumi.get_stack(), pool_class=pool_class.value),
                # Workload Identity needs the GKE metadata server on every node.
                "workload_metadata_config": {"mode": "GKE_METADATA"},
                "shielded_instance_config": {
                    "enable_secure_boot": True,
                    "enable_integrity_monitoring": True,
                },
                **node_config,
            },
            opts=self.opts,
            **pool_args,
        )


def _accelerators(gpu_type: str, count: int) -> list[dict[str, Any]]:
    # GKE installs the driver itself; no DaemonSet to maintain.
    return [
        {
            "type": gpu_type,
            "count": count,
            "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"},
        }
    ]


def system_pool(context: PoolContext, pool: SystemPool) -> gcp.container.NodePool:
    """On-demand nodes for add-ons, tainted so that only GKE's managed components land there."""
    return context.node_pool(
        "system",
        PoolClass.SYSTEM,
        machine_type=pool.machine_type,
        disk_gb=pool.disk_gb,
        node_config={"spot": False},
        initial_node_count=pool.min_nodes,
        autoscaling={
            "min_node_count": pool.min_nodes,
            "max_node_count": pool.max_nodes,
            "location_policy": "BALANCED",
        },
        management={"auto_repair": True, "auto_upgrade": True},
    )


def compute_class_marks(compute_class: str | None) -> tuple[list[Taint], dict[str, str]]:
    """The taint and label a pool carries for the ComputeClass it serves, if any."""
    if compute_class is None:
        return [], {}
    return (
        [scheduling.compute_class_taint(compute_class)],
        {GKE_COMPUTE_CLASS_LABEL: compute_class},
    )


def gpu_pool(
    context: PoolContext, pool: GkeGpuPool, compute_class: str | None = None
) -> gcp.container.NodePool:
    """One machine type of spot (or on-demand fallback) GPU nodes, scaling from zero."""
    spot = pool.pool_class is PoolClass.SPOT_GPU
    class_taints, class_labels = compute_class_marks(compute_class)
    return context.node_pool(
        pool.name,
        pool.pool_class,
        machine_type=pool.machine_type,
        disk_gb=pool.disk_gb,
        extra_taints=[*pool.extra_taints, *class_taints],
        extra_labels={**pool.extra_labels, **class_labels},
        node_config={
            "spot": spot,
            "guest_accelerators": _accelerators(pool.gpu_type, pool.gpus_per_node),
            **_shutdown(pool),
        },
        node_locations=list(pool.zones) or None,
        # With location policy ANY the autoscaler places every node where capacity is;
        # an initial count would pin nodes to each zone at creation instead.
        initial_node_count=0 if spot else pool.min_nodes,
        autoscaling={
            "min_node_count": pool.min_nodes,
            "max_node_count": pool.max_nodes,
            "location_policy": "ANY" if spot else "BALANCED",
        },
        management={"auto_repair": True, "auto_upgrade": True},
        # Surging a GPU pool needs spare GPUs that spot rarely has; replace in place instead.
        upgrade_settings={"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1},
    )


def _shutdown(pool: GkeGpuPool) -> dict[str, Any]:
    """A spot pool's longer graceful shutdown (``catalog.gke_spot``); left out at GKE's default,
    which every control plane version takes without the setting."""
    if pool.reclaim_grace_seconds is None or not pool.long_shutdown:
        return {}
    return {
        "kubelet_config": {
            "shutdown_grace_period_seconds": pool.shutdown_seconds,
            "shutdown_grace_period_critical_pods_seconds": (
                gke_spot.CRITICAL_PODS_SHUTDOWN_SECONDS
            ),
        }
    }


def flex_start_pool(
    context: PoolContext, pool: FlexStartPool, compute_class: str | None = None
) -> gcp.container.NodePool:
    """A DWS flex-start pool: GKE obtains the GPUs when they free up and keeps each node for
    at most ``max_run_hours``. GKE requires no reservation, auto-repair off and autoscaling
    from zero with location policy ANY; queued provisioning adds all-or-nothing gangs."""
    class_taints, class_labels = compute_class_marks(compute_class)
    return context.node_pool(
        pool.name,
        PoolClass.FLEX_START,
        machine_type=pool.machine_type,
        disk_gb=pool.disk_gb,
        extra_taints=class_taints,
        extra_labels=class_labels,
        node_config={
            "flex_start": True,
            "max_run_duration": f"{pool.max_run_hours * 3600}s",
            "reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"},
            "guest_accelerators": _accelerators(pool.gpu_type, pool.gpus_per_node),
        },
        node_locations=list(pool.zones) or None,
        initial_node_count=0,
        autoscaling={
            "min_node_count": 0,
            "max_node_count": pool.max_nodes,
            "location_policy": "ANY",
        },
        management={"auto_repair": False, "auto_upgrade": True},
        queued_provisioning={"enabled": True} if pool.queued_provisioning else None,
    )


class GpuNodePools(pulumi.ComponentResource):
    """Spot GPU pools (one machine type each), on-demand fallbacks and a flex-start pool,
    scaling from zero, each tainted and labelled for its pool class."""

    pool_names: list[str]

    def __init__(
        self, name: str, args: GpuNodePoolsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:GpuNodePools", name, None, opts)
        context = PoolContext(
            cluster_name=args.cluster_name,
            project=args.project,
            location=args.location,
            service_account=args.node_service_account,
            prefix=args.name_prefix or name,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.ready)),
        )
        served = class_of_pool(tuple(args.compute_classes))
        for pool in args.pools:
            gpu_pool(context, pool, served.get(pool.pool_class))
        if args.flex_start:
            flex_start_pool(context, args.flex_start, served.get(PoolClass.FLEX_START))
        self.pool_names = [pool.name for pool in args.pools]
        if args.flex_start:
            self.pool_names.append(args.flex_start.name)
        self.register_outputs({"pool_names": self.pool_names})
