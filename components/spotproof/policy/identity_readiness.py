"""A workload is created only after the cloud identity its pods run as can act.

A pod gets its cloud identity through a binding of its Kubernetes service account, made in
the cloud: an EKS Pod Identity association, GKE's ``roles/iam.workloadIdentityUser`` grant
to ``PROJECT.svc.id.goog[NAMESPACE/NAME]``, an AKS federated identity credential whose
subject is ``system:serviceaccount:NAMESPACE:NAME``. Its rights come from grants to that
identity. ``pulumi up`` creates resources in parallel, ordered only by their dependencies,
so a Job that depends on none of these can be created first, and its pods fail:

- EKS sets the Pod Identity variables in a pod's containers when the pod is created and
  its service account has an association ("If a Pod uses a service account that has an
  association, Amazon EKS sets environment variables in the containers of the Pod",
  https://docs.aws.amazon.com/eks/latest/APIReference/API_CreatePodIdentityAssociation.html);
  a pod created before it has no credentials for its whole life;
- without the grant, every call the store makes is refused.

Either way the trainer exits ``STORAGE_UNAVAILABLE`` and the failure counts against the
Job's ``backoffLimit``. The rule follows every workload's service account to the
resources that bind it and grant its identity (each cloud's policy module says which:
:class:`IdentityBinding`), and requires each among the workload's
dependencies, directly or through others. Bindings and grants are themselves eventually
consistent (the same page: "may take several seconds to be effective"), so this orders
what can be ordered and the Job's retries absorb the rest.

Objects applied outside the program (``spotproof check``) are applied after ``pulumi up``
and are not judged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof import clouds
from spotproof.policy.base import PlannedResource, StackRule
from spotproof.scheduling import pod_templates

ACCOUNT_TYPE = "kubernetes:core/v1:ServiceAccount"
Grants = Callable[
    [list[PlannedResource], PlannedResource, Mapping[str, Any]], list[PlannedResource]
]


def _no_grants(
    _resources: list[PlannedResource], _binding: PlannedResource, _account: Mapping[str, Any]
) -> list[PlannedResource]:
    return []


@dataclass(frozen=True)
class IdentityBinding:
    """How a cloud binds a Kubernetes service account to its identity: each cloud's policy
    module lists its own (``IDENTITY_BINDINGS``)."""

    type: str
    """The Pulumi type of the resource that binds."""
    account: Callable[[Mapping[str, Any]], tuple[str, str] | None]
    """The (namespace, name) of the service account a binding's inputs bind; None when the
    resource binds none."""
    grants: Grants = _no_grants
    """What grants the bound identity its rights, where the plan can tell: (every
    resource, the binding, the service account's inputs) -> the grants."""


def _bindings() -> dict[str, IdentityBinding]:
    return {
        binding.type: binding
        for cloud in clouds.modules("spotproof.policy")
        for binding in cloud.IDENTITY_BINDINGS
    }


def _closure(resource: PlannedResource, by_urn: Mapping[str, PlannedResource]) -> set[str]:
    """Every URN created before ``resource``: its dependencies and its parent, theirs, and
    so on. A parent counts because the SDK registers a child only once the parent's URN is
    known, and registers the parent only once its own dependencies exist; so a child of a
    component with ``depends_on`` waits for those too."""
    seen: set[str] = set()
    pending = _waits_for(resource)
    while pending:
        urn = pending.pop()
        if urn not in seen:
            seen.add(urn)
            if (found := by_urn.get(urn)) is not None:
                pending += _waits_for(found)
    return seen


def _waits_for(resource: PlannedResource) -> list[str]:
    return [*(resource.dependencies or ()), *([resource.parent] if resource.parent else [])]


def identity_ready(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    by_urn = {r.urn: r for r in resources}
    kinds = _bindings()
    bindings: dict[tuple[str, str], list[PlannedResource]] = {}
    for resource in resources:
        kind = kinds.get(resource.type)
        if kind is not None and (account := kind.account(resource.inputs)) is not None:
            bindings.setdefault(account, []).append(resource)
    accounts = {
        (str(meta.get("namespace", "default")), str(meta.get("name"))): r.inputs
        for r in resources
        if r.type == ACCOUNT_TYPE and (meta := r.inputs.get("metadata") or {})
    }
    for workload, namespace, template in pod_templates.workload_templates(resources):
        if workload.dependencies is None:
            continue
        account = (namespace, str(template.spec.get("serviceAccountName", "default")))
        before = _closure(workload, by_urn)
        needed = [
            needed
            for binding in bindings.get(account, [])
            for needed in (
                binding,
                *kinds[binding.type].grants(resources, binding, accounts.get(account, {})),
            )
        ]
        # Two bindings of one account (two cloud identities) find its grants twice.
        missing = list(
            dict.fromkeys(
                f"{r.name} ({r.type.rpartition(':')[2]})" for r in needed if r.urn not in before
            )
        )
        if missing:
            yield (
                workload.name,
                f"may be created before {', '.join(missing)}, which bind or grant the identity "
                f"of service account {account[0]}/{account[1]}: its pods would start without "
                "credentials or rights; make it depend on them (WorkloadIdentity.granted_by, or "
                "depends_on)",
            )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "workload-identity-ready",
        "Workloads are created after their service account's cloud identity is bound and granted.",
        identity_ready,
    ),
)
