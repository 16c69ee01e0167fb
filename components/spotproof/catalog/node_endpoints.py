"""Endpoints a pod reaches on its node's host network, per cloud: where NetworkPolicies
must let workloads through (``kube.network_policy``) and what the plan checks they do
(``policy.network_policies``). Sources in ``kube.network_policy``'s docstring."""

from __future__ import annotations

from spotproof.catalog import Cloud

HOST_DNS: dict[Cloud, tuple[str, ...]] = {
    Cloud.GKE: ("169.254.20.10/32", "169.254.169.254/32"),
    Cloud.EKS: (),
    Cloud.AKS: (),
}
"""DNS servers on the node's host network, per cloud."""
IDENTITY_ENDPOINTS: dict[Cloud, tuple[tuple[str, int], ...]] = {
    Cloud.GKE: (("169.254.169.254/32", 80), ("169.254.169.252/32", 988)),
    Cloud.EKS: (("169.254.170.23/32", 80),),
    Cloud.AKS: (),
}
"""(address, TCP port) of the node-local endpoint that hands pods their cloud identity."""
