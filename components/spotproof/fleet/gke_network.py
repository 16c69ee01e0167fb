"""Where a GKE cluster's nodes, pods and services get their addresses: a network spotproof
creates (the default), or one that already exists, such as a Shared VPC's.

Either way the cluster is VPC-native: nodes take addresses from a subnetwork's primary
range, pods and services from two of its secondary ranges, named in the cluster's
``ipAllocationPolicy``. And never the project's ``default`` network, whose default
firewall rules admit SSH and RDP from anywhere
(https://cloud.google.com/vpc/docs/firewalls#more_rules_default_vpc).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from spotproof.fleet.addresses import check_disjoint, private_range
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject, config_key, read_settings, setting
from spotproof.fleet.readers import text

_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
"""A Compute Engine resource name (RFC 1035: 1-63 characters)."""
_PROJECT = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
NETWORK = re.compile(rf"^projects/(?P<project>{_PROJECT})/global/networks/(?P<name>{_NAME})$")
SUBNETWORK = re.compile(
    rf"^projects/(?P<project>{_PROJECT})/regions/(?P<region>[a-z]+-[a-z]+[0-9]+)"
    rf"/subnetworks/(?P<name>{_NAME})$"
)
RANGE_NAME = re.compile(rf"^{_NAME}$")


@dataclass(frozen=True)
class ExistingNetwork:
    """A network and subnetwork made elsewhere (a Shared VPC host project's, typically),
    which the cluster joins; spotproof then creates no network, router or NAT.

    What the plan cannot see, the network's owner provides (see docs/stacks.md, "An existing
    network"): secondary ranges with these names on the subnetwork; Private Google Access
    on it, or a Cloud NAT, so private nodes reach Cloud Storage and Artifact Registry; a
    Cloud NAT for images from registries outside Google; and, for a Shared VPC,
    ``roles/compute.networkUser`` on the subnetwork for the service project's GKE and
    Google APIs service agents plus ``roles/container.hostServiceAgentUser`` for the GKE
    one (https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-shared-vpc). A
    Shared VPC subnetwork cannot be created with the cluster: its ranges are the host
    project's to assign
    (https://cloud.google.com/kubernetes-engine/docs/how-to/alias-ips)."""

    network: str = setting("network", text(NETWORK, "projects/PROJECT/global/networks/NAME"))
    """The network's relative name. The cluster's ``network`` takes it as given: for a
    Shared VPC it must be the full name in the host project, not a bare one."""
    subnetwork: str = setting(
        "subnetwork",
        text(SUBNETWORK, "projects/PROJECT/regions/REGION/subnetworks/NAME"),
    )
    """The subnetwork's relative name; in the cluster's region and the network's
    project (a subnetwork belongs to one network, in that network's project)."""
    pods_range: str = setting("podsRange", text(RANGE_NAME, "a secondary range name"))
    """The subnetwork's secondary range for pods; its size caps the node count (a /24 of
    it per node at the default 110 pods per node)."""
    services_range: str = setting("servicesRange", text(RANGE_NAME, "a secondary range name"))
    """The subnetwork's secondary range for ClusterIP services."""


@dataclass(frozen=True)
class GkeNetwork:
    """The cluster's network. By default spotproof creates it (``spotproof:gke:Network``):
    a custom-mode VPC network with one subnetwork in the region, secondary ranges for pods
    and services, Private Google Access, and Cloud NAT as the private nodes' way out. With
    ``existing``, the cluster joins that network instead and the ranges below are unused.

    The three created ranges are RFC 1918 and must not overlap each other (or, where
    peered or connected, any other network's)."""

    cidr: str = setting("cidr", private_range(16, 24), "10.10.0.0/20")
    """Nodes' addresses (the subnetwork's primary range), a /16 to /24."""
    pods_cidr: str = setting("podsCidr", private_range(12, 21), "10.16.0.0/14")
    """Pods' addresses, a /12 to /21; GKE gives each node a slice of it (a /24 for the
    default 110 pods per node), so its size caps the node count."""
    services_cidr: str = setting("servicesCidr", private_range(16, 24), "10.20.0.0/20")
    """ClusterIP services' addresses, a /16 to /24."""
    existing: ExistingNetwork | None = setting("existing", None, None)
    """A network and subnetwork that exist already; None: spotproof creates them."""

    @property
    def created(self) -> bool:
        return self.existing is None


_CREATED_RANGES = ("cidr", "pods_cidr", "services_cidr")


def read_network(key: str, raw: Any, region: str) -> GkeNetwork:
    """``spotproof:network`` of a GKE stack: either ``existing`` or the created network's
    ranges, never both."""
    obj = ConfigObject(key, raw, fields_of=GkeNetwork)
    existing_key = config_key(GkeNetwork, "existing")
    existing = obj.field(existing_key, lambda k, v: _existing(k, v, region), None)
    if existing is not None:
        for name in (config_key(GkeNetwork, n) for n in _CREATED_RANGES):
            if obj.raw.get(name) is not None:
                raise SpecError(
                    obj.key_of(name),
                    obj.raw[name],
                    f"a range of a created network, but {obj.key_of(existing_key)} is set",
                    "either existing or the created network's cidr, podsCidr, servicesCidr",
                )
    network = GkeNetwork(**read_settings(GkeNetwork, obj, existing=existing))
    obj.finish()
    if network.created:
        check_disjoint(
            (obj.key_of(config_key(GkeNetwork, name)), getattr(network, name))
            for name in _CREATED_RANGES
        )
    return network


def _existing(key: str, raw: Any, region: str) -> ExistingNetwork:
    obj = ConfigObject(key, raw, fields_of=ExistingNetwork)
    existing = ExistingNetwork(**read_settings(ExistingNetwork, obj))
    obj.finish()
    network = NETWORK.fullmatch(existing.network)
    subnetwork = SUBNETWORK.fullmatch(existing.subnetwork)
    assert network is not None and subnetwork is not None  # the readers matched them
    if network["name"] == "default":
        raise SpecError(
            obj.key_of(config_key(ExistingNetwork, "network")),
            existing.network,
            "a project's default network, whose default firewall rules admit SSH and RDP "
            "from anywhere",
            "a network of its own",
        )
    if subnetwork["region"] != region:
        raise SpecError(
            obj.key_of(config_key(ExistingNetwork, "subnetwork")),
            existing.subnetwork,
            f"in {subnetwork['region']}, not the cluster's region",
            f"a subnetwork in {region}",
        )
    if subnetwork["project"] != network["project"]:
        raise SpecError(
            obj.key_of(config_key(ExistingNetwork, "subnetwork")),
            existing.subnetwork,
            f"in project {subnetwork['project']}, but the network is in {network['project']}",
            f"a subnetwork of {existing.network}",
        )
    if existing.pods_range == existing.services_range:
        raise SpecError(
            obj.key_of(config_key(ExistingNetwork, "services_range")),
            existing.services_range,
            "the same secondary range as podsRange",
            "two different secondary ranges of the subnetwork",
        )
    return existing
