"""How the cluster's API is reached: the endpoint config ``spotproof:apiAccess`` asks for,
the server a program's Kubernetes provider connects to, and the kubeconfig the stack
exports (``HybridCluster``)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp
import yaml

from spotproof.catalog import gke as gke_catalog
from spotproof.fleet import ApiAccess

PRIVATE_NODES = {"enable_private_nodes": True}
"""Nodes without external IPs, every pool and auto-provisioned node included: they reach
the internet only through the network's Cloud NAT. No ``masterIpv4CidrBlock``: the
control plane is reached over Private Service Connect, which needs none (pulumi-gcp
``container.Cluster``, ``privateClusterConfig``)."""


def api_endpoint(access: ApiAccess) -> dict[str, Any]:
    """Cluster arguments that close the API to everyone but ``access``.

    ``masterAuthorizedNetworksConfig`` is always sent, with the stack's CIDRs and Google
    Cloud's own public addresses left out (``gcpPublicCidrsAccessEnabled: false``, or any VM
    of any project could knock): left out, the provider sends ``enabled: false``
    (terraform-provider-google ``expandMasterAuthorizedNetworksConfig``, which pulumi-gcp
    bridges), and GKE refuses a private endpoint with it, "Master authorized networks must
    be enabled if private endpoint is enabled" (GoogleCloudPlatform/magic-modules#8338).

    With ``privateEndpoint`` there is no public IP endpoint, and the control plane's
    DNS-based endpoint takes traffic from outside the network: a request there needs a
    Google identity that IAM allows on the cluster, and it is reachable from wherever
    Google's APIs are, so ``pulumi up`` in CI can create the cluster's Kubernetes objects
    in the same run that creates its network
    (https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation, "DNS-based
    endpoint"; https://cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks)."""
    authorized = {
        "cidr_blocks": [
            {"cidr_block": cidr, "display_name": f"spotproof-{index}"}
            for index, cidr in enumerate(access.authorized_networks)
        ],
        "gcp_public_cidrs_access_enabled": False,
    }
    arguments: dict[str, Any] = {
        "private_cluster_config": {
            **PRIVATE_NODES,
            "enable_private_endpoint": access.private_endpoint,
        },
        "master_authorized_networks_config": authorized,
    }
    if access.private_endpoint:
        arguments["control_plane_endpoints_config"] = {
            "dns_endpoint_config": {"allow_external_traffic": True}
        }
    return arguments


def api_server(cluster: gcp.container.Cluster, access: ApiAccess) -> pulumi.Output[str]:
    """Where the Kubernetes provider reaches the API: the DNS endpoint when the IP endpoint
    is private and the runner is outside the network, the IP endpoint otherwise."""
    if access.private_endpoint and not access.runner_in_network:
        return cluster.control_plane_endpoints_config.apply(
            lambda config: config["dns_endpoint_config"]["endpoint"]
        )
    return cluster.endpoint


def kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that authenticates with ``gke-gcloud-auth-plugin`` (no static token).
    The DNS endpoint serves a publicly trusted certificate, not one of the cluster's CA, so
    its kubeconfig names no CA (as ``gcloud container clusters get-credentials
    --dns-endpoint`` writes it)."""
    context = f"gke_{cluster_name}"
    cluster: dict[str, str] = {"server": f"https://{endpoint}"}
    if not endpoint.endswith(gke_catalog.DNS_ENDPOINT_SUFFIX):
        cluster["certificate-authority-data"] = ca_certificate
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": cluster}],
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
