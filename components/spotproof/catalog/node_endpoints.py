"""Endpoints a pod reaches on its node's host network, per cloud: where NetworkPolicies
must let workloads through (``kube.network_policy``) and what the plan checks they do
(``policy.network_policies``). Each cloud's are in its profile (``CloudProfile.host_dns``,
``identity_endpoints``); sources in ``kube.network_policy``'s docstring."""

from __future__ import annotations

from spotproof.catalog import PROFILES, Cloud

HOST_DNS: dict[Cloud, tuple[str, ...]] = {
    cloud: profile.host_dns for cloud, profile in PROFILES.items()
}
"""DNS servers on the node's host network, per cloud."""
IDENTITY_ENDPOINTS: dict[Cloud, tuple[tuple[str, int], ...]] = {
    cloud: profile.identity_endpoints for cloud, profile in PROFILES.items()
}
"""(address, TCP port) of the node-local endpoint that hands pods their cloud identity."""
