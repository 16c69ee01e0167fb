"""GKE node pools, one function per pool class; taints and labels come from the contract.

GKE holds one machine type per pool, so a diversified spot fleet is several of these.
Spot and flex-start pools use ``location_policy="ANY"``: the autoscaler takes capacity in
whichever zone has it instead of balancing, which is what makes spot obtainable at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pulumi
import pulumi_gcp as gcp

from spotproof import scheduling
from spotproof.spec.types import FleetSpec, FlexStartPool, GpuPool, PoolClass, Taint

CLOUD_PLATFORM_SCOPE = ["https://www.googleapis.com/auth/cloud-platform"]


def _taints(taints: Iterable[Taint]) -> list[dict[str, str]]:
    return [
        {"key": t.key, "value": t.value, "effect": scheduling.cloud_effect(t.effect)}
        for t in taints
    ]


def _node_config(
    spec: FleetSpec,
    pool_class: PoolClass,
    *,
    machine_type: str,
    disk_gb: int,
    service_account: pulumi.Input[str],
    extra_taints: Iterable[Taint] = (),
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    contract = scheduling.contract(pool_class)
    return {
        "machine_type": machine_type,
        "disk_size_gb": disk_gb,
        "disk_type": "pd-balanced",
        "service_account": service_account,
        "oauth_scopes": CLOUD_PLATFORM_SCOPE,
        "labels": {**contract.labels, **(extra_labels or {})},
        "taints": _taints([*contract.taints, *extra_taints]),
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
    }


def _accelerators(gpu_type: str, count: int) -> list[dict[str, Any]]:
    # GKE installs the driver itself; no DaemonSet to maintain.
    return [
        {
            "type": gpu_type,
            "count": count,
            "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"},
        }
    ]


def system_pool(
    spec: FleetSpec,
    cluster: gcp.container.Cluster,
    service_account: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> gcp.container.NodePool:
    """On-demand nodes for add-ons, tainted ``CriticalAddonsOnly`` so nothing else lands there."""
    pool = spec.system_pool
    return gcp.container.NodePool(
        f"{spec.stack}-system",
        name="system",
        cluster=cluster.name,
        location=spec.region,
        project=spec.project,
        initial_node_count=pool.min_nodes,
        autoscaling={
            "min_node_count": pool.min_nodes,
            "max_node_count": pool.max_nodes,
            "location_policy": "BALANCED",
        },
        management={"auto_repair": True, "auto_upgrade": True},
        node_config={
            **_node_config(
                spec,
                PoolClass.SYSTEM,
                machine_type=pool.machine_type,
                disk_gb=pool.disk_gb,
                service_account=service_account,
            ),
            "spot": False,
        },
        opts=opts,
    )


def gpu_pool(
    spec: FleetSpec,
    pool: GpuPool,
    cluster: gcp.container.Cluster,
    service_account: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> gcp.container.NodePool:
    """One machine type of spot (or on-demand fallback) GPU nodes, scaling from zero."""
    spot = pool.pool_class is PoolClass.SPOT_GPU
    return gcp.container.NodePool(
        f"{spec.stack}-{pool.name}",
        name=pool.name,
        cluster=cluster.name,
        location=spec.region,
        project=spec.project,
        node_locations=list(pool.zones) or None,
        initial_node_count=pool.min_nodes,
        autoscaling={
            "min_node_count": pool.min_nodes,
            "max_node_count": pool.max_nodes,
            "location_policy": "ANY" if spot else "BALANCED",
        },
        management={"auto_repair": True, "auto_upgrade": True},
        # Surging a GPU pool needs spare GPUs that spot rarely has; replace in place instead.
        upgrade_settings={"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1},
        node_config={
            **_node_config(
                spec,
                pool.pool_class,
                machine_type=pool.machine_type,
                disk_gb=pool.disk_gb,
                service_account=service_account,
                extra_taints=pool.extra_taints,
                extra_labels=pool.extra_labels,
            ),
            "spot": spot,
            "guest_accelerators": _accelerators(pool.gpu_type, pool.gpus_per_node),
        },
        opts=opts,
    )


def flex_start_pool(
    spec: FleetSpec,
    pool: FlexStartPool,
    cluster: gcp.container.Cluster,
    service_account: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> gcp.container.NodePool:
    """A DWS flex-start pool: GKE obtains the GPUs when they free up and keeps each node for
    at most ``max_run_hours``. GKE requires no reservation, auto-repair off and autoscaling
    from zero with location policy ANY; queued provisioning adds all-or-nothing gangs."""
    return gcp.container.NodePool(
        f"{spec.stack}-{pool.name}",
        name=pool.name,
        cluster=cluster.name,
        location=spec.region,
        project=spec.project,
        node_locations=list(pool.zones) or None,
        initial_node_count=0,
        autoscaling={
            "min_node_count": 0,
            "max_node_count": pool.max_nodes,
            "location_policy": "ANY",
        },
        management={"auto_repair": False, "auto_upgrade": True},
        queued_provisioning={"enabled": True} if pool.queued_provisioning else None,
        node_config={
            **_node_config(
                spec,
                PoolClass.FLEX_START,
                machine_type=pool.machine_type,
                disk_gb=pool.disk_gb,
                service_account=service_account,
            ),
            "flex_start": True,
            "max_run_duration": f"{pool.max_run_hours * 3600}s",
            "reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"},
            "guest_accelerators": _accelerators(pool.gpu_type, pool.gpus_per_node),
        },
        opts=opts,
    )
