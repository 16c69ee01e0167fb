"""The Kubernetes objects a plan declares: extracted, written as YAML, schema-checked."""

from __future__ import annotations

import copy
import functools
import importlib.resources
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from spotproof.plan.recording.recorder import Recording, Resource, reveal
from spotproof.plan.schemas import (
    ama_metrics,
    api_server,
    compute_class,
    gmp,
    jobset,
    karpenter,
    keda,
    kueue,
)
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


def schema_violation(resource: str, obj: dict[str, Any], error: str) -> Violation:
    """A schema finding about ``obj``: ``error`` as every validator here words one,
    ``path: what`` (``spec.template.spec.containers.0: 'imagePullPolicyy' was
    unexpected``), about the key at that path, or the unexpected key it names."""
    return Violation(SCHEMA_POLICY, resource, f"{describe(obj)}: {error}", _error_key_path(error))


_UNEXPECTED = re.compile(r"'([^']+)' was unexpected")
"""How the schema validator names a key the schema does not have."""
_INDEX = re.compile(r"\.(\d+)(?=\.|$)")
"""A list index as a schema path writes it (``containers.0``)."""


def _error_key_path(error: str) -> str | None:
    """The key path ``error`` names (``containers[0].imagePullPolicyy``); None where it
    names none, or the object's root (``(root)``)."""
    path, separator, what = error.partition(": ")
    if not separator:
        return None
    unexpected = _UNEXPECTED.search(what)
    path = f"{path}.{unexpected.group(1)}" if unexpected else path
    path = path.removeprefix("(root).")
    return None if path == "(root)" else _INDEX.sub(r"[\1]", path)


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
    JobSets against the JobSet API's fields and webhook (``plan.schemas.jobset``), Kueue's,
    KEDA's, GKE's ComputeClass and Managed Service for Prometheus objects and the Azure
    Monitor metrics add-on's PodMonitor against their APIs' fields (``plan.schemas.kueue``,
    ``plan.schemas.keda``, ``plan.schemas.compute_class``, ``plan.schemas.gmp``,
    ``plan.schemas.ama_metrics``).
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
            if jobset.is_jobset(obj):
                errors = jobset.errors(obj, lambda job: schema_errors(job, kubernetes_version))
            elif kueue.is_kueue(obj):
                errors = kueue.errors(obj)
            elif keda.is_keda(obj):
                errors = keda.errors(obj)
            elif compute_class.is_compute_class(obj):
                errors = compute_class.errors(obj)
            elif gmp.is_gmp(obj):
                errors = gmp.errors(obj)
            elif ama_metrics.is_pod_monitor(obj):
                errors = ama_metrics.errors(obj)
            else:
                errors = schema_errors(obj, kubernetes_version)
            errors += api_server.errors(obj) if not errors else []
            violations += [schema_violation(resource.name, obj, error) for error in errors]
        except kubernetes_validate.SchemaNotFoundError:
            violations.append(
                Violation(
                    SCHEMA_POLICY,
                    resource.name,
                    f"{describe(obj)}: no schema for kind {obj.get('kind')} of apiVersion "
                    f"{obj.get('apiVersion')} in Kubernetes {kubernetes_version}",
                )
            )
    return violations, skipped


def schema_errors(obj: dict[str, Any], kubernetes_version: str) -> list[str]:
    """A core object's errors against the OpenAPI schema of ``kubernetes_version``, each
    ``path: message``, in path order (at most :data:`MAX_SCHEMA_ERRORS`);
    ``SchemaNotFoundError`` for a kind that version does not have."""
    validator = _validator(str(obj["apiVersion"]), str(obj["kind"]), kubernetes_version)
    return [
        f"{'.'.join(str(p) for p in path) or '(root)'}: {message}"
        for path, message in _errors(validator, obj)[:MAX_SCHEMA_ERRORS]
    ]


MAX_SCHEMA_ERRORS = 20
"""Per object: enough to fix a file in one pass, bounded for a file that is all wrong."""


def schema_error_paths(
    obj: dict[str, Any], kubernetes_version: str
) -> list[tuple[tuple[str | int, ...], str]]:
    """Each schema error of a core object as (path, message), in path order; empty when
    the object is valid or its kind has no schema here."""
    try:
        validator = _validator(str(obj["apiVersion"]), str(obj["kind"]), kubernetes_version)
    except (kubernetes_validate.SchemaNotFoundError, KeyError):
        return []
    return _errors(validator, obj)


def _errors(validator: Any, obj: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    errors = [(tuple(error.path), error.message) for error in validator.iter_errors(obj)]
    return sorted(errors, key=lambda pair: [str(p) for p in pair[0]])


def is_core_kind(kind: object, kubernetes_version: str) -> bool:
    """Whether Kubernetes itself serves ``kind`` (in some API version): else it is a
    custom resource (a ``ServiceMonitor``, say) whose schema only its CRD holds."""
    return str(kind).lower() in _core_kinds(kubernetes_version)


@functools.cache
def _core_kinds(kubernetes_version: str) -> frozenset[str]:
    folder = importlib.resources.files("kubernetes_validate").joinpath(
        _schema_folder(kubernetes_version)
    )
    return frozenset(entry.name.split("-", 1)[0] for entry in folder.iterdir())


def _deepest_last(path: tuple[str | int, ...]) -> tuple[int, list[str]]:
    return len(path), [f"{step:012d}" if isinstance(step, int) else step for step in path]


def without_errors(
    obj: dict[str, Any],
    kubernetes_version: str,
    errors: list[tuple[tuple[str | int, ...], str]] | None = None,
) -> dict[str, Any] | None:
    """``obj`` with every field the schema refuses taken out, when what is left is valid:
    the rest of the object can then be judged by the other checks. None when nothing
    valid is left (a required field was the wrong one, or the kind has no schema).
    ``errors``: :func:`schema_error_paths` of ``obj``, where the caller has them."""
    if errors is None:
        errors = schema_error_paths(obj, kubernetes_version)
    paths = [path for path, _ in errors]
    if not paths or () in paths:
        return None
    pruned = copy.deepcopy(obj)
    # Deepest and last first, so that removing a list item never shifts one still to go.
    for path in sorted(set(paths), key=_deepest_last, reverse=True):
        parent: Any = pruned
        try:
            for step in path[:-1]:
                parent = parent[step]
            del parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue  # an ancestor already went
    return pruned if not schema_error_paths(pruned, kubernetes_version) else None


@functools.cache
def _validator(api_version: str, kind: str, kubernetes_version: str) -> Any:
    """The strict validator ``kubernetes_validate.validate`` builds for this kind, from the
    same schema files (its ``utils`` module, 1.33 to 1.37), built once per kind: the
    library reads and parses both files, the definitions' megabytes included, on every
    call. ``SchemaNotFoundError`` for a kind the version does not serve."""
    utils = kubernetes_validate.utils
    folder = _schema_folder(kubernetes_version)
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = utils.schema_contents(f"{folder}/{kind.lower()}-{group}.json", kubernetes_version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            version=utils.major_minor(kubernetes_version), kind=kind, api_version=api_version
        ) from None
    registry = _definitions(folder, kubernetes_version) @ (
        utils.Resource.from_contents(schema) @ utils.Registry()
    )
    return utils.jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _schema_folder(kubernetes_version: str) -> str:
    """The library's strict schemas of the newest version not newer than the cluster's."""
    utils = kubernetes_validate.utils
    wanted = utils.major_minor(kubernetes_version)
    if wanted > utils.latest_version():
        raise utils.VersionNotSupportedError(version=wanted)
    version = [v for v in utils.all_versions() if utils.major_minor(v) <= wanted][-1]
    return f"kubernetes-json-schema/v{version}-local-strict"


@functools.cache
def _definitions(folder: str, kubernetes_version: str) -> Any:
    utils = kubernetes_validate.utils
    return utils.Resource.from_contents(
        utils.schema_contents(f"{folder}/_definitions.json", kubernetes_version)
    )


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
        schema_violation(resource.name, obj, error)
        for (resource, obj), errors in zip(pairs, schema, strict=True)
        for error in [*errors, *karpenter.cel_errors(obj)]
    ]
    return violations, skipped
