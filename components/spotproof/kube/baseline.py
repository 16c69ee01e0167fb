"""What every spotproof cluster has before any workload: an isolated namespace and
PriorityClasses."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.kube.network_policy import isolate_namespace

MANAGED_BY = {"app.kubernetes.io/managed-by": "spotproof"}
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
"""The labels enforcing the Pod Security Standard ``restricted`` on a namespace."""


@dataclass
class ClusterBaselineArgs:
    namespace: str | None
    """Namespace for spotproof's workloads (the smoke test, trainers). None on a cluster
    whose workloads run in namespaces that exist already (a team's): the PriorityClasses
    alone; that namespace's Pod Security label and isolation are then its owner's (a
    ``TrainingJob`` there isolates its own pods)."""
    pod_security: str = "restricted"
    """Pod Security Standard enforced in that namespace."""
    cloud: Cloud | None = None
    """The cluster's cloud: the namespace then denies all traffic but what workloads need
    on it (``kube.network_policy``). None leaves it open, for a cluster whose network
    does not enforce NetworkPolicies."""


class ClusterBaseline(pulumi.ComponentResource):
    """The namespace for training work and the PriorityClasses of the scheduling contract.

    Spot batch work runs at a negative priority so that, under pressure, the scheduler
    evicts it before anything else; add-ons on the system pool run far above it.
    """

    namespace: pulumi.Output[str] | None
    """None where the args name no namespace."""
    network_policies: list[k8s.networking.v1.NetworkPolicy]
    priority_classes: dict[str, k8s.scheduling.v1.PriorityClass]

    def __init__(
        self, name: str, args: ClusterBaselineArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:kube:ClusterBaseline", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.namespace, self.network_policies = None, []
        if args.namespace is not None:
            namespace = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata={
                    "name": args.namespace,
                    "labels": {
                        **MANAGED_BY,
                        "pod-security.kubernetes.io/enforce": args.pod_security,
                        "pod-security.kubernetes.io/enforce-version": "latest",
                    },
                },
                opts=child,
            )
            self.namespace = namespace.metadata.apply(lambda m: m["name"])
            if args.cloud is not None:
                self.network_policies = isolate_namespace(
                    f"{name}-network", self.namespace, args.cloud, MANAGED_BY, child
                )

        self.priority_classes = {
            spec.name: k8s.scheduling.v1.PriorityClass(
                f"{name}-{spec.name}",
                metadata={"name": spec.name, "labels": MANAGED_BY},
                value=spec.value,
                global_default=False,
                preemption_policy="PreemptLowerPriority" if spec.preempts else "Never",
                description=spec.description,
                # Both are immutable (ValidatePriorityClassUpdate, kubernetes/kubernetes
                # pkg/apis/scheduling/validation/validation.go): a change is a new class.
                # Running pods keep the priority they were admitted with.
                opts=pulumi.ResourceOptions.merge(
                    child,
                    pulumi.ResourceOptions(
                        replace_on_changes=["value", "preemptionPolicy"],
                        delete_before_replace=True,
                    ),
                ),
            )
            for spec in scheduling.PRIORITY_CLASSES
        }
        self.register_outputs({"namespace": self.namespace})
