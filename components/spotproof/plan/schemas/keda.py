"""KEDA's objects checked as its API server and admission webhook would.

kubernetes-validate has no KEDA schema. The fields are those of ``apis/keda/v1alpha1``
in kedacore/keda (``scaledobject_types.go``, ``scaletriggers_types.go``,
``triggerauthentication_types.go``); the rules are the webhook's
(``scaledobject_webhook.go``, ``triggerauthentication_webhook.go``) as of 2.20
(``catalog.keda``). A trigger's metadata is ``map[string]string``: a number written
without quotes is refused by the API server.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.catalog import keda
from spotproof.plan.schemas.jobset import unknown_fields

SCALED_OBJECT_FIELDS = frozenset(
    {
        "scaleTargetRef",
        "pollingInterval",
        "initialCooldownPeriod",
        "cooldownPeriod",
        "idleReplicaCount",
        "minReplicaCount",
        "maxReplicaCount",
        "advanced",
        "triggers",
        "fallback",
    }
)
SCALE_TARGET_FIELDS = frozenset({"name", "apiVersion", "kind", "envSourceContainerName"})
TRIGGER_FIELDS = frozenset(
    {"type", "name", "useCachedMetrics", "metadata", "authenticationRef", "metricType"}
)
AUTHENTICATION_REF_FIELDS = frozenset({"name", "kind"})
AUTHENTICATION_KINDS = frozenset({"TriggerAuthentication", "ClusterTriggerAuthentication"})
FALLBACK_FIELDS = frozenset({"failureThreshold", "replicas", "behavior"})
POD_IDENTITY_FIELDS = frozenset(
    {
        "provider",
        "identityId",
        "identityTenantId",
        "identityAuthorityHost",
        "roleArn",
        "identityOwner",
    }
)
PROVIDERS = frozenset({"azure-workload", "gcp", "aws", "aws-eks", "none"})
IDENTITY_OWNERS = frozenset({"keda", "workload"})
MINIMUM = {
    "pollingInterval": 1,
    "initialCooldownPeriod": 0,
    "cooldownPeriod": 0,
    "idleReplicaCount": 0,
    "minReplicaCount": 0,
    "maxReplicaCount": 1,
}
MAX_NAME = 63
HPA_NAME_PREFIX = "keda-hpa-"
"""The HPA KEDA creates is named ``keda-hpa-<ScaledObject>`` unless
``advanced.horizontalPodAutoscalerConfig.name`` says otherwise; since 2.20 the webhook
refuses a ScaledObject whose name would make that HPA's name longer than 63."""


def is_keda(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == keda.API_VERSION


def errors(obj: Mapping[str, Any]) -> list[str]:
    kind = obj.get("kind")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return ["spec is required"]
    if kind == keda.SCALED_OBJECT:
        name = str((obj.get("metadata") or {}).get("name") or "")
        return list(_scaled_object(name, spec))
    if kind == keda.TRIGGER_AUTHENTICATION:
        return list(_trigger_authentication(spec))
    return []


def _scaled_object(name: str, spec: Mapping[str, Any]) -> Iterator[str]:
    yield from unknown_fields("spec", spec, SCALED_OBJECT_FIELDS)
    target = spec.get("scaleTargetRef")
    if not isinstance(target, Mapping) or not target.get("name"):
        yield "spec.scaleTargetRef.name is required"
    else:
        yield from unknown_fields("spec.scaleTargetRef", target, SCALE_TARGET_FIELDS)
    for field, minimum in MINIMUM.items():
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < minimum):
            yield f"spec.{field} = {value!r}: allowed a whole number >= {minimum}"
    yield from _replica_bounds(spec)
    hpa = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}).get("name")
    if len(name) > MAX_NAME or (not hpa and len(HPA_NAME_PREFIX + name) > MAX_NAME):
        yield (
            f"name {name!r}: its HPA would be {HPA_NAME_PREFIX}{name}; allowed: at most "
            f"{MAX_NAME - len(HPA_NAME_PREFIX)} characters, or "
            "advanced.horizontalPodAutoscalerConfig.name"
        )
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        yield "spec.triggers: at least one trigger is required"
        return
    for index, trigger in enumerate(triggers):
        yield from _trigger(f"spec.triggers[{index}]", trigger)
    fallback = spec.get("fallback")
    if isinstance(fallback, Mapping):
        yield from unknown_fields("spec.fallback", fallback, FALLBACK_FIELDS)
        for field in ("failureThreshold", "replicas"):
            if not isinstance(fallback.get(field), int) or fallback[field] < 0:
                yield f"spec.fallback.{field} is required, a whole number >= 0"


def _replica_bounds(spec: Mapping[str, Any]) -> Iterator[str]:
    """``CheckReplicaCountBoundsAreValid``: a set ``minReplicaCount`` of 0 counts as 1 (the
    HPA's minimum), and ``idleReplicaCount`` must be below it."""
    low = spec.get("minReplicaCount")
    high = spec.get("maxReplicaCount", keda.DEFAULT_MAX_REPLICAS)
    if not isinstance(high, int) or (low is not None and not isinstance(low, int)):
        return
    # Unset, the minimum is 0 for this check (and any idleReplicaCount is refused).
    effective = 0 if low is None else max(low, 1)
    if low is not None and effective > high:
        yield f"spec.minReplicaCount {low} is above spec.maxReplicaCount {high}"
    idle = spec.get("idleReplicaCount")
    if isinstance(idle, int) and idle >= effective:
        yield f"spec.idleReplicaCount {idle} must be below the minimum replica count {effective}"


def _trigger(where: str, trigger: Any) -> Iterator[str]:
    if not isinstance(trigger, Mapping):
        yield f"{where}: not an object"
        return
    yield from unknown_fields(where, trigger, TRIGGER_FIELDS)
    kind = trigger.get("type")
    if not kind:
        yield f"{where}.type is required"
    metadata = trigger.get("metadata")
    if not isinstance(metadata, Mapping):
        yield f"{where}.metadata is required"
        return
    for key, value in metadata.items():
        if not isinstance(value, str):
            yield f"{where}.metadata.{key} = {value!r}: allowed a string (quote it)"
    for key in keda.TRIGGERS.get(str(kind), ()):
        if not metadata.get(key):
            yield f"{where}.metadata.{key} is required by the {kind} scaler"
    reference = trigger.get("authenticationRef")
    if isinstance(reference, Mapping):
        yield from unknown_fields(
            f"{where}.authenticationRef", reference, AUTHENTICATION_REF_FIELDS
        )
        if not reference.get("name"):
            yield f"{where}.authenticationRef.name is required"
        if reference.get("kind", "TriggerAuthentication") not in AUTHENTICATION_KINDS:
            yield (
                f"{where}.authenticationRef.kind = {reference.get('kind')!r}; allowed: "
                f"{', '.join(sorted(AUTHENTICATION_KINDS))}"
            )


def _trigger_authentication(spec: Mapping[str, Any]) -> Iterator[str]:
    identity = spec.get("podIdentity")
    if identity is None:
        return
    if not isinstance(identity, Mapping):
        yield "spec.podIdentity: not an object"
        return
    yield from unknown_fields("spec.podIdentity", identity, POD_IDENTITY_FIELDS)
    provider = identity.get("provider")
    if provider not in PROVIDERS:
        yield f"spec.podIdentity.provider = {provider!r}; allowed: {', '.join(sorted(PROVIDERS))}"
    owner = identity.get("identityOwner")
    if owner is not None and owner not in IDENTITY_OWNERS:
        yield f"spec.podIdentity.identityOwner = {owner!r}; allowed: keda, workload"
    if identity.get("roleArn") and owner == "workload":
        yield "spec.podIdentity.roleArn is refused when identityOwner is workload"
    for field in ("identityId", "identityTenantId"):
        if identity.get(field) == "":
            yield f"spec.podIdentity.{field} must not be empty when set"
    if identity.get("identityAuthorityHost") and not identity.get("identityTenantId"):
        yield "spec.podIdentity.identityAuthorityHost needs identityTenantId"
