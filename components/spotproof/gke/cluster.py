"""``spotproof:gke:HybridCluster``: a regional GKE Standard cluster for spot GPU work."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import yaml

from spotproof.gke import pools
from spotproof.gke.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.gke.names import service_account_id, service_account_member
from spotproof.kube import ClusterBaseline, ClusterBaselineArgs
from spotproof.kube.smoke import SERVICE_ACCOUNT_NAME
from spotproof.spec.types import FleetSpec

# Least privilege for nodes: write logs and metrics, pull images; nothing else.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")


@dataclass
class HybridClusterArgs:
    spec: FleetSpec


class HybridCluster(pulumi.ComponentResource):
    """A tainted on-demand system pool, diversified spot GPU pools, an optional on-demand
    GPU fallback and DWS flex-start pool, node auto-provisioning with GPU limits, Workload
    Identity, the regional checkpoint bucket, and the cluster-wide Kubernetes baseline.

    The default node pool is removed: every pool is declared here, each with the taints
    and labels of its class from ``spotproof.scheduling``.

    Children are Kubernetes objects too; they use :attr:`provider`, built from the
    cluster's own outputs, never an ambient kubeconfig.
    """

    cluster_name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    """A kubeconfig using ``gke-gcloud-auth-plugin``; a secret, as it names the endpoint."""
    provider: k8s.Provider
    bucket: CheckpointBucket
    baseline: ClusterBaseline
    pool_names: list[str]

    def __init__(
        self, name: str, args: HybridClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:HybridCluster", name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)

        nodes = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=service_account_id(spec.stack, "nodes"),
            project=spec.project,
            display_name=f"spotproof nodes ({spec.stack})",
            opts=child,
        )
        node_roles = [
            gcp.projects.IAMMember(
                f"{name}-nodes-{role.split('/')[1]}",
                project=spec.project,
                role=role,
                member=service_account_member(nodes.email),
                opts=child,
            )
            for role in NODE_ROLES
        ]

        cluster = gcp.container.Cluster(
            name,
            name=spec.cluster_name,
            project=spec.project,
            location=spec.region,
            # A cluster cannot be created without a pool; the default one is removed at once
            # so that every pool is declared, tainted and labelled by spotproof.
            remove_default_node_pool=True,
            initial_node_count=1,
            min_master_version=spec.kubernetes_version,
            release_channel={"channel": "REGULAR"},
            networking_mode="VPC_NATIVE",
            ip_allocation_policy={},
            workload_identity_config={"workload_pool": f"{spec.project}.svc.id.goog"},
            cluster_autoscaling=self._autoprovisioning(spec, nodes.email),
            deletion_protection=spec.protect,
            resource_labels={"spotproof-stack": spec.stack, "spotproof-env": spec.environment},
            opts=pulumi.ResourceOptions(parent=self, protect=spec.protect),
        )

        pool_context = pools.PoolContext(
            spec, cluster, nodes.email, pulumi.ResourceOptions(parent=self, depends_on=node_roles)
        )
        system = pools.system_pool(pool_context)
        for pool in spec.gpu_pools:
            pools.gpu_pool(pool_context, pool)
        if spec.flex_start:
            pools.flex_start_pool(pool_context, spec.flex_start)

        namespace = spec.smoke_test.namespace if spec.smoke_test else "spotproof"
        self.bucket = CheckpointBucket(
            f"{name}-checkpoints",
            CheckpointBucketArgs(spec, namespace, SERVICE_ACCOUNT_NAME),
            opts=child,
        )

        self.cluster_name = cluster.name
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(cluster.name, cluster.endpoint, cluster.master_auth).apply(
                lambda parts: kubeconfig(parts[0], parts[1], parts[2]["cluster_ca_certificate"])
            )
        )
        # Kubernetes objects wait for the system pool: admission webhooks and add-ons need a node.
        self.provider = k8s.Provider(
            f"{name}-kubernetes",
            kubeconfig=self.kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[system]),
        )
        self.baseline = ClusterBaseline(
            f"{name}-baseline",
            ClusterBaselineArgs(namespace=namespace),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        self.pool_names = ["system", *(p.name for p in spec.gpu_pools)]
        if spec.flex_start:
            self.pool_names.append(spec.flex_start.name)
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "kubeconfig": self.kubeconfig,
                "bucket_url": self.bucket.url,
                "pool_names": self.pool_names,
            }
        )

    @staticmethod
    def _autoprovisioning(spec: FleetSpec, node_account: pulumi.Output[str]) -> dict:
        """Node auto-provisioning: pools for pods nothing declared fits, within hard limits."""
        nap = spec.autoprovisioning
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
            },
        }


def kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that authenticates with ``gke-gcloud-auth-plugin`` (no static token)."""
    context = f"gke_{cluster_name}"
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": context,
                    "cluster": {
                        "server": f"https://{endpoint}",
                        "certificate-authority-data": ca_certificate,
                    },
                }
            ],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
            "users": [
                {
                    "name": context,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "gke-gcloud-auth-plugin",
                            "provideClusterInfo": True,
                            "installHint": "Install gke-gcloud-auth-plugin: "
                            "gcloud components install gke-gcloud-auth-plugin",
                        }
                    },
                }
            ],
        },
        sort_keys=False,
    )
