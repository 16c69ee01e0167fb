"""Which pools' nodes offer their GPUs to pods: ``nvidia.com/gpu`` exists on a node only
where a device plugin registers it (``catalog.nvidia`` says who runs one on each cloud).

A pool whose VMs carry GPUs that nothing advertises is worse than no pool: the autoscaler
adds a node for a pending GPU pod, the pod never fits it, and the node runs, billed, until
scale-down gives up on it. The plan therefore counts a pool's GPUs only where something
advertises them, so every later check (fit, scale-up, gang capacity) sees the nodes as the
scheduler will, and reports each pool that would carry GPUs nothing advertises:

- a GKE node pool: GKE's own plugin, once GKE installs the driver (``DEFAULT``/``LATEST``);
- a Karpenter NodePool on EKS: Bottlerocket's built-in plugin (``bottlerocket@`` alias);
- an AKS agent pool or node auto-provisioning NodePool whose driver AKS installs, and an EKS
  NodePool on another AMI: a DaemonSet of NVIDIA's plugin whose pods land on the pool's
  nodes (tolerations, selector and affinity, as the scheduler decides them);
- AKS pools with the driver left to the GPU Operator (``gpuDriver: None``), whose own plugin
  the plan cannot see: taken as advertised, and said so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from spotproof.catalog import nvidia
from spotproof.fleet.images import parse
from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.plan.simulation.nodes import Pool
from spotproof.policy import Violation
from spotproof.scheduling import fit, pod_templates

POLICY = "gpu-advertised"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
NODE_CLASSES = {
    "karpenter.k8s.aws": "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
    "karpenter.azure.com": "kubernetes:karpenter.azure.com/v1beta1:AKSNodeClass",
}


def advertised(recording: Recording, pools: list[Pool]) -> tuple[list[Pool], list[Violation]]:
    """``pools`` with the GPUs nothing advertises taken off their nodes, and a violation
    for each pool that loses them."""
    plugins = _plugins(recording)
    found, violations = [], []
    for pool in pools:
        if not pool.shape.gpus:
            found.append(pool)
            continue
        resource = next(r for r in recording.resources if r.name == pool.scaling.resource)
        inputs = _pool_inputs(resource, pool.name)
        built_in = _built_in(resource.type, inputs, recording)
        if built_in or any(not fit.misfits(spec, pool.shape) for spec in plugins):
            found.append(pool)
            continue
        violations.append(
            Violation(
                POLICY,
                pool.scaling.resource,
                f"pool {pool.name}: its nodes carry {pool.shape.gpus} GPU(s) that nothing "
                f"advertises as nvidia.com/gpu ({_why(resource.type, inputs)}), so GPU pods "
                "never fit "
                "them while the autoscaler keeps adding them; fix: a DaemonSet of "
                f"{nvidia.IMAGE_REPOSITORY} whose pods tolerate the pool's taints and select "
                "its nodes (spotproof's AKS clusters deploy one: NvidiaDevicePlugin)",
            )
        )
        found.append(dataclasses.replace(pool, shape=dataclasses.replace(pool.shape, gpus=0)))
    return found, violations


def _plugins(recording: Recording) -> list[Mapping[str, Any]]:
    """The pod specs of every DaemonSet that runs NVIDIA's device plugin."""
    specs = []
    for resource in recording.of_type(DAEMON_SET):
        template = ((resource.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
        images = [c.get("image") for c in pod_templates.containers(template)]
        if any(_is_plugin(image) for image in images):
            specs.append(template)
    return specs


def _is_plugin(image: Any) -> bool:
    parsed = parse(image) if isinstance(image, str) else None
    return parsed is not None and parsed.name == nvidia.IMAGE_REPOSITORY


def _pool_inputs(resource: Resource, pool: str) -> Mapping[str, Any]:
    """The inputs of ``pool``, which an AKS cluster declares inside itself."""
    for profile in resource.inputs.get("agentPoolProfiles") or []:
        if profile.get("name") == pool:
            return profile
    return resource.inputs


def _built_in(type_: str, inputs: Mapping[str, Any], recording: Recording) -> str | None:
    """What advertises a pool's GPUs without a DaemonSet of the stack's, if anything."""
    if type_ == "gcp:container/nodePool:NodePool":
        accelerators = (inputs.get("nodeConfig") or {}).get("guestAccelerators") or []
        versions = {
            (a.get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion")
            for a in accelerators
        }
        if versions and versions <= nvidia.GKE_MANAGED_DRIVER_VERSIONS:
            return "GKE's device plugin"
        return None
    if type_.endswith("containerservice:AgentPool") or type_.endswith(
        "containerservice:ManagedCluster"
    ):
        driver = (inputs.get("gpuProfile") or {}).get("driver", "Install")
        return "the GPU Operator's (gpuDriver None)" if driver == "None" else None
    node_class = _node_class(inputs, recording)
    if node_class is None:
        return None
    spec = node_class.get("spec") or {}
    if (spec.get("gpu") or {}).get("mode") == "None":
        return "the GPU Operator's (gpu.mode None)"
    aliases = [str(term.get("alias", "")) for term in spec.get("amiSelectorTerms") or []]
    if aliases and all(a.startswith(nvidia.BOTTLEROCKET_ALIAS_PREFIX) for a in aliases):
        return "Bottlerocket's built-in plugin"
    return None


def _node_class(node_pool: Mapping[str, Any], recording: Recording) -> Mapping[str, Any] | None:
    template = ((node_pool.get("spec") or {}).get("template") or {}).get("spec") or {}
    reference = template.get("nodeClassRef") or {}
    type_ = NODE_CLASSES.get(str(reference.get("group")))
    for resource in recording.of_type(type_ or ""):
        if (resource.inputs.get("metadata") or {}).get("name") == reference.get("name"):
            return resource.inputs
    return None


def _why(type_: str, inputs: Mapping[str, Any]) -> str:
    template = ((inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
    group = (template.get("nodeClassRef") or {}).get("group")
    if type_.startswith("gcp:"):
        return "GKE installs no driver: gpuDriverInstallationConfig unset or INSTALLATION_DISABLED"
    if type_.startswith("azure-native:") or group == "karpenter.azure.com":
        return "AKS installs the driver only, and no NVIDIA device plugin DaemonSet lands there"
    return "its AMI is not Bottlerocket's, and no NVIDIA device plugin DaemonSet lands there"
