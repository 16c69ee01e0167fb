"""``spotproof:eks:Karpenter``: the controller, its identity, its nodes' identity, the
interruption queue, and the GPU NodePools it provisions.

Order matters and is declared: the CRD chart before any NodePool or EC2NodeClass; the
controller's Pod Identity association and policies before the controller starts (it reads
its credentials once); the node role's access entry before any node tries to join.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.catalog import labels as platform_labels
from spotproof.eks import iam_documents, karpenter_documents, nodepools, roles
from spotproof.eks.interruption import InterruptionQueue
from spotproof.eks.nodepools import DISCOVERY_TAG
from spotproof.fleet import PoolClass
from spotproof.fleet.eks import KarpenterPool, KarpenterSpec

CHART = "oci://public.ecr.aws/karpenter/karpenter"
CRD_CHART = "oci://public.ecr.aws/karpenter/karpenter-crd"
SERVICE_ACCOUNT = "karpenter"


def controller_values(
    cluster_name: str, queue_name: str, replicas: int, region: str
) -> dict[str, Any]:
    """Helm values that keep the controller on the system node group and off every node it
    launches itself (a controller on its own spot node would be reclaimed with it).

    ``AWS_REGION`` is set because the system nodes keep instance metadata from pods (one
    hop): without a region in its SDK config the controller asks IMDS for one and exits
    when it cannot (karpenter-provider-aws ``pkg/operator/operator.go``, "retrieving
    region from IMDS"). The chart passes ``controller.env`` to the container."""
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
                                    "key": platform_labels.KARPENTER_NODEPOOL_LABEL,
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
            "env": [{"name": "AWS_REGION", "value": region}],
            "resources": {
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "limits": {"memory": "1Gi"},
            },
        },
    }


@dataclass
class KarpenterArgs:
    settings: KarpenterSpec
    cluster_name: pulumi.Input[str]
    """The EKS cluster, built by ``HybridCluster`` or one the user already has. It must
    use access entries (authentication mode ``API`` or ``API_AND_CONFIG_MAP``) and run the
    EKS Pod Identity agent, and its nodes' subnets must carry the tag
    ``karpenter.sh/discovery=<cluster name>`` (or be listed in ``subnet_ids``)."""
    region: pulumi.Input[str]
    provider: k8s.Provider
    """Kubernetes provider of that cluster."""
    pools: Sequence[KarpenterPool] = ()
    """GPU NodePools, each with its own EC2NodeClass."""
    cluster_security_group_id: pulumi.Input[str] | None = None
    """Tagged for discovery so Karpenter's nodes join with it; None when already tagged."""
    subnet_ids: Sequence[pulumi.Input[str]] = ()
    """Subnets to tag for discovery; empty when they are tagged already."""
    ready: Sequence[pulumi.Resource] = ()
    """What must exist before the controller starts: the system nodes, the Pod Identity
    agent."""
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (its IAM roles and policies;
    the interruption queue and its rules take the cluster's name); default the component's
    name. Two components in one account need different prefixes."""


class Karpenter(pulumi.ComponentResource):
    """Karpenter v1 with interruption handling and one NodePool per GPU pool, for a
    cluster spotproof builds or one the user already has."""

    node_role_name: pulumi.Output[str]
    queue_name: pulumi.Output[str]
    node_pool_names: list[str]

    def __init__(
        self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:eks:Karpenter", name, None, opts)
        self._prefix = args.name_prefix or name
        settings, prefix = args.settings, self._prefix
        cluster = pulumi.Output.from_input(args.cluster_name)
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        discovery = [
            *([args.cluster_security_group_id] if args.cluster_security_group_id else []),
            *args.subnet_ids,
        ]
        for index, resource_id in enumerate(discovery):
            aws.ec2.Tag(
                f"{name}-discovery-{index}",
                resource_id=resource_id,
                key=DISCOVERY_TAG,
                value=cluster,
                opts=child,
            )

        # Karpenter's nodes get a role of their own: EKS gives each principal one access
        # entry, and the system node group's role already has its own.
        node_role, node_attachments = roles.role(
            f"{name}-node",
            role_name=f"{prefix}-karpenter-node",
            trust=iam_documents.service_trust("ec2.amazonaws.com"),
            partition=partition,
            managed_policies=(
                *iam_documents.NODE_POLICIES,
                *([iam_documents.SSM_NODE_POLICY] if settings.node_ssm_access else []),
            ),
            description=f"Nodes Karpenter launches for {prefix}",
            opts=child,
        )
        access = aws.eks.AccessEntry(
            f"{name}-node-access",
            cluster_name=args.cluster_name,
            principal_arn=node_role.arn,
            type="EC2_LINUX",
            opts=child,
        )
        queue = InterruptionQueue(f"{name}-interruption", cluster, opts=child)

        controller_role, _ = roles.role(
            f"{name}-controller",
            role_name=f"{prefix}-karpenter-controller",
            trust=cluster.apply(
                lambda cluster_name: iam_documents.pod_identity_trust(
                    cluster_name, settings.namespace, SERVICE_ACCOUNT
                )
            ),
            partition=partition,
            description=f"Karpenter controller of {prefix}",
            opts=child,
        )
        documents = (
            pulumi.Output.all(partition, args.region, account, cluster, node_role.arn, queue.arn)
            .apply(
                lambda parts: karpenter_documents.ControllerScope(
                    partition=parts[0],
                    region=parts[1],
                    account=parts[2],
                    cluster_name=parts[3],
                    node_role_arn=parts[4],
                    queue_arn=parts[5],
                )
            )
            .apply(karpenter_documents.controller_policies)
        )
        grants: list[pulumi.Resource] = []
        for concern in karpenter_documents.CONTROLLER_POLICIES:
            policy = aws.iam.Policy(
                f"{name}-controller-{concern}",
                name=f"{prefix}-karpenter-{concern}",
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
            values=pulumi.Output.all(cluster, queue.name, args.region).apply(
                lambda names: controller_values(names[0], names[1], settings.replicas, names[2])
            ),
            opts=pulumi.ResourceOptions.merge(
                kubernetes, pulumi.ResourceOptions(depends_on=[crds, *grants, *args.ready])
            ),
        )
        nodes_ready = pulumi.ResourceOptions.merge(
            kubernetes,
            pulumi.ResourceOptions(depends_on=[crds, controller, access, *node_attachments]),
        )
        for pool in args.pools:
            node_class = pulumi.Output.all(cluster, node_role.name).apply(
                lambda names, pool=pool: nodepools.node_class(
                    pool.name,
                    cluster_name=names[0],
                    node_role=names[1],
                    karpenter=settings,
                    disk_gb=pool.disk_gb,
                    stack=pulumi.get_stack(),
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
        self.node_pool_names = [pool.name for pool in args.pools]
        self.register_outputs(
            {
                "node_role_name": self.node_role_name,
                "queue_name": self.queue_name,
                "node_pool_names": self.node_pool_names,
            }
        )
