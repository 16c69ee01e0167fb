"""The Kubernetes objects a plan declares: extracted, written as YAML, schema-checked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from spotproof.plan.recorder import Recording, Resource
from spotproof.policy import Violation

SCHEMA_POLICY = "kubernetes-schema"


def manifest(resource: Resource) -> dict[str, Any]:
    """The object as ``kubectl apply`` would receive it, top-level keys in the usual order."""
    inputs = dict(resource.inputs)
    ordered = {key: inputs.pop(key) for key in ("apiVersion", "kind", "metadata") if key in inputs}
    return {**ordered, **inputs}


def describe(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{obj.get('kind')}/{namespace}{metadata.get('name')}"


def write(recording: Recording, out_dir: Path) -> list[Path]:
    """One YAML file per object, numbered in registration order (dependencies first)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, resource in enumerate(recording.kubernetes_objects(), start=1):
        obj = manifest(resource)
        metadata = obj.get("metadata") or {}
        parts = [obj.get("kind", "object"), metadata.get("namespace"), metadata.get("name")]
        slug = re.sub(r"[^a-z0-9.-]+", "-", "-".join(p for p in parts if p).lower())
        path = out_dir / f"{index:02d}-{slug}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
    return written


def validate(recording: Recording, kubernetes_version: str) -> list[Violation]:
    """Strict OpenAPI validation of every object for the cluster's Kubernetes version:
    unknown fields, wrong types and missing required fields are all violations."""
    violations = []
    for resource in recording.kubernetes_objects():
        obj = manifest(resource)
        try:
            kubernetes_validate.validate(obj, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path) or "(root)"
            violations.append(
                Violation(SCHEMA_POLICY, resource.name, f"{describe(obj)}: {path}: {error.message}")
            )
        except kubernetes_validate.SchemaNotFoundError:
            violations.append(
                Violation(
                    SCHEMA_POLICY,
                    resource.name,
                    f"{describe(obj)}: no schema for {obj.get('apiVersion')} in Kubernetes "
                    f"{kubernetes_version}",
                )
            )
    return violations
