"""Rules for KEDA's ScaledObjects across a stack: will the scaler actually scale?

A ScaledObject is admitted however wrong it is, as long as its fields parse: the target,
the authentication and KEDA itself are found (or not) only when the operator reconciles
it, and then it reports ``Ready=False`` on the object while the workers never start
(``controllers/keda/scaledobject_controller.go``). Each rule here is one of those silent
failures (``catalog.keda`` gives the sources):

- KEDA is not installed (no KEDA chart in the stack);
- the target Deployment is not in the stack, or starts workers before KEDA scales it, or
  has its count reset by every update (``catalog.keda.REPLICAS_OWNED_BY_SCALER``), or is
  scaled by a second ScaledObject or an HPA;
- the ``authenticationRef`` names no TriggerAuthentication in the namespace;
- the pod identity is not the cloud's (``azure-queue`` accepts only ``azure-workload``),
  or KEDA's operator was not given that identity: the chart's ``podIdentity.gcp`` /
  ``podIdentity.azureWorkload`` values, or an EKS Pod Identity association for
  ``keda/keda-operator``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import keda, profile
from spotproof.policy.base import PlannedResource, Problem, StackRule
from spotproof.policy.kubernetes import cloud_of

SCALED_OBJECT = f"kubernetes:{keda.API_VERSION}:{keda.SCALED_OBJECT}"
TRIGGER_AUTHENTICATION = f"kubernetes:{keda.API_VERSION}:{keda.TRIGGER_AUTHENTICATION}"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
HPA = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
HELM_CHART = "kubernetes:helm.sh/v4:Chart"
POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def _name_and_namespace(resource: PlannedResource) -> tuple[str, str]:
    metadata = resource.inputs.get("metadata") or {}
    return str(metadata.get("name", resource.name)), str(metadata.get("namespace", "default"))


@dataclass(frozen=True)
class _Keda:
    """KEDA as a stack declares it: the chart's values where the chart's inputs are seen
    (the offline plan), the operator's rendered ServiceAccount where its children are (a
    real preview under CrossGuard, where a v4 Chart's own outputs list only resources)."""

    values: Mapping[str, Any] | None
    operator_account: Mapping[str, Any] | None


def _keda(resources: list[PlannedResource]) -> _Keda | None:
    values: Mapping[str, Any] | None = None
    operator: Mapping[str, Any] | None = None
    rendered = False
    for resource in resources:
        inputs = resource.inputs
        repository = (inputs.get("repositoryOpts") or {}).get("repo")
        is_chart = inputs.get("chart") == keda.CHART and repository in (None, keda.REPOSITORY)
        if resource.type == HELM_CHART and is_chart:
            values = inputs.get("values") or {}
        metadata = inputs.get("metadata") or {}
        if metadata.get("namespace") != keda.NAMESPACE:
            continue
        if metadata.get("name") != keda.OPERATOR_SERVICE_ACCOUNT:
            continue
        if resource.type == DEPLOYMENT:
            rendered = True
        elif resource.type == SERVICE_ACCOUNT:
            operator = metadata
    if values is None and not rendered:
        return None
    return _Keda(values, operator)


def scaled_objects_scale(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    scaled = [r for r in resources if r.type == SCALED_OBJECT]
    if not scaled:
        return
    installed = _keda(resources)
    deployments = {_name_and_namespace(r): r for r in resources if r.type == DEPLOYMENT}
    authentications = {
        _name_and_namespace(r): r for r in resources if r.type == TRIGGER_AUTHENTICATION
    }
    scalers: dict[tuple[str, str], list[str]] = {}
    for hpa in (r for r in resources if r.type == HPA):
        target = ((hpa.inputs.get("spec") or {}).get("scaleTargetRef") or {}).get("name")
        scalers.setdefault((str(target), _name_and_namespace(hpa)[1]), []).append(hpa.name)
    for resource in scaled:
        name, namespace = _name_and_namespace(resource)
        spec = resource.inputs.get("spec") or {}
        target = spec.get("scaleTargetRef") or {}
        scalers.setdefault((str(target.get("name")), namespace), []).append(resource.name)
        if installed is None:
            yield (
                resource.name,
                f"ScaledObject {namespace}/{name}: KEDA is not installed in this stack, so "
                "nothing would ever scale its target; install the KEDA chart "
                "(spotproof:keda) or drop the ScaledObject",
            )
        yield from _target(resource, namespace, target, deployments)
        for trigger in spec.get("triggers") or []:
            yield from _authentication(resource, namespace, trigger, authentications)
            yield from _operator_identity(resources, resource, trigger, authentications, installed)
    for (target_name, namespace), owners in sorted(scalers.items()):
        if len(owners) > 1:
            yield (
                owners[-1],
                f"Deployment {namespace}/{target_name} is scaled by {', '.join(owners)}: KEDA's "
                "webhook refuses a second scaler of one target, and with its webhook "
                "unreachable the two would fight",
            )


def _target(
    resource: PlannedResource,
    namespace: str,
    target: Mapping[str, Any],
    deployments: dict[tuple[str, str], PlannedResource],
) -> Iterator[tuple[str, str]]:
    kind = target.get("kind", "Deployment")
    name = target.get("name")
    if kind != "Deployment":
        return
    deployment = deployments.get((str(name), namespace))
    if deployment is None:
        yield (
            resource.name,
            f"ScaledObject {namespace}/{_name_and_namespace(resource)[0]} targets Deployment "
            f"{namespace}/{name}, which this stack does not declare",
        )
    else:
        yield from _replicas_left_to_scaler(deployment, f"{namespace}/{name}")


def _replicas_left_to_scaler(deployment: PlannedResource, name: str) -> Iterator[tuple[str, str]]:
    """A declared Deployment starts at 0 and leaves its count to the scaler; one applied
    outside Pulumi (``spotproof check``) leaves ``replicas`` out."""
    replicas = (deployment.inputs.get("spec") or {}).get("replicas")
    if deployment.dependencies is None:
        if replicas is not None:
            yield (
                deployment.name,
                Problem(
                    f"Deployment {name} sets replicas although a ScaledObject scales it: every "
                    "apply would reset the scaler's count; leave replicas out",
                    "spec.replicas",
                ),
            )
        return
    if replicas != 0:
        yield (
            deployment.name,
            Problem(
                f"Deployment {name} starts with {1 if replicas is None else replicas} pod(s) "
                "before KEDA scales it; allowed: replicas 0",
                "spec.replicas",
            ),
        )
    if keda.REPLICAS_OWNED_BY_SCALER not in deployment.ignore_changes:
        yield (
            deployment.name,
            f"Deployment {name}: every update would reset the scaler's count; allowed: "
            f"ignore_changes=[{keda.REPLICAS_OWNED_BY_SCALER!r}]",
        )


def _authentication(
    resource: PlannedResource,
    namespace: str,
    trigger: Mapping[str, Any],
    authentications: dict[tuple[str, str], PlannedResource],
) -> Iterator[tuple[str, str]]:
    reference = trigger.get("authenticationRef") or {}
    if not reference or reference.get("kind", "TriggerAuthentication") != "TriggerAuthentication":
        return
    if (str(reference.get("name")), namespace) not in authentications:
        yield (
            resource.name,
            f"trigger {trigger.get('type')} authenticates with TriggerAuthentication "
            f"{namespace}/{reference.get('name')}, which this stack does not declare",
        )


def _provider(
    trigger: Mapping[str, Any],
    namespace: str,
    authentications: dict[tuple[str, str], PlannedResource],
) -> str | None:
    reference = trigger.get("authenticationRef") or {}
    authentication = authentications.get((str(reference.get("name")), namespace))
    if authentication is None:
        return None
    identity = (authentication.inputs.get("spec") or {}).get("podIdentity") or {}
    return identity.get("provider")


def _operator_identity(
    resources: list[PlannedResource],
    resource: PlannedResource,
    trigger: Mapping[str, Any],
    authentications: dict[tuple[str, str], PlannedResource],
    installed: _Keda | None,
) -> Iterator[tuple[str, str]]:
    namespace = _name_and_namespace(resource)[1]
    provider = _provider(trigger, namespace, authentications)
    kind = trigger.get("type")
    if provider is None or provider == "none":
        return
    expected = keda.TRIGGER_IDENTITY.get(str(kind))
    if expected == "azure-workload" and provider != expected:
        yield (resource.name, f"the {kind} scaler accepts only the azure-workload pod identity")
    cloud = cloud_of(resources)
    offered = profile(cloud).keda_identity if cloud is not None else None
    if offered is not None and provider != offered:
        yield (
            resource.name,
            f"trigger {kind} uses pod identity {provider!r}, which a {cloud.value.upper()} "
            f"cluster does not offer; allowed: {offered}",
        )
        return
    if installed is None:
        return
    given = _identities_given(installed, resources)
    if given is None:
        return  # neither the chart's values nor its rendered operator are in view
    if provider in given and not given[provider]:
        yield (
            resource.name,
            f"trigger {kind} reads the queue as the KEDA operator ({provider} pod identity), "
            "but the operator was given no such identity: the scaler would fail to "
            "authenticate and the workers would never start",
        )


def _identities_given(installed: _Keda, resources: list[PlannedResource]) -> dict[str, bool] | None:
    """Which pod identities KEDA's operator was given: by the chart's ``podIdentity``
    values, or by what they render on its ServiceAccount (the annotation GKE and IRSA
    read, the label and client id Azure's webhook reads), or, on EKS, a Pod Identity
    association for it."""
    associated = any(
        r.type == POD_IDENTITY_ASSOCIATION
        and r.inputs.get("namespace") == keda.NAMESPACE
        and r.inputs.get("serviceAccount") == keda.OPERATOR_SERVICE_ACCOUNT
        for r in resources
    )
    if installed.values is not None:
        identity = installed.values.get("podIdentity") or {}
        gcp, azure = identity.get("gcp") or {}, identity.get("azureWorkload") or {}
        irsa = (identity.get("aws") or {}).get("irsa") or {}
        return {
            "gcp": bool(gcp.get("enabled") and gcp.get("gcpIAMServiceAccount")),
            "azure-workload": bool(azure.get("enabled") and azure.get("clientId")),
            "aws": bool(irsa.get("enabled")) or associated,
        }
    if installed.operator_account is not None:
        annotations = installed.operator_account.get("annotations") or {}
        return {
            "gcp": "iam.gke.io/gcp-service-account" in annotations,
            "azure-workload": "azure.workload.identity/client-id" in annotations,
            "aws": "eks.amazonaws.com/role-arn" in annotations or associated,
        }
    return None


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "keda-scaling",
        "every ScaledObject has KEDA installed, a declared target without replicas and no "
        "second scaler, a declared TriggerAuthentication, and an identity KEDA was given",
        scaled_objects_scale,
    ),
)
