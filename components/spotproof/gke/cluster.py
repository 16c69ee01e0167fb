"""``spotproof:gke:HybridCluster``: a regional GKE Standard cluster for spot GPU work."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import Cloud, gke_spot, kueue
from spotproof.catalog import gke as gke_catalog
from spotproof.cloud_tags import stack_tags
from spotproof.fleet import BatchSpec, FleetSpec, PoolClass
from spotproof.fleet.errors import SpecError
from spotproof.fleet.gke import GkeFleet
from spotproof.fleet.gke_pools import FlexStartPool
from spotproof.gke import pools
from spotproof.gke.api import api_endpoint, api_server, kubeconfig
from spotproof.gke.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.gke.compute_class import ComputeClass, ComputeClassArgs
from spotproof.gke.drill import DrillGrant, DrillGrantArgs
from spotproof.gke.monitoring import Monitoring, MonitoringArgs, cluster_monitoring_config
from spotproof.gke.names import service_account_id, service_account_member
from spotproof.gke.network import Network, NetworkArgs, joined
from spotproof.gke.pools import GpuNodePools, GpuNodePoolsArgs
from spotproof.gke.work_queue import WorkQueue, WorkQueueArgs
from spotproof.kube.cluster import ClusterForWorkloads, trainer_account
from spotproof.kube.provisioning_queue import ProvisioningQueue, ProvisioningQueueArgs
from spotproof.kube.workload import LocalQueueRef, ServiceAccountRef, TargetPlacement, reclaim_grace
from spotproof.observability.stack import stack_monitoring

# Least privilege for nodes: write logs and metrics, pull images; nothing else.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")


@dataclass
class HybridClusterArgs:
    fleet: FleetSpec
    """A GKE fleet (``fleet.platform`` is a ``GkeFleet``), e.g. from ``fleet_from_config``."""


class HybridCluster(ClusterForWorkloads):
    """A tainted on-demand system pool, diversified spot GPU pools, an optional on-demand
    GPU fallback and DWS flex-start pool, node auto-provisioning with GPU limits, Workload
    Identity, the regional checkpoint bucket, the Pub/Sub work queue with
    ``spotproof:batch``, the cluster-wide Kubernetes baseline and, with
    ``spotproof:monitoring`` on, Managed Service for Prometheus, alert policies and a
    dashboard (``gke.monitoring``).

    The default node pool is removed: every pool is declared here, each with the taints
    and labels of its class from ``spotproof.scheduling``. The kubeconfig authenticates
    with ``gke-gcloud-auth-plugin``; a queued flex-start pool's queue is among the
    :attr:`controllers`.
    """

    bucket: CheckpointBucket
    gpu_pools: GpuNodePools
    monitoring: Monitoring | None = None

    def __init__(
        self, name: str, args: HybridClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:HybridCluster", name, None, opts)
        spec = args.fleet
        if not isinstance(spec.platform, GkeFleet):
            raise TypeError(f"spotproof.gke.HybridCluster needs a GKE fleet, not {spec.cloud}")
        gke = self._gke = spec.platform
        child = pulumi.ResourceOptions(parent=self)
        monitored = stack_monitoring(
            spec, batch_queue=subscription_path(gke.project, name) if spec.batch else None
        )

        nodes = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=service_account_id(name, "nodes"),
            project=gke.project,
            display_name=f"spotproof nodes ({name})",
            opts=child,
        )
        node_roles = [
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.split('/')[1]}",
                project=gke.project,
                role=role,
                member=service_account_member(nodes.email),
                opts=child,
            )
            for role in NODE_ROLES
        ]

        if gke.network.existing is not None:
            addresses = joined(gke.network.existing)
        else:
            addresses = Network(
                f"{name}-network",
                NetworkArgs(
                    network=gke.network, project=gke.project, region=spec.region, name_prefix=name
                ),
                opts=child,
            ).addresses
        cluster = gcp.container.Cluster(
            name,
            name=name,
            project=gke.project,
            location=spec.region,
            # A cluster cannot be created without a pool; the default one is removed at once
            # so that every pool is declared, tainted and labelled by spotproof.
            remove_default_node_pool=True,
            initial_node_count=1,
            min_master_version=_min_master_version(spec),
            release_channel={"channel": "REGULAR"},
            networking_mode="VPC_NATIVE",
            network=addresses.network,
            subnetwork=addresses.subnetwork,
            ip_allocation_policy={
                "cluster_secondary_range_name": addresses.pods_range,
                "services_secondary_range_name": addresses.services_range,
            },
            # Dataplane V2 (Cilium) enforces NetworkPolicy itself; the legacy network
            # policy add-on must stay off beside it
            # (https://cloud.google.com/kubernetes-engine/docs/concepts/dataplane-v2).
            datapath_provider="ADVANCED_DATAPATH",
            workload_identity_config={"workload_pool": f"{gke.project}.svc.id.goog"},
            **api_endpoint(spec.api_access),
            cluster_autoscaling=self._autoprovisioning(spec, nodes.email),
            # Unmonitored, the cluster keeps GKE's defaults, as it always has.
            **({"monitoring_config": cluster_monitoring_config()} if monitored else {}),
            deletion_protection=spec.protect,
            resource_labels=stack_tags(spec.stack, env=spec.environment),
            opts=pulumi.ResourceOptions(parent=self, protect=spec.protect),
        )

        system = pools.system_pool(
            pools.PoolContext(
                cluster_name=cluster.name,
                project=gke.project,
                location=spec.region,
                service_account=nodes.email,
                prefix=name,
                opts=pulumi.ResourceOptions(parent=self, depends_on=node_roles),
            ),
            spec.system_pool,
        )
        self.gpu_pools = GpuNodePools(
            f"{name}-gpu",
            GpuNodePoolsArgs(
                cluster_name=cluster.name,
                project=gke.project,
                location=spec.region,
                node_service_account=nodes.email,
                name_prefix=name,
                pools=gke.gpu_pools,
                flex_start=gke.flex_start,
                compute_classes=gke.compute_classes,
                ready=node_roles,
            ),
            opts=child,
        )

        trainer = trainer_account(spec.smoke_test)
        bucket = CheckpointBucket(
            f"{name}-checkpoints",
            CheckpointBucketArgs(
                bucket=spec.bucket,
                project=gke.project,
                trainer=trainer,
                name_prefix=name,
                protect=spec.protect,
            ),
            opts=child,
        )

        config = pulumi.Output.secret(
            pulumi.Output.all(
                cluster.name, api_server(cluster, spec.api_access), cluster.master_auth
            ).apply(
                lambda parts: kubeconfig(parts[0], parts[1], parts[2]["cluster_ca_certificate"])
            )
        )
        # Kubernetes objects wait for the system pool: admission webhooks and add-ons need a node.
        kueue = self._connect(
            name, spec, cluster_name=cluster.name, kubeconfig=config, depends_on=[system]
        )

        def work_queue(batch: BatchSpec, worker: ServiceAccountRef) -> WorkQueue:
            return WorkQueue(
                f"{name}-work",
                WorkQueueArgs(
                    batch=batch,
                    project=gke.project,
                    bucket_name=bucket.name,
                    worker=worker,
                    name_prefix=name,
                ),
                opts=child,
            )

        for compute_class in gke.compute_classes:
            # The class exists before any workload that selects it; its pools carry its marks.
            self.controllers.append(
                ComputeClass(
                    f"{name}-{compute_class.name}",
                    ComputeClassArgs(compute_class, gke.pools, self.provider),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self.gpu_pools]),
                )
            )
        self._trainer_and_batch(name, spec, bucket, work_queue)
        if monitored is not None:
            self.monitoring = Monitoring(
                f"{name}-monitoring",
                MonitoringArgs.of_stack(
                    monitored,
                    project=gke.project,
                    cluster_name=name,
                    provider=self.provider,
                    ready=[system],
                    namespaces_ready=self.namespaces,
                ),
                opts=child,
            )
            self.monitoring_outputs = self.monitoring.outputs
        self._queue: LocalQueueRef | None = None
        flex = gke.flex_start
        if kueue is not None and flex is not None and flex.queued_provisioning:
            queue = ProvisioningQueue(
                f"{name}-{flex.name}-queue",
                queued_pool_queue(flex, trainer.namespace, self.provider, kueue),
                opts=child,
            )
            self._queue = LocalQueueRef(trainer.namespace, queue.queue_name)
            self.controllers = [*self.controllers, queue]
        if spec.drill is not None:
            self.drill_grant = DrillGrant(
                f"{name}-drill",
                DrillGrantArgs(gke.project, spec.region, name, spec.drill.principals),
                opts=child,
            ).outputs
        self._register(self.gpu_pools.pool_names)

    def placement(self, target: PoolClass) -> TargetPlacement:
        """A workload aimed at ``target`` requires one of its pools' GPU models: GKE labels
        each node with its accelerator, and auto-provisioning creates pools only for the
        model a pending pod asks for."""
        pools = [p for p in self._gke.pools if p.pool_class is target]
        feeding = next((c for c in self._gke.compute_classes if target in c.fallback), None)
        if feeding is not None:
            raise SpecError(
                "HybridCluster.placement",
                target.value,
                f"its pools are compute class {feeding.name}'s fallback, tainted for that "
                "class alone, so nothing aimed at them directly would ever schedule",
                f"{feeding.target.value}, which tries them after its own pools",
            )
        through = next((c for c in self._gke.compute_classes if c.target is target), None)
        if through is not None:
            # Each rung's GPU model is the class's to choose: no accelerator selector.
            return TargetPlacement(
                target,
                fallback=list(through.fallback),
                compute_class=through.name,
                max_grace_seconds=reclaim_grace(Cloud.GKE, target, pools),
            )
        return TargetPlacement(
            target,
            accelerators=sorted({p.gpu_type for p in pools}),
            queue=self._queue if target is PoolClass.FLEX_START else None,
            max_grace_seconds=reclaim_grace(Cloud.GKE, target, pools),
        )

    @staticmethod
    def _autoprovisioning(spec: FleetSpec, node_account: pulumi.Output[str]) -> dict:
        """Node auto-provisioning: pools for pods nothing declared fits, within hard limits."""
        assert isinstance(spec.platform, GkeFleet)
        nap = spec.platform.autoprovisioning
        if not nap.enabled:
            return {"enabled": False}
        limits = [
            {"resource_type": "cpu", "minimum": 0, "maximum": nap.max_cpu},
            {"resource_type": "memory", "minimum": 0, "maximum": nap.max_memory_gb},
            *(
                {"resource_type": gpu, "minimum": 0, "maximum": limit}
                for gpu, limit in sorted(nap.gpu_limits.items())
            ),
        ]
        return {
            "enabled": True,
            "autoscaling_profile": "OPTIMIZE_UTILIZATION",
            "resource_limits": limits,
            "auto_provisioning_defaults": {
                "service_account": node_account,
                "oauth_scopes": pools.CLOUD_PLATFORM_SCOPE,
                "management": {"auto_repair": True, "auto_upgrade": True},
                # As the declared pools: secure boot is off unless asked for. GKE's own
                # GPU drivers are signed, so GPU nodes boot with it.
                "shielded_instance_config": {
                    "enable_secure_boot": True,
                    "enable_integrity_monitoring": True,
                },
            },
        }


def _min_master_version(spec: FleetSpec) -> str:
    """The stack's minor version, or the first patch that takes a spot pool's longer
    shutdown where one asks for it and the minor alone might give an older one."""
    assert isinstance(spec.platform, GkeFleet)
    long_shutdown = any(pool.long_shutdown for pool in spec.platform.gpu_pools)
    first = ".".join(str(part) for part in gke_spot.LONG_SHUTDOWN_MIN_MINOR)
    if long_shutdown and spec.kubernetes_version == first:
        return gke_spot.LONG_SHUTDOWN_MIN_VERSION
    return spec.kubernetes_version


def subscription_path(project: str, name: str) -> str:
    """The Pub/Sub path of the work queue's subscription, whose age the batch alerts read:
    ``WorkQueue`` names it ``<name_prefix>-work``, and the cluster gives its own name as
    the prefix. Known before the subscription exists, as the rules need a plain string."""
    return f"projects/{project}/subscriptions/{name}-work"


def queued_pool_queue(
    pool: FlexStartPool, namespace: str, provider: k8s.Provider, controller: pulumi.Resource
) -> ProvisioningQueueArgs:
    """The Kueue queue for a queued flex-start pool. Its quota is the pool at its maximum
    (``maxNodes`` in each of its zones), so Kueue admits what DWS could provision at once
    and nothing that could never fit; GKE's pod-set update pins admitted pods to the
    nodes of their own request."""
    zones = len(pool.zones) or gke_catalog.DEFAULT_POOL_ZONES
    nodes = pool.max_nodes * zones
    cpus, memory_gb = gke_catalog.machine_resources(pool.machine_type)
    return ProvisioningQueueArgs(
        pool=pool.name,
        namespace=namespace,
        provisioning_class=kueue.GKE_QUEUED_PROVISIONING_CLASS,
        node_labels=dict(scheduling.contract(PoolClass.FLEX_START, Cloud.GKE).labels),
        quota={
            "cpu": str(nodes * cpus),
            "memory": f"{int(nodes * memory_gb)}G",
            scheduling.GPU_RESOURCE: str(nodes * pool.gpus_per_node),
        },
        pod_set_updates={kueue.GKE_PROVISIONED_NODE_LABEL: kueue.GKE_RESIZE_REQUEST_DETAIL},
        provider=provider,
        controller=controller,
    )
