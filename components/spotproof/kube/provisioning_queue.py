"""Kueue queues that get a pool's nodes through a ProvisioningRequest: ``ProvisioningQueue``.

A queued-provisioning pool (GKE's DWS flex-start with ``queuedProvisioning``) never adds a
node for a pending pod; it adds all the nodes of one ProvisioningRequest at once. Kueue
writes that request for a Job or JobSet submitted to a queue whose ClusterQueue carries the
ProvisioningRequest admission check, admits the workload once the nodes exist, and puts
the consume annotations on its pods (``catalog.kueue``). The chain built here, for one pool:

    LocalQueue (the workloads' namespace)
      -> ClusterQueue: one ResourceFlavor for the pool, quota up to what the pool can hold,
         admitting only from that namespace
           -> AdmissionCheck (controller ``kueue.x-k8s.io/provisioning-request``)
                -> ProvisioningRequestConfig (the provisioning class, GPUs managed)

A workload joins the chain by the label ``kueue.x-k8s.io/queue-name: <LocalQueue>`` on the
Job or JobSet itself; ``spotproof plan`` follows the same chain for every workload aimed at
a queued pool (``spotproof.plan.simulation.admission``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import kueue
from spotproof.catalog.labels import NAMESPACE_NAME_LABEL
from spotproof.kube.baseline import MANAGED_BY


@dataclass(frozen=True, kw_only=True)
class ProvisioningQueueArgs:
    pool: str
    """The queued pool; names the flavor, the queues, the check and its config."""
    namespace: str
    """Where the LocalQueue lives: the only namespace whose workloads it admits."""
    provisioning_class: str
    """``ProvisioningRequest.spec.provisioningClassName`` (``queued-provisioning.gke.io``)."""
    node_labels: Mapping[str, str]
    """Labels of the pool's nodes: the flavor's ``nodeLabels``, which Kueue adds to the
    admitted pods' node selector."""
    quota: Mapping[str, str]
    """Resource -> nominal quota: what the pool holds at its maximum size. Its keys are the
    covered resources, so they must include all the queued pods request."""
    pod_set_updates: Mapping[str, str] = field(default_factory=dict)
    """Node label -> ``status.provisioningClassDetails`` key whose value the admitted pods
    are pinned to (GKE: the nodes of their own request)."""
    provider: k8s.Provider
    controller: pulumi.Resource
    """Kueue's chart: its CRDs and webhooks must exist first."""


def _object(kind: str, name: str, spec: Mapping[str, Any], namespace: str | None = None) -> dict:
    metadata: dict[str, Any] = {"name": name, "labels": MANAGED_BY}
    if namespace:
        metadata["namespace"] = namespace
    return {"api_version": kueue.API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def provisioning_objects(args: ProvisioningQueueArgs) -> list[dict[str, Any]]:
    """The five objects of the chain, in the order they refer to each other."""
    name = args.pool
    check = f"{name}-provisioning"
    config: dict[str, Any] = {
        "provisioningClassName": args.provisioning_class,
        "managedResources": [scheduling.GPU_RESOURCE],
    }
    if args.pod_set_updates:
        config["podSetUpdates"] = {
            "nodeSelector": [
                {"key": key, "valueFromProvisioningClassDetail": detail}
                for key, detail in sorted(args.pod_set_updates.items())
            ]
        }
    return [
        _object("ResourceFlavor", name, {"nodeLabels": dict(args.node_labels)}),
        _object("ProvisioningRequestConfig", name, config),
        _object(
            "AdmissionCheck",
            check,
            {
                "controllerName": kueue.PROVISIONING_CONTROLLER,
                "parameters": {
                    "apiGroup": kueue.API_VERSION.split("/")[0],
                    "kind": "ProvisioningRequestConfig",
                    "name": name,
                },
            },
        ),
        _object(
            "ClusterQueue",
            name,
            {
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: args.namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": sorted(args.quota),
                        "flavors": [
                            {
                                "name": name,
                                "resources": [
                                    {"name": resource, "nominalQuota": amount}
                                    for resource, amount in sorted(args.quota.items())
                                ],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {
                    "admissionChecks": [{"name": check, "onFlavors": [name]}]
                },
            },
        ),
        _object("LocalQueue", name, {"clusterQueue": name}, namespace=args.namespace),
    ]


class ProvisioningQueue(pulumi.ComponentResource):
    """A LocalQueue whose workloads get the nodes of one queued pool through Kueue's
    ProvisioningRequest admission check."""

    queue_name: str
    """What a Job or JobSet puts in ``kueue.x-k8s.io/queue-name``."""

    def __init__(
        self, name: str, args: ProvisioningQueueArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:kube:ProvisioningQueue", name, None, opts)
        previous: list[pulumi.Resource] = [args.controller]
        for obj in provisioning_objects(args):
            # The CRDs come with the chart, and each object waits for those it names.
            previous = [
                k8s.apiextensions.CustomResource(
                    f"{name}-{obj['kind'].lower()}",
                    **obj,
                    opts=pulumi.ResourceOptions(
                        parent=self, provider=args.provider, depends_on=previous
                    ),
                )
            ]
        self.queue_name = args.pool
        self.register_outputs({"queue_name": self.queue_name})
