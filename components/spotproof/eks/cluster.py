"""``spotproof:eks:HybridCluster``: an EKS cluster for spot GPU work, with Karpenter."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import yaml

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.cloud_tags import stack_tags
from spotproof.eks import iam_documents, roles
from spotproof.eks.bucket import CheckpointBucket, CheckpointBucketArgs
from spotproof.eks.drill import DrillGrant, DrillGrantArgs
from spotproof.eks.karpenter import Karpenter, KarpenterArgs
from spotproof.eks.monitoring import for_cluster
from spotproof.eks.network import Network
from spotproof.eks.work_queue import WorkQueue, WorkQueueArgs, work_queue_name
from spotproof.fleet import ApiAccess, BatchSpec, FleetSpec, PoolClass
from spotproof.fleet.eks import EksFleet
from spotproof.kube.cluster import ClusterForWorkloads, trainer_account
from spotproof.kube.workload import ServiceAccountRef, TargetPlacement, reclaim_grace
from spotproof.observability.stack import stack_monitoring

CONTROL_PLANE_LOGS = ["api", "audit", "authenticator"]
SYSTEM_AMI = "AL2023_x86_64_STANDARD"
SYSTEM_ROOT_DEVICE = "/dev/xvda"
"""The root volume of the EKS-optimized AL2023 AMI."""
SYSTEM_METADATA_OPTIONS = {
    "http_endpoint": "enabled",
    "http_tokens": "required",
    "http_put_response_hop_limit": 1,
}
"""IMDSv2 only, one hop. Without a launch template of its own a managed node group gets
EKS's, whose hop limit of 2 lets any pod on the node read the node role's credentials
(EKS best practices, "Restrict access to the instance profile assigned to the worker
node": https://docs.aws.amazon.com/eks/latest/best-practices/identity-and-access-management.html).
What runs on system nodes gets credentials from Pod Identity or runs on the host network
(the VPC CNI), neither of which needs the extra hop. The endpoint stays enabled: the
node's own agents read it."""


def coredns_configuration() -> dict[str, Any]:
    """CoreDNS add-on values: it tolerates the system taint and is required onto the
    system node group, so cluster DNS never rides on capacity that can be reclaimed.

    ``affinity`` replaces the add-on's default one whole, so the default's preference for
    spreading replicas over nodes is restated here; without it both replicas may share a
    node and DNS goes down with it."""
    return {
        "tolerations": [{"key": scheduling.SYSTEM_TAINT.key, "operator": "Exists"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {
                                "matchExpressions": [
                                    {"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}
                                ]
                            },
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            },
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": scheduling.POOL_CLASS_LABEL,
                                    "operator": "In",
                                    "values": [PoolClass.SYSTEM.value],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
"""The VPC CNI enforces NetworkPolicy only when asked (a string, as the add-on's schema
takes it); its node agent then runs beside ``aws-node`` on every node. Needs add-on
v1.14.0-eksbuild.3 or later and EKS 1.25 or later
(https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy-configure.html).
Without it the training namespace's NetworkPolicies would be accepted and ignored."""

POD_IDENTITY_AGENT_CONFIGURATION = {"tolerations": [{"operator": "Exists"}]}
"""The agent must run on every node, tainted GPU nodes included, or pods there get no
credentials."""


@dataclass
class HybridClusterArgs:
    fleet: FleetSpec
    """An EKS fleet (``fleet.platform`` is an ``EksFleet``), e.g. from ``fleet_from_config``."""


class HybridCluster(ClusterForWorkloads):
    """An EKS cluster in API authentication mode (access entries, no aws-auth ConfigMap),
    in the stack's subnets or a minimal VPC; an ON_DEMAND managed node group as the system
    pool, tainted ``CriticalAddonsOnly``; the Pod Identity agent; Karpenter with
    interruption handling and GPU NodePools; the S3 checkpoint bucket, whose trainer role
    Pod Identity hands the trainer's service account; the SQS work queue with
    ``spotproof:batch``; AMP (Amazon Managed Service for Prometheus) with monitoring on; the
    cluster-wide Kubernetes baseline. The kubeconfig authenticates with ``aws eks get-token``.
    """

    bucket: CheckpointBucket
    karpenter: Karpenter

    def __init__(
        self, name: str, args: HybridClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:eks:HybridCluster", name, None, opts)
        spec = args.fleet
        if not isinstance(spec.platform, EksFleet):
            raise TypeError(f"spotproof.eks.HybridCluster needs an EKS fleet, not {spec.cloud}")
        eks = spec.platform
        child = pulumi.ResourceOptions(parent=self)
        partition = aws.get_partition_output(opts=pulumi.InvokeOptions(parent=self)).partition
        tags = stack_tags(spec.stack, env=spec.environment)

        network = Network(f"{name}-network", name, eks.network, opts=child)
        cluster_role, cluster_grants = roles.role(
            f"{name}-cluster",
            role_name=f"{name}-cluster",
            trust=iam_documents.service_trust("eks.amazonaws.com"),
            partition=partition,
            managed_policies=iam_documents.CLUSTER_POLICIES,
            description=f"EKS control plane of {name}",
            opts=child,
        )
        cluster = aws.eks.Cluster(
            name,
            name=name,
            region=spec.region,
            version=spec.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config={"subnet_ids": network.subnet_ids, **api_endpoint(spec.api_access)},
            access_config={
                "authentication_mode": "API",
                "bootstrap_cluster_creator_admin_permissions": True,
            },
            enabled_cluster_log_types=CONTROL_PLANE_LOGS,
            deletion_protection=spec.protect,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self, protect=spec.protect, depends_on=cluster_grants
            ),
        )
        # Adopts the VPC CNI EKS installs with every cluster, before nodes need it.
        aws.eks.Addon(
            f"{name}-vpc-cni",
            cluster_name=cluster.name,
            addon_name="vpc-cni",
            configuration_values=json.dumps(VPC_CNI_CONFIGURATION),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=child,
        )
        system = self._system_node_group(
            name, spec=spec, cluster=cluster, network=network, partition=partition, tags=tags
        )
        after_system = pulumi.ResourceOptions(parent=self, depends_on=[system])
        agent = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=cluster.name,
            addon_name="eks-pod-identity-agent",
            configuration_values=json.dumps(POD_IDENTITY_AGENT_CONFIGURATION),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=after_system,
        )
        aws.eks.Addon(
            f"{name}-coredns",
            cluster_name=cluster.name,
            addon_name="coredns",
            configuration_values=json.dumps(coredns_configuration()),
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=after_system,
        )

        config = pulumi.Output.secret(
            pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority).apply(
                lambda parts: kubeconfig(parts[0], parts[1], parts[2]["data"], spec.region)
            )
        )
        self._connect(name, spec, cluster_name=cluster.name, kubeconfig=config, depends_on=[system])
        self.karpenter = Karpenter(
            f"{name}-karpenter",
            KarpenterArgs(
                settings=eks.karpenter,
                cluster_name=cluster.name,
                region=spec.region,
                provider=self.provider,
                name_prefix=name,
                pools=eks.gpu_pools,
                # Karpenter's nodes join through the cluster security group; the subnets
                # are tagged by the network.
                cluster_security_group_id=cluster.vpc_config.cluster_security_group_id,
                ready=[system, agent],
            ),
            opts=child,
        )
        bucket = CheckpointBucket(
            f"{name}-checkpoints",
            CheckpointBucketArgs(
                bucket=spec.bucket,
                region=spec.region,
                cluster_name=cluster.name,
                trainer=trainer_account(spec.smoke_test),
                name_prefix=name,
                protect=spec.protect,
            ),
            opts=child,
        )

        def work_queue(batch: BatchSpec, worker: ServiceAccountRef) -> WorkQueue:
            return WorkQueue(
                f"{name}-work",
                WorkQueueArgs(
                    batch=batch,
                    region=spec.region,
                    cluster_name=cluster.name,
                    bucket_name=bucket.name,
                    bucket_arn=bucket.arn,
                    kms_key=spec.bucket.kms_key,
                    worker=worker,
                    name_prefix=name,
                ),
                opts=child,
            )

        self._trainer_and_batch(name, spec, bucket, work_queue)
        queue = work_queue_name(name) if spec.batch is not None else None
        monitoring = stack_monitoring(spec, batch_queue=queue)
        if monitoring is not None:
            self.monitoring_outputs = for_cluster(
                f"{name}-monitoring",
                monitoring,
                cluster=cluster,
                fleet=eks,
                provider=self.provider,
                region=spec.region,
                queue_name=queue,
                ready=[system, *self.namespaces],
                name_prefix=name,
                opts=child,
            ).stack_outputs
        self._spot_falls_back = bool(spec.pools_of(PoolClass.ON_DEMAND_GPU))
        if spec.drill is not None:
            self.drill_grant = DrillGrant(
                f"{name}-drill",
                DrillGrantArgs(name, spec.region, spec.drill.principals, name_prefix=name),
                opts=child,
            ).outputs
        self._register(self.karpenter.node_pool_names)

    def placement(self, target: PoolClass) -> TargetPlacement:
        """Spot work may fall back to the on-demand NodePool: Karpenter's weights try spot
        first. EKS GPU nodes carry no model label a workload needs to require."""
        fallback = [PoolClass.ON_DEMAND_GPU] if target is PoolClass.SPOT_GPU else []
        return TargetPlacement(
            target,
            fallback=fallback if self._spot_falls_back else [],
            max_grace_seconds=reclaim_grace(Cloud.EKS, target),
        )

    def _system_node_group(
        self,
        name: str,
        *,
        spec: FleetSpec,
        cluster: aws.eks.Cluster,
        network: Network,
        partition: pulumi.Output[str],
        tags: dict[str, str],
    ) -> aws.eks.NodeGroup:
        """ON_DEMAND nodes for add-ons, tainted so that only what tolerates
        ``CriticalAddonsOnly`` (CoreDNS, Karpenter) lands there."""
        pool = spec.system_pool
        contract = scheduling.contract(PoolClass.SYSTEM, Cloud.EKS)
        node_role, grants = roles.role(
            f"{name}-system-nodes",
            role_name=f"{name}-system-nodes",
            trust=iam_documents.service_trust("ec2.amazonaws.com"),
            partition=partition,
            managed_policies=iam_documents.NODE_POLICIES,
            description=f"System node group of {name}",
            opts=pulumi.ResourceOptions(parent=self),
        )
        template = aws.ec2.LaunchTemplate(
            f"{name}-system",
            name_prefix=f"{name}-system-",
            description=f"System node group of {name}: IMDSv2, one hop, encrypted root",
            metadata_options=SYSTEM_METADATA_OPTIONS,
            block_device_mappings=[
                {
                    "device_name": SYSTEM_ROOT_DEVICE,
                    "ebs": {
                        "volume_size": pool.disk_gb,
                        "volume_type": "gp3",
                        "encrypted": "true",
                        "delete_on_termination": "true",
                    },
                }
            ],
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        return aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=cluster.name,
            node_group_name="system",
            node_role_arn=node_role.arn,
            subnet_ids=network.subnet_ids,
            capacity_type="ON_DEMAND",
            instance_types=[pool.machine_type],
            ami_type=SYSTEM_AMI,
            # The disk size is the template's: EKS refuses diskSize beside a launch template.
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            scaling_config={
                "min_size": pool.min_nodes,
                "max_size": pool.max_nodes,
                "desired_size": pool.min_nodes,
            },
            update_config={"max_unavailable": 1},
            labels=dict(contract.labels),
            taints=scheduling.cloud_taints(contract.taints),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=grants),
        )


def api_endpoint(access: ApiAccess) -> dict[str, Any]:
    """``vpcConfig`` settings that close the API to everyone but ``access``. EKS opens the
    public endpoint to ``0.0.0.0/0`` unless told otherwise (``publicAccessCidrs``
    defaults to it); nodes always use the private endpoint
    (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html)."""
    if access.private_endpoint:
        return {"endpoint_private_access": True, "endpoint_public_access": False}
    return {
        "endpoint_private_access": True,
        "endpoint_public_access": True,
        "public_access_cidrs": list(access.authorized_networks),
    }


def kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str, region: str) -> str:
    """A kubeconfig that authenticates with ``aws eks get-token`` (no static token)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster_name,
                    "cluster": {"server": endpoint, "certificate-authority-data": ca_certificate},
                }
            ],
            "contexts": [
                {"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}
            ],
            "current-context": cluster_name,
            "users": [
                {
                    "name": cluster_name,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": [
                                "eks",
                                "get-token",
                                "--cluster-name",
                                cluster_name,
                                "--region",
                                region,
                                "--output",
                                "json",
                            ],
                        }
                    },
                }
            ],
        },
        sort_keys=False,
    )
