"""NVIDIA's Kubernetes device plugin: what advertises ``nvidia.com/gpu`` on a node.

A node offers ``nvidia.com/gpu`` only once a device plugin registers the GPUs with its
kubelet; a driver alone advertises nothing, and a pod asking for a GPU stays Pending
while the autoscaler keeps the node (and its bill) running. Who runs the plugin differs:

- GKE deploys its own plugin on every node with accelerators, as an add-on
  (GoogleCloudPlatform/container-engine-accelerators ``cmd/nvidia_gpu``: "In GKE, from 1.9
  onwards, this daemonset is automatically deployed as an addon"), and it advertises once
  the driver is there: GKE installs it for ``gpuDriverInstallationConfig.gpuDriverVersion``
  ``DEFAULT`` or ``LATEST``, not for ``INSTALLATION_DISABLED`` ("needs manual
  installation") nor unspecified ("not install any GPU driver"; GKE API reference,
  ``GPUDriverInstallationConfig.GPUDriverVersion``);
- Bottlerocket's ``nvidia`` variants, which an EC2NodeClass's ``bottlerocket@`` alias
  selects for GPU instances, carry the driver and the plugin (bottlerocket-os/bottlerocket
  README, "NVIDIA GPUs Support"); an EKS ``al2023`` accelerated AMI has the driver and the
  container toolkit, and the plugin is the user's to deploy
  (https://docs.aws.amazon.com/eks/latest/userguide/ml-eks-optimized-ami.html);
- AKS installs the driver only: with ``gpuProfile.driver: Install`` (agent pools) or
  ``gpu.mode: Driver`` (node auto-provisioning) "you need to deploy the NVIDIA device
  plugin" (MicrosoftDocs/azure-aks-docs ``articles/aks/use-nvidia-gpu.md``, "NVIDIA device
  plugin installation"; Azure/karpenter-provider-azure
  ``designs/0002-gpu-selection-and-bootstrap.md``: the customer installs it).

The manifest AKS documents, which spotproof renders with its own placement: NVIDIA's
plugin ``v0.18.0`` (NVIDIA/k8s-device-plugin ``deployments/static/nvidia-device-plugin.yml``
at that tag), ``FAIL_ON_INIT_ERROR=false`` so a node whose driver is not ready yet does
not crash-loop it, priority ``system-node-critical``, no privilege escalation, every
capability dropped, and one ``hostPath`` (the kubelet's device-plugin socket directory),
which Pod Security ``baseline`` forbids: its namespace enforces ``privileged``.
"""

from __future__ import annotations

IMAGE_REPOSITORY = "nvcr.io/nvidia/k8s-device-plugin"
VERSION = "v0.18.0"
IMAGE = f"{IMAGE_REPOSITORY}:{VERSION}"
SOCKET_DIRECTORY = "/var/lib/kubelet/device-plugins"
NAMESPACE = "nvidia-device-plugin"
PRIORITY_CLASS = "system-node-critical"


GKE_MANAGED_DRIVER_VERSIONS = frozenset({"DEFAULT", "LATEST"})
BOTTLEROCKET_ALIAS_PREFIX = "bottlerocket@"
