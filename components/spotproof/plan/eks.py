"""EKS in the offline plan: what its resources answer under mocks, how a managed node
group gets nodes (it does not: no autoscaler), which node classes' nodes advertise GPUs
themselves, the Karpenter release whose objects are checked, and the CoreDNS add-on's pods.
Karpenter's scaling and reclaim are shared (``plan.simulation``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from spotproof.catalog import eks as eks_catalog
from spotproof.catalog import nvidia
from spotproof.plan import gke
from spotproof.plan.cloud import CloudPlan
from spotproof.plan.model import Provisioner, Release, Scaling, Workload
from spotproof.plan.recording.offline import FAKE_CA, CallFaker, CloudRecording, OutputFaker
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation.nodes import node_count
from spotproof.plan.simulation.workloads import placed_pod
from spotproof.scheduling import eks as eks_shapes

CLUSTER = eks_catalog.PROFILE.cluster_type
ADDON = "aws:eks/addon:Addon"
POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
OFFLINE_VPC = "vpc-0offline"
OFFLINE_VPC_CIDR = "10.0.0.0/16"
"""The VPC of a stack's own subnets (``spotproof:network.subnets``), as the offline plan
answers for it."""

# --- what AWS answers offline -------------------------------------------------------------

OUTPUTS: dict[str, OutputFaker] = {
    "aws:eks/cluster:Cluster": lambda name, inputs, cloud: {
        "name": inputs.get("name", name),
        "arn": cloud.arn("eks", f"cluster/{inputs.get('name', name)}"),
        "endpoint": f"https://OFFLINE.gr7.{cloud.region}.eks.amazonaws.com",
        "certificateAuthority": {"data": FAKE_CA},
        "vpcConfig": {**inputs.get("vpcConfig", {}), "clusterSecurityGroupId": "sg-0offline"},
    },
    "aws:cloudwatch/eventRule:EventRule": lambda name, inputs, cloud: {
        "name": inputs.get("name", name),
        # A rule on the default event bus: rule/NAME (on another bus: rule/BUS/NAME).
        "arn": cloud.arn("events", f"rule/{inputs.get('name', name)}"),
    },
    "aws:ec2/launchTemplate:LaunchTemplate": lambda name, inputs, _cloud: {
        "name": inputs.get("name") or f"{inputs.get('namePrefix', name)}offline",
        "latestVersion": 1,
    },
    "aws:iam/role:Role": lambda name, inputs, cloud: {
        "id": inputs.get("name", name),  # a role's id is its name
        "name": inputs.get("name", name),
        "arn": cloud.arn("iam", f"role/{inputs.get('name', name)}", regional=False),
    },
    "aws:iam/policy:Policy": lambda name, inputs, cloud: {
        "arn": cloud.arn("iam", f"policy/{inputs.get('name', name)}", regional=False),
    },
    "aws:sqs/queue:Queue": lambda name, inputs, cloud: {
        "name": inputs.get("name", name),
        "arn": cloud.arn("sqs", inputs.get("name", name)),
        "url": f"https://sqs.{cloud.region}.amazonaws.com/{cloud.account}/"
        + inputs.get("name", name),
    },
    "aws:fis/experimentTemplate:ExperimentTemplate": lambda name, _inputs, _cloud: {
        "id": "EXT" + hashlib.sha256(name.encode()).hexdigest()[:14],
    },
    "aws:s3/bucket:Bucket": lambda name, inputs, _cloud: {
        "bucket": inputs.get("bucket", name),
        "arn": f"arn:aws:s3:::{inputs.get('bucket', name)}",
    },
    # An AMP workspace's id is ``ws-`` and a generated suffix (pulumi-aws ``amp.Workspace``,
    # its import example); what the EKS monitoring outputs and grants is built from these.
    "aws:amp/workspace:Workspace": lambda name, _inputs, cloud: {
        "id": f"ws-{name}",
        "arn": cloud.arn("aps", f"workspace/ws-{name}"),
        "prometheusEndpoint": f"https://aps-workspaces.{cloud.region}.amazonaws.com/"
        f"workspaces/ws-{name}/",
    },
    "aws:amp/scraper:Scraper": lambda name, _inputs, cloud: {
        "arn": cloud.arn("aps", f"scraper/s-{name}"),
    },
}
CALLS: dict[str, CallFaker] = {
    "aws:index/getPartition:getPartition": lambda _cloud: {
        "partition": "aws",
        "dnsSuffix": "amazonaws.com",
        "reverseDnsPrefix": "com.amazonaws",
        "id": "aws",
    },
    "aws:index/getCallerIdentity:getCallerIdentity": lambda cloud: {
        "accountId": cloud.account,
        "arn": f"arn:aws:iam::{cloud.account}:user/offline",
        "userId": "OFFLINE",
        "id": cloud.account,
    },
    "aws:ec2/getSubnet:getSubnet": lambda _cloud: {"vpcId": OFFLINE_VPC},
    "aws:ec2/getVpc:getVpc": lambda _cloud: {
        "id": OFFLINE_VPC,
        "cidrBlock": OFFLINE_VPC_CIDR,
        "cidrBlockAssociations": [
            {"associationId": "vpc-cidr-assoc-0offline", "cidrBlock": OFFLINE_VPC_CIDR}
        ],
    },
}


# --- pools --------------------------------------------------------------------------------


def node_group_scaling(resource: str, inputs: Mapping[str, Any]) -> Scaling:
    sizes = inputs.get("scalingConfig") or {}
    return Scaling(
        provisioner=Provisioner.NONE,
        resource=resource,
        min_nodes=node_count(sizes.get("minSize")),
        max_nodes=node_count(sizes.get("maxSize")),
        machine_type=next(iter(inputs.get("instanceTypes") or []), None),
    )


def node_class_plugin(spec: Mapping[str, Any]) -> str | None:
    """Bottlerocket's AMIs (``bottlerocket@`` aliases) run NVIDIA's plugin themselves."""
    aliases = [str(term.get("alias", "")) for term in spec.get("amiSelectorTerms") or []]
    if aliases and all(a.startswith(nvidia.BOTTLEROCKET_ALIAS_PREFIX) for a in aliases):
        return "Bottlerocket's built-in plugin"
    return None


# --- what the cluster runs ----------------------------------------------------------------


def releases(platform: Any) -> list[Release]:
    """Karpenter, at the release the stack pins (``spotproof:karpenter.version``)."""
    karpenter = getattr(platform, "karpenter", None)
    if karpenter is None:
        return []
    return [
        Release(
            "Karpenter",
            karpenter.version,
            ("karpenter.sh", eks_shapes.KARPENTER_GROUP),
            eks_catalog.KARPENTER_INTRODUCED,
        )
    ]


def installed_workloads(recording: Recording) -> list[Workload]:
    """CoreDNS, which the ``coredns`` add-on runs where its configuration places it."""
    found = []
    for addon in recording.of_type(ADDON):
        raw = addon.inputs.get("configurationValues")
        values = json.loads(raw) if isinstance(raw, str) and raw else {}
        if addon.inputs.get("addonName") == "coredns":
            found.append(
                Workload(
                    addon.name,
                    "Deployment",
                    "kube-system",
                    "coredns",
                    placed_pod(values, "system-cluster-critical"),
                )
            )
    return found


PLAN = CloudPlan(
    recording=CloudRecording(
        outputs=OUTPUTS,
        calls=CALLS,
        cluster_inputs={
            CLUSTER: "name",
            eks_shapes.NODE_GROUP: "clusterName",
            ADDON: "clusterName",
            POD_IDENTITY_ASSOCIATION: "clusterName",
        },
    ),
    scalings={eks_shapes.NODE_GROUP: node_group_scaling},
    # A spot managed node group (only a user's own program declares one: spotproof's is
    # on-demand) has no reclaim path of its own here; the plan reads it as GKE's, as it did
    # before each cloud had its module. Keeping that is this reshape's; EKS's own path (the
    # two-minute notice, drained by whatever handles it) is a change of its own.
    spot_path=gke.spot_path,
    node_classes={eks_shapes.KARPENTER_GROUP: (NODE_CLASS, node_class_plugin)},
    unadvertised="its AMI is not Bottlerocket's, and no NVIDIA device plugin DaemonSet lands there",
    releases=releases,
    installed_workloads=installed_workloads,
)
