"""Can the machine that runs ``pulumi up`` reach the Kubernetes API the program creates
its objects through?

A stack's Kubernetes objects (namespaces, the smoke Job, Karpenter's NodePools) are
created in the same run as the cluster, by a provider built from the cluster's outputs.
Where the API answers only inside the cluster's network and that network is created by
the same run, no runner can be inside it beforehand, and ``pulumi up`` fails at the first
Kubernetes object, after the cloud resources are already created. The shared reading is
EKS's: with public access off the endpoint answers inside the VPC only
(https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html), so the runner
must be in it, and the VPC must exist before the run (the profile's
``existing_network_setting``, ``network.subnets``). A cloud whose private API reads
otherwise says so in its plan module (``CloudPlan.private_api``): GKE's DNS-based endpoint
answers from outside its network (``plan.gke``); an AKS private cluster answers inside a
VNet no runner can be in (``plan.aks``).

A public endpoint is reachable from ``authorizedNetworks``, which the stack is told must
include the runner (``fleet.ApiAccess``); the plan cannot know the runner's address.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from spotproof.catalog import Cloud, profile
from spotproof.fleet import ApiAccess
from spotproof.plan.cloud import plan_of
from spotproof.plan.recording.recorder import Recording, Resource, reveal
from spotproof.policy import Violation

POLICY = "api-reachable"
PROVIDER = "pulumi:providers:kubernetes"
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
    own = plan_of(cloud).private_api(access, recording, server)
    if own is not None:
        yield from own
        return
    facts = profile(cloud)
    created = facts.network_type
    network_made_here = created is None or bool(recording.of_type(created))
    if not access.runner_in_network:
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
