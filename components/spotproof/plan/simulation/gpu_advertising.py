"""Which pools' nodes offer their GPUs to pods: ``nvidia.com/gpu`` exists on a node only
where a device plugin registers it (``catalog.nvidia`` says who runs one on each cloud).

A pool whose VMs carry GPUs that nothing advertises is worse than no pool: the autoscaler
adds a node for a pending GPU pod, the pod never fits it, and the node runs, billed, until
scale-down gives up on it. The plan therefore counts a pool's GPUs only where something
advertises them, so every later check (fit, scale-up, gang capacity) sees the nodes as the
scheduler will, and reports each pool that would carry GPUs nothing advertises. What
advertises them is, where the cloud runs a plugin itself, its plan module's to say
(``CloudPlan.gpu_plugins``, ``node_classes``), else a DaemonSet's:

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

from spotproof.catalog import PROFILES, nvidia
from spotproof.fleet.images import parse
from spotproof.plan.cloud import every_plan, plan_of
from spotproof.plan.model import Pool
from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.policy import Violation
from spotproof.scheduling import fit, pod_templates

POLICY = "gpu-advertised"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"


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
    """What advertises a pool's GPUs without a DaemonSet of the stack's, if anything: the
    cloud's own plugin on its pool type (``CloudPlan.gpu_plugins``), or on the nodes of
    the Karpenter node class a NodePool names (``CloudPlan.node_classes``)."""
    plugins = {t: read for plan in every_plan() for t, read in plan.gpu_plugins.items()}
    if type_ in plugins:
        return plugins[type_](inputs)
    template = ((inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
    reference = template.get("nodeClassRef") or {}
    node_classes = {g: kind for plan in every_plan() for g, kind in plan.node_classes.items()}
    group = str(reference.get("group"))
    if group not in node_classes:
        return None
    node_class_type, plugin = node_classes[group]
    for resource in recording.of_type(node_class_type):
        if (resource.inputs.get("metadata") or {}).get("name") == reference.get("name"):
            return plugin(resource.inputs.get("spec") or {})
    return None


def _why(type_: str, inputs: Mapping[str, Any]) -> str:
    template = ((inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
    group = (template.get("nodeClassRef") or {}).get("group")
    for cloud, facts in PROFILES.items():
        plan = plan_of(cloud)
        if type_.startswith(facts.provider_prefix) or group in plan.node_classes:
            return plan.unadvertised
    return "nothing spotproof knows of advertises them"
