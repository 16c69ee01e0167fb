"""GKE node pools, one function per pool class; taints and labels come from the contract.

GKE holds one machine type per pool, so a diversified spot fleet is several of these.
Spot and flex-start pools use ``location_policy="ANY"``: the autoscaler takes capacity in
whichever zone has it instead of balancing, which is what makes spot obtainable at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from spotproof import scheduling
from spotproof.catalog import gke as gke_catalog
from spotproof.spec.types import FleetSpec, FlexStartPool, GpuPool, PoolClass, Taint

CLOUD_PLATFORM_SCOPE = ["https://www.googleapis.com/auth/cloud-platform"]


@dataclass(frozen=True)
class PoolContext:
    """What every pool of one cluster shares."""

    spec: FleetSpec
    cluster: gcp.container.Cluster
    service_account: pulumi.Input[str]
    """Email of the nodes' least-privileged Google service account."""
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
        spec = self.spec
        contract = scheduling.contract(pool_class, spec.cloud)
        return gcp.container.NodePool(
            f"{spec.stack}-{name}",
            name=name,
            cluster=self.cluster.name,
            location=spec.region,
            project=spec.project,
            node_config={
                "machine_type": machine_type,
                "disk_size_gb": disk_gb,
                "disk_type": gke_catalog.boot_disk_type(machine_type),
                "service_account": self.service_account,
                "oauth_scopes": CLOUD_PLATFORM_SCOPE,
                "labels": {**contract.labels, **(extra_labels or {})},
                "taints": scheduling.cloud_taints([*contract.taints, *extra_taints]),
                "resource_labels": {
                    "spotproof-stack": spec.stack,
                    "spotproof-pool-class": pool_class.value,
                },
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


def system_pool(context: PoolContext) -> gcp.container.NodePool:
    """On-demand nodes for add-ons, tainted ``CriticalAddonsOnly`` so nothing else lands there."""
    pool = context.spec.system_pool
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


def gpu_pool(context: PoolContext, pool: GpuPool) -> gcp.container.NodePool:
    """One machine type of spot (or on-demand fallback) GPU nodes, scaling from zero."""
    spot = pool.pool_class is PoolClass.SPOT_GPU
    return context.node_pool(
        pool.name,
        pool.pool_class,
        machine_type=pool.machine_type,
        disk_gb=pool.disk_gb,
        extra_taints=pool.extra_taints,
        extra_labels=pool.extra_labels,
        node_config={
            "spot": spot,
            "guest_accelerators": _accelerators(pool.gpu_type, pool.gpus_per_node),
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


def flex_start_pool(context: PoolContext, pool: FlexStartPool) -> gcp.container.NodePool:
    """A DWS flex-start pool: GKE obtains the GPUs when they free up and keeps each node for
    at most ``max_run_hours``. GKE requires no reservation, auto-repair off and autoscaling
    from zero with location policy ANY; queued provisioning adds all-or-nothing gangs."""
    return context.node_pool(
        pool.name,
        PoolClass.FLEX_START,
        machine_type=pool.machine_type,
        disk_gb=pool.disk_gb,
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
