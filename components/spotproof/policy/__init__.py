"""Policy rules over planned resources, as plain functions.

``spotproof plan`` runs them over the offline recording; ``crossguard`` wraps the same
functions as Pulumi CrossGuard policies, and the pack folder ``pack/`` (installed with the
package; ``spotproof policy-pack`` prints where) lets ``pulumi preview --policy-pack`` enforce
them against real previews. A rule sees a resource as its Pulumi type token, its name and
its inputs (camelCase, as both the mocks and CrossGuard present them).

Resource rules judge one resource at a time; stack rules need several (a bucket against
its cluster's region, a Job against the PriorityClasses it uses). One module per subject:
each registered cloud's own (``gke``, ``eks``, ``aks``: its resources, found through
``spotproof.clouds``), ``karpenter`` for NodePools on any cloud, ``kubernetes`` for the
objects every cloud renders, and
``disruption`` for PodDisruptionBudgets, ``work_queues`` for batch queues and their
consumers on every cloud, ``autoscaling`` for KEDA's ScaledObjects, ``pod_security`` for
what Pod Security admission refuses.
"""

from __future__ import annotations

from spotproof import clouds
from spotproof.policy import (
    autoscaling,
    disruption,
    identity_readiness,
    karpenter,
    kubernetes,
    network_policies,
    pod_security,
    storage_access,
    work_queues,
)
from spotproof.policy.base import (
    PlannedResource,
    Problem,
    ResourceRule,
    Scope,
    StackRule,
    Violation,
    key_path_of,
)

__all__ = [
    "RESOURCE_RULES",
    "STACK_RULES",
    "PlannedResource",
    "Problem",
    "ResourceRule",
    "Scope",
    "StackRule",
    "Violation",
    "evaluate",
    "scope_of",
]

_CLOUDS = clouds.modules("spotproof.policy")

RESOURCE_RULES: tuple[ResourceRule, ...] = (
    *(rule for cloud in _CLOUDS for rule in cloud.RESOURCE_RULES),
    *karpenter.RESOURCE_RULES,
    *kubernetes.RESOURCE_RULES,
)
STACK_RULES: tuple[StackRule, ...] = (
    *(rule for cloud in _CLOUDS for rule in cloud.STACK_RULES),
    *karpenter.STACK_RULES,
    *kubernetes.STACK_RULES,
    *disruption.STACK_RULES,
    *work_queues.STACK_RULES,
    *autoscaling.STACK_RULES,
    *storage_access.STACK_RULES,
    *network_policies.STACK_RULES,
    *identity_readiness.STACK_RULES,
    *pod_security.STACK_RULES,
)


def evaluate(
    resources: list[PlannedResource], kubernetes_version: str | None = None
) -> list[Violation]:
    """Every violation of every rule over a whole stack's resources, on a cluster at
    ``kubernetes_version`` where the caller knows it."""
    violations = [
        Violation(rule.name, resource.name, str(message), key_path_of(message))
        for resource in resources
        for rule in RESOURCE_RULES
        if rule.resource_type == resource.type
        for message in rule.check(resource.inputs)
    ]
    violations += [
        Violation(rule.name, name, str(message), key_path_of(message))
        for rule in STACK_RULES
        for name, message in (
            rule.at_version(resources, kubernetes_version)
            if rule.at_version and kubernetes_version
            else rule.check(resources)
        )
    ]
    return violations


def scope_of(rule_name: str) -> Scope:
    """Where the rule named ``rule_name`` applies, as it declares; a check of the plan's
    own (the scheduling fit, scale-up) applies wherever it runs."""
    rules = (*RESOURCE_RULES, *STACK_RULES)
    return next((rule.scope for rule in rules if rule.name == rule_name), Scope())
