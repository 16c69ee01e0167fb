"""Can the machine that runs ``pulumi up`` reach the Kubernetes API the program creates
its objects through?

A stack's Kubernetes objects (namespaces, the smoke Job, Karpenter's NodePools) are
created in the same run as the cluster, by a provider built from the cluster's outputs.
Where the API answers only inside the cluster's network and that network is created by
the same run, no runner can be inside it beforehand, and ``pulumi up`` fails at the first
Kubernetes object, after the cloud resources are already created:

- GKE with a private IP endpoint: the control plane's DNS-based endpoint answers from
  anywhere Google's APIs do, authorized by IAM
  (https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation, "DNS-based
  endpoint"), but only with ``allowExternalTraffic`` and only if the provider connects
  through it; otherwise the runner must be in the cluster's network, one that exists
  before the run (``network.existing``);
- EKS with public access off: the endpoint answers inside the VPC only
  (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html), so the runner
  must be in it, and the VPC must exist before the run (``network.subnets``);
- AKS private cluster: the API server answers inside the cluster's VNet only, a VNet AKS
  creates with the cluster; a public FQDN "doesn't create a public API endpoint or remove
  the requirement for network connectivity", and ``az aks command invoke`` is "not for
  programmatic access" (MicrosoftDocs/azure-aks-docs ``articles/aks/private-clusters.md``,
  ``access-private-cluster.md``). spotproof does not join an existing VNet, so a private
  AKS stack cannot be deployed by any runner.

A public endpoint is reachable from ``authorizedNetworks``, which the stack is told must
include the runner (``fleet.ApiAccess``); the plan cannot know the runner's address.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from spotproof.catalog import Cloud, profile
from spotproof.catalog import gke as gke_catalog
from spotproof.fleet import ApiAccess
from spotproof.plan.recording.recorder import Recording, Resource, reveal
from spotproof.policy import Violation

POLICY = "api-reachable"
PROVIDER = "pulumi:providers:kubernetes"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
RUNNER_INSIDE = "apiAccess.runnerInNetwork: true with a network that exists before the run"


def check(cloud: Cloud, access: ApiAccess, recording: Recording) -> list[Violation]:
    """A violation on each Kubernetes provider whose API the runner could not reach."""
    if not access.private_endpoint or not recording.kubernetes_objects():
        return []
    return [
        Violation(POLICY, provider.name, message)
        for provider in recording.of_type(PROVIDER)
        for message in _unreachable(cloud, access, recording, _server(provider))
    ]


def _server(provider: Resource) -> str | None:
    kubeconfig = reveal(provider.inputs.get("kubeconfig"))
    if not isinstance(kubeconfig, str):
        return None
    try:
        config: Any = yaml.safe_load(kubeconfig)
        return str(config["clusters"][0]["cluster"]["server"])
    except (yaml.YAMLError, KeyError, IndexError, TypeError):
        return None


def _unreachable(
    cloud: Cloud, access: ApiAccess, recording: Recording, server: str | None
) -> Iterator[str]:
    facts = profile(cloud)
    created = facts.network_type
    network_made_here = created is None or bool(recording.of_type(created))
    if cloud is Cloud.GKE and not access.runner_in_network:
        yield from _gke_dns_endpoint(recording, server)
    elif cloud is Cloud.AKS:
        yield (
            "an AKS private cluster's API answers only inside the VNet AKS creates with it, "
            "so no runner can create this stack's Kubernetes objects; allowed: "
            "apiAccess.authorizedNetworks with the runner's addresses"
        )
    elif not access.runner_in_network:
        yield (
            f"the API answers only inside the cluster's network, where pulumi up does not "
            f"run; allowed: {RUNNER_INSIDE}, or apiAccess.authorizedNetworks with the "
            "runner's addresses"
        )
    elif network_made_here:
        yield (
            "pulumi up is said to run inside the cluster's network, but this run creates "
            f"that network, so nothing is inside it yet; allowed: {RUNNER_INSIDE} "
            f"({facts.existing_network_setting})"
        )


def _gke_dns_endpoint(recording: Recording, server: str | None) -> Iterator[str]:
    clusters = recording.of_type(GKE_CLUSTER)
    external = any(
        ((c.inputs.get("controlPlaneEndpointsConfig") or {}).get("dnsEndpointConfig") or {}).get(
            "allowExternalTraffic"
        )
        for c in clusters
    )
    if not external:
        yield (
            "the API has no public IP endpoint and its DNS endpoint takes no traffic from "
            "outside the network; allowed: controlPlaneEndpointsConfig.dnsEndpointConfig."
            f"allowExternalTraffic true, or {RUNNER_INSIDE}"
        )
    elif server is None or not server.rstrip("/").endswith(gke_catalog.DNS_ENDPOINT_SUFFIX):
        yield (
            f"the Kubernetes provider connects to {server or 'an unknown server'}, the private "
            "IP endpoint, which only the cluster's network reaches; allowed: the control "
            f"plane's DNS endpoint (*{gke_catalog.DNS_ENDPOINT_SUFFIX}), or {RUNNER_INSIDE}"
        )
