"""Who may reach the cluster's Kubernetes API: some networks, or none outside the cluster's
own; never the whole internet."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject, config_key, setting
from spotproof.fleet.readers import boolean, items


@dataclass(frozen=True)
class ApiAccess:
    """Who may reach the cluster's Kubernetes API. Never the whole internet: a stack
    names the networks that may use the public endpoint, or has no public endpoint.

    The Pulumi program creates Kubernetes objects through this endpoint, so the machine
    that runs ``pulumi up`` (a laptop's VPN range, a CI runner's egress addresses) must
    reach it: from within ``authorizedNetworks``; with ``privateEndpoint`` on GKE from
    anywhere, through the control plane's DNS endpoint, which Google authorizes by IAM; on
    EKS and AKS only from inside the cluster's network (``runnerInNetwork``), which must then
    exist before the run. ``spotproof plan`` refuses a stack whose runner could not reach it.
    """

    authorized_networks: tuple[str, ...] = setting("authorizedNetworks", None, ())
    """IPv4 CIDRs allowed to reach the public endpoint (``203.0.113.0/24``); public
    addresses or private ones, never ``0.0.0.0/0``. Required unless ``privateEndpoint``."""
    private_endpoint: bool = setting("privateEndpoint", boolean, False)
    """No public endpoint at all (GKE ``enablePrivateEndpoint``, EKS public access off, an
    AKS private cluster): the API answers only inside the cluster's network, and on GKE
    through its DNS endpoint to identities IAM allows. Excludes ``authorizedNetworks``."""
    runner_in_network: bool = setting("runnerInNetwork", boolean, False)
    """``pulumi up`` runs inside the cluster's network (a CI runner in the VPC, a VPN into
    it), which must therefore exist before the run: GKE ``network.existing``, EKS
    ``network.subnets``. Only with ``privateEndpoint``; on GKE the Kubernetes provider then
    uses the private IP endpoint instead of the DNS one."""


OPEN_TO_ALL = (ipaddress.IPv4Network("0.0.0.0/0"),)
API_ACCESS_ALLOWED = (
    "authorizedNetworks: the IPv4 CIDRs that may reach the API (the machine running "
    "pulumi up among them), or privateEndpoint: true"
)


def read_api_access(key: str, raw: Any) -> ApiAccess:
    """Never open to everyone: some networks, or none outside the cluster's own."""
    obj = ConfigObject(key, raw)
    networks_key = f"{key}.{config_key(ApiAccess, 'authorized_networks')}"
    networks = tuple(
        _authorized_network(k, v)
        for k, v in items(
            networks_key, obj.raw.get(config_key(ApiAccess, "authorized_networks"), [])
        )
    )
    obj.known.add(config_key(ApiAccess, "authorized_networks"))
    access = ApiAccess(
        authorized_networks=networks,
        private_endpoint=obj.field(config_key(ApiAccess, "private_endpoint"), boolean, False),
        runner_in_network=obj.field(config_key(ApiAccess, "runner_in_network"), boolean, False),
    )
    obj.finish()
    if access.runner_in_network and not access.private_endpoint:
        raise SpecError(
            f"{key}.{config_key(ApiAccess, 'runner_in_network')}",
            True,
            "only says where pulumi up reaches a private endpoint from",
            "runnerInNetwork with privateEndpoint: true; with authorizedNetworks, list the "
            "runner's addresses there",
        )
    if access.private_endpoint and networks:
        raise SpecError(
            networks_key,
            list(networks),
            "has no effect without a public endpoint (privateEndpoint is true)",
            "no authorizedNetworks with privateEndpoint: true",
        )
    if not access.private_endpoint and not networks:
        raise SpecError(key, raw, "names no network that may reach the API", API_ACCESS_ALLOWED)
    return access


def _authorized_network(key: str, raw: Any) -> str:
    allowed = "an IPv4 CIDR like 203.0.113.0/24, narrower than 0.0.0.0/0"
    try:
        network = ipaddress.IPv4Network(str(raw), strict=True)
    except ValueError:
        raise SpecError(
            key, raw, "not an IPv4 network (host bits set, or malformed)", allowed
        ) from None
    if network.prefixlen == 0:
        raise SpecError(key, raw, "opens the API to the whole internet", allowed)
    return str(network)
