"""``spotproof:gke:Network``: the cluster's own VPC network, with a way out for private nodes
(unless the stack names an existing one: :func:`joined`).

- Custom subnet mode (``autoCreateSubnetworks: false``): one subnetwork in the cluster's
  region instead of one per region, and none of the ``default`` network's firewall rules
  that admit SSH and RDP from anywhere
  (https://cloud.google.com/vpc/docs/firewalls#more_rules_default_vpc).
- Secondary ranges named ``pods`` and ``services`` for a VPC-native cluster, which takes
  them by name (``ipAllocationPolicy``).
- Private Google Access: nodes without external IPs still reach Google APIs (Artifact
  Registry, Cloud Storage, Pub/Sub) on Google's network.
- A Cloud Router with Cloud NAT for everything else: private nodes need it to pull images
  from registries outside Google (ghcr.io, Docker Hub) and to reach any other endpoint
  (https://cloud.google.com/kubernetes-engine/docs/how-to/advanced-private-cluster-config).
  NAT addresses are allocated automatically; errors are logged.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from spotproof.fleet.gke_network import ExistingNetwork, GkeNetwork

PODS_RANGE = "pods"
SERVICES_RANGE = "services"


@dataclass(frozen=True)
class ClusterAddresses:
    """What the cluster names: its network and subnetwork, and the subnetwork's secondary
    ranges for pods and services (``ipAllocationPolicy``)."""

    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    pods_range: str
    services_range: str


def joined(existing: ExistingNetwork) -> ClusterAddresses:
    """The addresses of a network made elsewhere, as the stack names them."""
    return ClusterAddresses(
        existing.network, existing.subnetwork, existing.pods_range, existing.services_range
    )


@dataclass
class NetworkArgs:
    network: GkeNetwork
    project: pulumi.Input[str]
    region: str
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (network, subnetwork, router, NAT);
    default the component's name. Two components in one project need different prefixes."""


class Network(pulumi.ComponentResource):
    """A custom-mode VPC network, its one subnetwork and the NAT of its private nodes."""

    network_id: pulumi.Output[str]
    subnetwork_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:Network", name, None, opts)
        self._prefix = args.name_prefix or name
        child = pulumi.ResourceOptions(parent=self)
        ranges = args.network
        network = gcp.compute.Network(
            f"{name}-vpc",
            name=self._prefix,
            project=args.project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            description=f"spotproof cluster network ({self._prefix})",
            opts=child,
        )
        subnetwork = gcp.compute.Subnetwork(
            f"{name}-nodes",
            name=f"{self._prefix}-nodes",
            project=args.project,
            region=args.region,
            network=network.id,
            ip_cidr_range=ranges.cidr,
            secondary_ip_ranges=[
                {"range_name": PODS_RANGE, "ip_cidr_range": ranges.pods_cidr},
                {"range_name": SERVICES_RANGE, "ip_cidr_range": ranges.services_cidr},
            ],
            private_ip_google_access=True,
            opts=child,
        )
        router = gcp.compute.Router(
            f"{name}-router",
            name=f"{self._prefix}-router",
            project=args.project,
            region=args.region,
            network=network.id,
            opts=child,
        )
        gcp.compute.RouterNat(
            f"{name}-nat",
            name=f"{self._prefix}-nat",
            project=args.project,
            region=args.region,
            router=router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config={"enable": True, "filter": "ERRORS_ONLY"},
            opts=child,
        )
        self.network_id = network.id
        self.subnetwork_id = subnetwork.id
        self.register_outputs({"network_id": self.network_id, "subnetwork_id": self.subnetwork_id})

    @property
    def addresses(self) -> ClusterAddresses:
        return ClusterAddresses(self.network_id, self.subnetwork_id, PODS_RANGE, SERVICES_RANGE)
