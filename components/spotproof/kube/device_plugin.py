"""``spotproof:kube:NvidiaDevicePlugin``: what makes a GPU node advertise its GPUs where
the cloud installs only the driver (AKS; ``catalog.nvidia`` says who does what where).

A node agent, placed the way the system path places its add-ons rather than by a
tolerate-everything toleration: it tolerates exactly the taints of the GPU pool classes the
cluster has (and the spot taint AKS puts on spot agent pools), runs at
``system-node-critical`` so a node's work never keeps it off, and selects GPU nodes by the
labels the platform gives them, whoever created the node: an agent pool's
``kubernetes.azure.com/accelerator`` or node auto-provisioning's
``karpenter.azure.com/sku-gpu-manufacturer``. Its namespace enforces the Pod Security
level ``privileged``, the only one that admits the kubelet's socket directory as a
``hostPath``; the container itself escalates nothing and drops every capability. It runs
as root, as NVIDIA's manifests do: the socket it creates goes into the kubelet's root-owned
directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import aks as aks_catalog
from spotproof.catalog import nvidia
from spotproof.fleet import Taint
from spotproof.kube.baseline import MANAGED_BY

NAME = "nvidia-device-plugin"
LABELS = {"app.kubernetes.io/name": NAME}
PRIVILEGED = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@dataclass(frozen=True)
class NvidiaDevicePluginArgs:
    provider: k8s.Provider
    taints: Sequence[Taint]
    """Every taint of the GPU nodes it must run on."""
    node_labels: Sequence[tuple[str, str]] = (
        (aks_catalog.ACCELERATOR_LABEL, aks_catalog.NVIDIA),
        (aks_catalog.SKU_GPU_MANUFACTURER_LABEL, aks_catalog.NVIDIA),
    )
    """GPU nodes carry one of these (key, value) labels; default: AKS's."""


def pod_spec(args: NvidiaDevicePluginArgs) -> dict[str, Any]:
    tolerations = [scheduling.toleration_for(t) for t in dict.fromkeys(args.taints)]
    terms = [
        {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        for key, value in args.node_labels
    ]
    return {
        "priorityClassName": nvidia.PRIORITY_CLASS,
        "tolerations": tolerations,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        },
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": NAME,
                "image": nvidia.IMAGE,
                "env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {
                    "requests": {"cpu": "10m", "memory": "64Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "volumeMounts": [{"name": "device-plugins", "mountPath": nvidia.SOCKET_DIRECTORY}],
            }
        ],
        "volumes": [
            {
                "name": "device-plugins",
                "hostPath": {"path": nvidia.SOCKET_DIRECTORY, "type": "Directory"},
            }
        ],
    }


class NvidiaDevicePlugin(pulumi.ComponentResource):
    """NVIDIA's device plugin, pinned, on every GPU node, in a namespace of its own."""

    def __init__(
        self, name: str, args: NvidiaDevicePluginArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:kube:NvidiaDevicePlugin", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": nvidia.NAMESPACE, "labels": {**MANAGED_BY, **PRIVILEGED}},
            opts=child,
        )
        daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata={"name": NAME, "namespace": nvidia.NAMESPACE, "labels": MANAGED_BY},
            spec={
                "selector": {"matchLabels": LABELS},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {"metadata": {"labels": LABELS}, "spec": pod_spec(args)},
            },
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[namespace])
            ),
        )
        self.daemon_set_name = daemon_set.metadata.apply(lambda m: m["name"])
        self.register_outputs({"daemon_set_name": self.daemon_set_name})
