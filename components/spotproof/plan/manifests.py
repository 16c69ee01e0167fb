"""The Kubernetes objects a plan declares: extracted, written as YAML, schema-checked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from spotproof import podtemplates, quantity
from spotproof.plan import jobsets, karpenter, keda_objects, kueue_objects
from spotproof.plan.recorder import Recording, Resource, reveal
from spotproof.policy import Violation

SCHEMA_POLICY = "kubernetes-schema"


# Keys that read best first; the rest follow alphabetically. The engine's wire format
# does not keep the order a program wrote them in, so a stable order is imposed here.
_LEADING_KEYS = ("apiVersion", "kind", "metadata", "name", "namespace", "key", "type", "spec")


def _ordered(value: Any) -> Any:
    if isinstance(value, dict):
        rank = {key: index for index, key in enumerate(_LEADING_KEYS)}
        keys = sorted(value, key=lambda k: (rank.get(k, len(rank)), k))
        return {key: _ordered(value[key]) for key in keys}
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


def manifest(resource: Resource) -> dict[str, Any]:
    """The object as ``kubectl apply`` would receive it."""
    return _ordered(reveal(resource.inputs))


def describe(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    namespace = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{obj.get('kind')}/{namespace}{metadata.get('name')}"


# The order ``kubectl apply -f DIR`` should see them in: what others refer to comes first.
_INSTALL_ORDER = (
    "Namespace",
    "CustomResourceDefinition",
    "PriorityClass",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Secret",
    "ConfigMap",
    "PodDisruptionBudget",
    "Service",
    "DaemonSet",
    "Deployment",
    "StatefulSet",
    "EC2NodeClass",
    "NodePool",
    "Job",
    "CronJob",
    "JobSet",
)


def ordered_objects(recording: Recording) -> list[dict[str, Any]]:
    """Every Kubernetes object, in install order, then by namespace and name."""

    def key(obj: dict[str, Any]) -> tuple[int, str, str]:
        kind = str(obj.get("kind"))
        rank = _INSTALL_ORDER.index(kind) if kind in _INSTALL_ORDER else len(_INSTALL_ORDER)
        metadata = obj.get("metadata") or {}
        return rank, str(metadata.get("namespace", "")), str(metadata.get("name", ""))

    return sorted((manifest(r) for r in recording.kubernetes_objects()), key=key)


def write(recording: Recording, out_dir: Path) -> list[Path]:
    """One YAML file per object, numbered in install order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, obj in enumerate(ordered_objects(recording), start=1):
        metadata = obj.get("metadata") or {}
        parts = [obj.get("kind", "object"), metadata.get("namespace"), metadata.get("name")]
        slug = re.sub(r"[^a-z0-9.-]+", "-", "-".join(p for p in parts if p).lower())
        path = out_dir / f"{index:02d}-{slug}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
    return written


def validate(recording: Recording, kubernetes_version: str) -> tuple[list[Violation], list[str]]:
    """Strict validation of every object: core objects against the OpenAPI schema of the
    cluster's Kubernetes version, Karpenter's against Karpenter's published schemas,
    JobSets against the JobSet API's fields and webhook (``plan.jobsets``), Kueue's and
    KEDA's objects against their APIs' fields (``plan.kueue_objects``,
    ``plan.keda_objects``).
    Unknown fields, wrong types and missing required fields are all violations.

    Returns the violations and the checks skipped, with why (Karpenter's schemas need
    Node.js)."""
    resources = recording.kubernetes_objects()
    objects = [manifest(resource) for resource in resources]
    violations, skipped = _validate_karpenter(
        [(r, o) for r, o in zip(resources, objects, strict=True) if karpenter.is_karpenter(o)]
    )
    for resource, obj in zip(resources, objects, strict=True):
        if karpenter.is_karpenter(obj):
            continue
        try:
            if jobsets.is_jobset(obj):
                errors = jobsets.errors(obj, lambda job: schema_errors(job, kubernetes_version))
            elif kueue_objects.is_kueue(obj):
                errors = kueue_objects.errors(obj)
            elif keda_objects.is_keda(obj):
                errors = keda_objects.errors(obj)
            else:
                errors = schema_errors(obj, kubernetes_version)
            errors += quantity_errors(obj) if not errors else []
            violations += [
                Violation(SCHEMA_POLICY, resource.name, f"{describe(obj)}: {error}")
                for error in errors
            ]
        except kubernetes_validate.SchemaNotFoundError:
            violations.append(
                Violation(
                    SCHEMA_POLICY,
                    resource.name,
                    f"{describe(obj)}: no schema for {obj.get('apiVersion')} in Kubernetes "
                    f"{kubernetes_version}",
                )
            )
    return violations, skipped


def quantity_errors(obj: dict[str, Any]) -> list[str]:
    """Resource requests and limits that are no Kubernetes quantity: the OpenAPI schema
    types them int-or-string, and the API server parses the string."""
    found = []
    for template in podtemplates.pod_templates(obj):
        part = f"{template.part}: " if template.part else ""
        for group in ("initContainers", "containers"):
            for index, container in enumerate(template.spec.get(group) or []):
                resources = container.get("resources") or {}
                for kind in ("requests", "limits"):
                    for name, value in (resources.get(kind) or {}).items():
                        try:
                            quantity.parse(value)
                        except ValueError as error:
                            found.append(f"{part}{group}[{index}].resources.{kind}.{name}: {error}")
    return found


def schema_errors(obj: dict[str, Any], kubernetes_version: str) -> list[str]:
    """A core object's errors against the OpenAPI schema of ``kubernetes_version``, each
    ``path: message``; ``SchemaNotFoundError`` for a kind that version does not have."""
    try:
        kubernetes_validate.validate(obj, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(str(p) for p in error.path) or '(root)'}: {error.message}"]
    return []


def _validate_karpenter(
    pairs: list[tuple[Resource, dict[str, Any]]],
) -> tuple[list[Violation], list[str]]:
    if not pairs:
        return [], []
    skipped = []
    try:
        schemas = karpenter.find_schemas(Path.cwd(), Path(__file__).resolve().parent)
        schema = karpenter.schema_errors([obj for _, obj in pairs], schemas)
    except karpenter.SchemaUnavailable as reason:
        schema = [[] for _ in pairs]
        skipped.append(f"Karpenter schema check ({len(pairs)} objects): {reason}")
    violations = [
        Violation(SCHEMA_POLICY, resource.name, f"{describe(obj)}: {error}")
        for (resource, obj), errors in zip(pairs, schema, strict=True)
        for error in [*errors, *karpenter.cel_errors(obj)]
    ]
    return violations, skipped
