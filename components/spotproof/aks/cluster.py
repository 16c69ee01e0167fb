"""``spotproof:aks:HybridCluster``: an AKS cluster for spot GPU work.

Facts this relies on:

- Workload identity needs the OIDC issuer and the workload identity webhook, both
  enabled on the cluster (``articles/aks/workload-identity-deploy-cluster.md``).
- Networking is Azure CNI overlay with the Cilium dataplane and network policy: node
  auto-provisioning supports it (and recommends Cilium) and refuses Calico
  (``articles/aks/node-auto-provisioning-networking.md``).
- Node auto-provisioning: ``nodeProvisioningProfile.mode: Auto`` with
  ``defaultNodePools: None`` runs only the NodePools declared here
  (``articles/aks/use-node-auto-provisioning.md``); it needs a managed identity, and
  agent pools of such a cluster cannot autoscale (pulumi-azure-native
  ``NodeProvisioningMode.AUTO``), so the system pool then has a fixed size.
- A spot pool cannot be the cluster's first (default) pool
  (``articles/aks/spot-node-pool.md``): the System pool is declared with the cluster and
  every GPU pool after it.
- With ``spotproof:monitoring`` on, the cluster runs Azure Monitor's metrics add-on
  (``aks.monitoring``). Azure Storage queues publish no message-age metric:
  ``queueServices`` offers only ``QueueCapacity``, ``QueueCount`` and
  ``QueueMessageCount``, hourly, as Azure platform metrics rather than Prometheus series
  (https://learn.microsoft.com/azure/storage/queues/monitor-queue-storage-reference), so
  the batch rules judge the work from the workers' own series; the queue's name only
  tells ``stack_monitoring`` there is one.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_azure_native as azure

from spotproof import scheduling
from spotproof.aks.autoprovisioning import AutoProvisionedPools, AutoProvisionedPoolsArgs
from spotproof.aks.bucket import CONTAINER, CheckpointBucket, CheckpointBucketArgs
from spotproof.aks.drill import DrillGrant, DrillGrantArgs
from spotproof.aks.monitoring import Monitoring, MonitoringArgs, cluster_monitor_profile
from spotproof.aks.pools import GpuAgentPools, GpuAgentPoolsArgs, system_pool_profile, taints_of
from spotproof.aks.work_queue import WorkQueue, WorkQueueArgs
from spotproof.catalog import Cloud
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import ApiAccess, BatchSpec, Capacity, FleetSpec, PoolClass, Taint
from spotproof.fleet.aks import PLATFORM_SPOT_TAINT, AksFleet, GpuDriver
from spotproof.kube.cluster import ClusterForWorkloads, trainer_account
from spotproof.kube.device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, reclaim_grace
from spotproof.observability.dashboards import grafana_dashboard
from spotproof.observability.stack import StackMonitoring, stack_monitoring


@dataclass
class HybridClusterArgs:
    fleet: FleetSpec
    """An AKS fleet (``fleet.platform`` is an ``AksFleet``), e.g. from ``fleet_from_config``."""


class HybridCluster(ClusterForWorkloads):
    """A resource group (or the stack's existing one), a cluster with a tainted System
    pool, workload identity and Cilium, spot GPU agent pools or node auto-provisioning
    NodePools, the checkpoint storage and its identity, the storage work queue with
    ``spotproof:batch``, Azure Monitor managed Prometheus with ``spotproof:monitoring``, and
    the Kubernetes baseline. The kubeconfig is the cluster user's
    (``listClusterUserCredential``).
    """

    bucket: CheckpointBucket
    gpu_pools: GpuAgentPools
    resource_group_name: pulumi.Output[str]
    oidc_issuer_url: pulumi.Output[str]

    def __init__(
        self, name: str, args: HybridClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:aks:HybridCluster", name, None, opts)
        spec = args.fleet
        if not isinstance(spec.platform, AksFleet):
            raise TypeError(f"spotproof.aks.HybridCluster needs an AKS fleet, not {spec.cloud}")
        aks = self._aks = spec.platform
        child = pulumi.ResourceOptions(parent=self)
        tags = stack_tags(spec.stack, env=spec.environment)

        if aks.resource_group:
            group: pulumi.Output[str] = pulumi.Output.from_input(aks.resource_group)
        else:
            group = azure.resources.ResourceGroup(
                f"{name}-group",
                resource_group_name=name,
                location=spec.region,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, protect=spec.protect),
            ).name

        # The WorkQueue's queue (aks.work_queue names it PREFIX-work).
        monitoring = stack_monitoring(spec, batch_queue=f"{name}-work")
        system = system_pool_profile(
            spec.system_pool, spec.kubernetes_version, autoscaled=not aks.node_auto_provisioning
        )
        cluster = azure.containerservice.ManagedCluster(
            name,
            resource_name_=name,
            resource_group_name=group,
            location=spec.region,
            dns_prefix=name,
            kubernetes_version=spec.kubernetes_version,
            identity={"type": azure.containerservice.ResourceIdentityType.SYSTEM_ASSIGNED},
            sku={"name": "Base", "tier": "Standard" if spec.protect else "Free"},
            agent_pool_profiles=[system],
            oidc_issuer_profile={"enabled": True},
            api_server_access_profile=api_server_access(spec.api_access),
            security_profile={"workload_identity": {"enabled": True}},
            network_profile={
                "network_plugin": "azure",
                "network_plugin_mode": "overlay",
                "network_dataplane": "cilium",
                "network_policy": "cilium",
            },
            node_provisioning_profile={"mode": "Auto", "default_node_pools": "None"}
            if aks.node_auto_provisioning
            else {"mode": "Manual"},
            azure_monitor_profile=cluster_monitor_profile() if monitoring else None,
            tags=tags,
            # The autoscaler changes the system pool's count; that is not drift.
            opts=pulumi.ResourceOptions(
                parent=self, protect=spec.protect, ignore_changes=["agentPoolProfiles[0].count"]
            ),
        )
        self.resource_group_name = group
        self.oidc_issuer_url = cluster.oidc_issuer_profile.apply(
            lambda profile: (profile.issuer_url if profile else None) or ""
        )

        self.gpu_pools = GpuAgentPools(
            f"{name}-gpu",
            GpuAgentPoolsArgs(
                cluster_name=cluster.name,
                resource_group_name=group,
                pools=aks.gpu_pools,
                kubernetes_version=spec.kubernetes_version,
            ),
            opts=child,
        )

        bucket = CheckpointBucket(
            f"{name}-checkpoints",
            CheckpointBucketArgs(
                bucket=spec.bucket,
                resource_group_name=group,
                location=spec.region,
                oidc_issuer_url=self.oidc_issuer_url,
                trainer=trainer_account(spec.smoke_test),
                name_prefix=name,
                protect=spec.protect,
            ),
            opts=child,
        )

        credentials = azure.containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=group,
            resource_name=cluster.name,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        config = pulumi.Output.secret(
            credentials.kubeconfigs.apply(
                lambda configs: base64.b64decode(configs[0].value).decode()
            )
        )
        self._connect(
            name, spec, cluster_name=cluster.name, kubeconfig=config, depends_on=[cluster]
        )

        def work_queue(batch: BatchSpec, worker: ServiceAccountRef) -> WorkQueue:
            return WorkQueue(
                f"{name}-work",
                WorkQueueArgs(
                    batch=batch,
                    resource_group_name=group,
                    location=spec.region,
                    account_name=bucket.name,
                    account=spec.bucket.name,
                    container_id=bucket.container_id,
                    container=CONTAINER,
                    oidc_issuer_url=self.oidc_issuer_url,
                    worker=worker,
                    name_prefix=name,
                ),
                opts=child,
            )

        self._trainer_and_batch(name, spec, bucket, work_queue)
        if monitoring is not None:
            self._monitor(name, spec, monitoring, cluster, group)
        nap_names: list[str] = []
        if aks.node_auto_provisioning:
            nap = AutoProvisionedPools(
                f"{name}-autoprovisioned",
                AutoProvisionedPoolsArgs(pools=aks.auto_provisioned_pools),
                opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
            )
            nap_names = nap.pool_names
        advertised = gpu_node_taints(aks)
        if advertised:
            # AKS installs the driver only: without the plugin no node offers nvidia.com/gpu.
            NvidiaDevicePlugin(
                f"{name}-device-plugin",
                NvidiaDevicePluginArgs(provider=self.provider, taints=advertised),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster]),
            )
        if spec.drill is not None:
            self.drill_grant = DrillGrant(
                f"{name}-drill",
                DrillGrantArgs(name, cluster.node_resource_group, spec.drill.principals),
                opts=child,
            ).outputs
        self._register(
            [*self.gpu_pools.pool_names, *nap_names], oidc_issuer_url=self.oidc_issuer_url
        )

    def _monitor(
        self,
        name: str,
        spec: FleetSpec,
        monitoring: StackMonitoring,
        cluster: azure.containerservice.ManagedCluster,
        group: pulumi.Input[str],
    ) -> None:
        """The stack's rules, scrape and dashboard in Azure Monitor, once the cluster runs the
        add-on and the trainer's namespace exists; :attr:`monitoring_outputs` says where."""
        settings = monitoring.settings
        component = Monitoring(
            f"{name}-monitoring",
            MonitoringArgs(
                resource_group_name=group,
                location=spec.region,
                cluster_id=cluster.id,
                cluster_name=cluster.name,
                provider=self.provider,
                rule_groups=monitoring.rule_groups,
                namespaces=monitoring.namespaces,
                action_group_ids=settings.notify,
                scrape_interval_seconds=settings.scrape_interval_seconds,
                grafana_dashboard=grafana_dashboard(monitoring.dashboard_title),
                ready=self.namespaces,
                name_prefix=name,
                tags=stack_tags(spec.stack, env=spec.environment),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.monitoring_outputs = {
            "workspace_id": component.workspace_id,
            "query_endpoint": component.query_endpoint,
            "grafana_dashboard_json": component.grafana_dashboard_json,
        }

    def placement(self, target: PoolClass) -> TargetPlacement:
        """Spot work tolerates the taint AKS puts on spot agent pools and carries no
        disruption budget there (AKS drains a preempted node through evictions, with no
        bound like a NodePool's ``terminationGracePeriod``); with node auto-provisioning it
        may fall back to an on-demand NodePool, which the weights try only after spot."""
        spot_agent_pools = any(p.capacity is Capacity.SPOT for p in self._aks.gpu_pools)
        falls_back = any(p.capacity is Capacity.ON_DEMAND for p in self._aks.auto_provisioned_pools)
        if target is not PoolClass.SPOT_GPU:
            return TargetPlacement(target)
        return TargetPlacement(
            target,
            fallback=[PoolClass.ON_DEMAND_GPU] if falls_back else [],
            reclaim_honours_budgets=spot_agent_pools,
            platform_taints=[PLATFORM_SPOT_TAINT] if spot_agent_pools else [],
            max_grace_seconds=reclaim_grace(Cloud.AKS, target),
        )


def gpu_node_taints(aks: AksFleet) -> list[Taint]:
    """Every taint of the GPU nodes whose driver AKS installs (``gpuDriver: Install``):
    the nodes NVIDIA's device plugin must run on. Pools with ``gpuDriver: None`` are the
    GPU Operator's, which brings its own plugin."""
    taints: list[Taint] = []
    for pool in aks.gpu_pools:
        if pool.gpu_driver is GpuDriver.INSTALL:
            taints += taints_of(pool)
    for pool in aks.auto_provisioned_pools:
        if pool.gpu_driver is GpuDriver.INSTALL:
            taints += [*scheduling.contract(pool.pool_class).taints, *pool.extra_taints]
    return list(dict.fromkeys(taints))


def api_server_access(access: ApiAccess) -> dict[str, Any]:
    """``apiServerAccessProfile`` that closes the API to everyone but ``access``: the
    stack's ranges (``authorizedIPRanges``), or a private cluster whose API server has no
    public address (https://learn.microsoft.com/azure/aks/api-server-authorized-ip-ranges,
    https://learn.microsoft.com/azure/aks/private-clusters)."""
    if access.private_endpoint:
        return {"enable_private_cluster": True}
    return {"authorized_ip_ranges": list(access.authorized_networks)}
