"""``spotproof:eks:Karpenter``: the controller, its identity, its nodes' identity, the
interruption queue, and the GPU NodePools it provisions.

Order matters and is declared: the CRD chart before any NodePool or EC2NodeClass; the
controller's Pod Identity association and policies before the controller starts (it reads
its credentials once); the node role's access entry before any node tries to join.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.eks import nodepools, policies, roles
from spotproof.eks.interruption import InterruptionQueue
from spotproof.spec.types import FleetSpec, PoolClass

CHART = "oci://public.ecr.aws/karpenter/karpenter"
CRD_CHART = "oci://public.ecr.aws/karpenter/karpenter-crd"
SERVICE_ACCOUNT = "karpenter"


def controller_values(cluster_name: str, queue_name: str, replicas: int) -> dict[str, Any]:
    """Helm values that keep the controller on the system node group and off every node it
    launches itself (a controller on its own spot node would be reclaimed with it)."""
    system = scheduling.contract(PoolClass.SYSTEM, Cloud.EKS)
    return {
        "settings": {"clusterName": cluster_name, "interruptionQueue": queue_name},
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "replicas": replicas,
        "priorityClassName": "system-cluster-critical",
        "tolerations": [{"key": scheduling.SYSTEM_TAINT.key, "operator": "Exists"}],
        "nodeSelector": dict(system.labels),
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": scheduling.KARPENTER_NODEPOOL_LABEL,
                                    "operator": "DoesNotExist",
                                }
                            ]
                        }
                    ]
                }
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "karpenter"}},
                    }
                ]
            },
        },
        "controller": {
            "resources": {
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "limits": {"memory": "1Gi"},
            }
        },
    }


@dataclass
class KarpenterArgs:
    spec: FleetSpec
    cluster_name: pulumi.Output[str]
    partition: pulumi.Output[str]
    account: pulumi.Output[str]
    provider: k8s.Provider
    ready: list[pulumi.Resource] = field(default_factory=list)
    """What must exist before the controller starts: the system nodes, the Pod Identity
    agent."""


class Karpenter(pulumi.ComponentResource):
    """Karpenter v1 with interruption handling and one NodePool per GPU pool of the spec."""

    node_role_name: pulumi.Output[str]
    queue_name: pulumi.Output[str]
    node_pool_names: list[str]

    def __init__(
        self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:eks:Karpenter", name, None, opts)
        spec = args.spec
        assert spec.karpenter is not None, "EKS stacks always configure Karpenter"
        settings = spec.karpenter
        child = pulumi.ResourceOptions(parent=self)

        # Karpenter's nodes get a role of their own: EKS gives each principal one access
        # entry, and the system node group's role already has its own.
        node_role, node_attachments = roles.role(
            f"{name}-node",
            role_name=f"{spec.stack}-karpenter-node",
            trust=policies.service_trust("ec2.amazonaws.com"),
            partition=args.partition,
            managed_policies=policies.KARPENTER_NODE_POLICIES,
            description=f"Nodes Karpenter launches for {spec.stack}",
            opts=child,
        )
        access = aws.eks.AccessEntry(
            f"{name}-node-access",
            cluster_name=args.cluster_name,
            principal_arn=node_role.arn,
            type="EC2_LINUX",
            opts=child,
        )
        queue = InterruptionQueue(f"{name}-interruption", spec.cluster_name, opts=child)

        controller_role, _ = roles.role(
            f"{name}-controller",
            role_name=f"{spec.stack}-karpenter-controller",
            trust=policies.pod_identity_trust(
                spec.cluster_name, settings.namespace, SERVICE_ACCOUNT
            ),
            partition=args.partition,
            description=f"Karpenter controller of {spec.stack}",
            opts=child,
        )
        documents = (
            pulumi.Output.all(args.partition, args.account, node_role.arn, queue.arn)
            .apply(
                lambda parts: policies.ControllerScope(
                    partition=parts[0],
                    region=spec.region,
                    account=parts[1],
                    cluster_name=spec.cluster_name,
                    node_role_arn=parts[2],
                    queue_arn=parts[3],
                )
            )
            .apply(policies.controller_policies)
        )
        grants: list[pulumi.Resource] = []
        for concern in policies.CONTROLLER_POLICIES:
            policy = aws.iam.Policy(
                f"{name}-controller-{concern}",
                name=f"{spec.stack}-karpenter-{concern}",
                policy=documents.apply(lambda docs, concern=concern: json.dumps(docs[concern])),
                opts=child,
            )
            grants.append(
                aws.iam.RolePolicyAttachment(
                    f"{name}-controller-{concern}",
                    role=controller_role.name,
                    policy_arn=policy.arn,
                    opts=child,
                )
            )
        grants.append(
            aws.eks.PodIdentityAssociation(
                f"{name}-controller-identity",
                cluster_name=args.cluster_name,
                namespace=settings.namespace,
                service_account=SERVICE_ACCOUNT,
                role_arn=controller_role.arn,
                opts=child,
            )
        )

        kubernetes = pulumi.ResourceOptions(parent=self, provider=args.provider)
        crds = k8s.helm.v4.Chart(
            f"{name}-crd",
            name="karpenter-crd",
            chart=CRD_CHART,
            version=settings.version,
            namespace=settings.namespace,
            opts=kubernetes,
        )
        controller = k8s.helm.v4.Chart(
            f"{name}-controller",
            name="karpenter",
            chart=CHART,
            version=settings.version,
            namespace=settings.namespace,
            skip_crds=True,
            values=queue.name.apply(
                lambda queue_name: controller_values(
                    spec.cluster_name, queue_name, settings.replicas
                )
            ),
            opts=pulumi.ResourceOptions.merge(
                kubernetes, pulumi.ResourceOptions(depends_on=[crds, *grants, *args.ready])
            ),
        )
        nodes_ready = pulumi.ResourceOptions.merge(
            kubernetes,
            pulumi.ResourceOptions(depends_on=[crds, controller, access, *node_attachments]),
        )
        for pool in spec.karpenter_pools:
            node_class = node_role.name.apply(
                lambda role_name, pool=pool: nodepools.node_class(
                    pool.name, spec.cluster_name, role_name, settings, pool.disk_gb
                )
            )
            k8s.apiextensions.CustomResource(
                f"{name}-{pool.name}-nodeclass",
                api_version=nodepools.NODE_CLASS_API,
                kind="EC2NodeClass",
                metadata=node_class.apply(lambda obj: obj["metadata"]),
                spec=node_class.apply(lambda obj: obj["spec"]),
                opts=nodes_ready,
            )
            node_pool = nodepools.node_pool(pool, node_class=pool.name)
            k8s.apiextensions.CustomResource(
                f"{name}-{pool.name}-nodepool",
                api_version=nodepools.NODE_POOL_API,
                kind="NodePool",
                metadata=node_pool["metadata"],
                spec=node_pool["spec"],
                opts=nodes_ready,
            )

        self.node_role_name = node_role.name
        self.queue_name = queue.name
        self.node_pool_names = [pool.name for pool in spec.karpenter_pools]
        self.register_outputs(
            {
                "node_role_name": self.node_role_name,
                "queue_name": self.queue_name,
                "node_pool_names": self.node_pool_names,
            }
        )
