"""Managed Service for Prometheus's objects (``monitoring.googleapis.com/v1``) checked as its
API server would: the fields spotproof writes, their types, and the CRDs' validation rules.

kubernetes-validate has no GMP CRDs. The fields and rules here are those of the v1 CRDs of
GoogleCloudPlatform/prometheus-engine v0.17.2 (7920a2a, ``charts/operator/crds``) for
``PodMonitoring``, ``ClusterPodMonitoring`` and ``ClusterRules``: ``additionalProperties:
false`` stands for the API server's pruning of unknown fields, which would drop them
silently; the ``x-kubernetes-validations`` rules on what spotproof writes are restated in
:func:`_cel_errors`. jsonschema comes with kubernetes-validate, which validates with it.

One rule is spotproof's own, not the API server's: a scrape states
``targetLabels.metadata``. Without it, the series' ``pod`` label (every rule groups by it)
hangs on defaulting that changed across GMP versions. GMP adds no metadata label when
``metadata`` is null (``pkg/operator/apis/monitoring/v1/pod_config.go``); the v0.17.2 CRD
defaults ``metadata`` inside ``targetLabels`` only, and the API server defaults a field
only within an object the request has (Kubernetes' structural defaulting,
apiextensions-apiserver ``pkg/apiserver/schema/defaulting/algorithm.go`` ``Default``;
https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#defaulting),
so a scrape without ``targetLabels`` gets none; and v0.16.0-rc.0 to rc.2 defaulted
``targetLabels`` as a whole, so ``fromPod`` alone dropped them. :func:`series_labels`
says which labels a scrape gives its series.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema

from spotproof.observability.model import duration_seconds

API_VERSION = "monitoring.googleapis.com/v1"
_DURATION_TEXT = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
_DURATION = {"type": "string", "pattern": _DURATION_TEXT}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": _STRINGS,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
_POD_LABELS = ("container", "node", "pod", "top_level_controller_name", "top_level_controller_type")
PROTECTED_LABELS = frozenset(
    {"project_id", "location", "cluster", "namespace", "job", "instance"}
    | {"top_level_controller", "top_level_controller_type", "__address__"}
)


DEFAULT_METADATA = {
    "PodMonitoring": ("container", "pod", "top_level_controller_name", "top_level_controller_type"),
    "ClusterPodMonitoring": (
        "container",
        "namespace",
        "pod",
        "top_level_controller_name",
        "top_level_controller_type",
    ),
}
"""The CRDs' ``targetLabels.metadata`` default (``+kubebuilder:default`` in ``pod_types.go``)."""
FORCED_LABELS = frozenset({"project_id", "location", "cluster", "job", "instance"})
"""What every scraped series carries whatever the scrape says: ``ScrapeConfigs`` in
``pod_config.go`` forces the first three, sets ``job`` to the scrape's name and ``instance``
to the pod and port (``pod_types.go``: "always set")."""


def _monitoring_spec(metadata: tuple[str, ...]) -> dict[str, Any]:
    endpoint = {
        "type": "object",
        "additionalProperties": False,
        "required": ["port", "interval"],
        "properties": {
            "port": {
                "anyOf": [
                    {"type": "integer", "minimum": 1},
                    {"type": "string", "minLength": 1, "maxLength": 253},
                ]
            },
            "path": {"type": "string"},
            "scheme": {"enum": ["http", "https"]},
            "interval": _DURATION,
            "timeout": _DURATION,
        },
    }
    from_pod = {
        "type": "object",
        "additionalProperties": False,
        "required": ["from"],
        "properties": {
            "from": {"type": "string"},
            "to": {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["selector", "endpoints"],
        "properties": {
            "selector": _SELECTOR,
            "endpoints": {"type": "array", "minItems": 1, "maxItems": 10, "items": endpoint},
            "filterRunning": {"type": "boolean"},
            "targetLabels": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "fromPod": {"type": "array", "maxItems": 100, "items": from_pod},
                    "metadata": {
                        "type": "array",
                        "uniqueItems": True,
                        "items": {"enum": list(metadata)},
                    },
                },
            },
        },
    }


_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    "properties": {
        "record": {"type": "string", "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
        "alert": {"type": "string"},
        "expr": {"type": "string"},
        "for": _DURATION,
        "labels": _STRINGS,
        "annotations": _STRINGS,
    },
}
_RULES_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["groups"],
    "properties": {
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "rules"],
                "properties": {
                    "name": {"type": "string"},
                    "interval": _DURATION,
                    "rules": {"type": "array", "minItems": 1, "items": _RULE},
                },
            },
        }
    },
}
SPECS: dict[str, dict[str, Any]] = {
    "PodMonitoring": _monitoring_spec(_POD_LABELS),
    "ClusterPodMonitoring": _monitoring_spec(("namespace", *_POD_LABELS)),
    "ClusterRules": _RULES_SPEC,
}
"""The ``spec`` schema of each kind spotproof writes."""


def is_gmp(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == API_VERSION


def errors(obj: Mapping[str, Any]) -> list[str]:
    """``path: message`` for each way the API server would refuse or prune ``obj``."""
    kind = str(obj.get("kind"))
    schema = SPECS.get(kind)
    if schema is None:
        return [f"kind: {kind} is not a kind spotproof checks; allowed: {', '.join(SPECS)}"]
    spec = obj.get("spec") or {}
    found = [
        f"spec.{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in jsonschema.Draft7Validator(schema).iter_errors(spec)
    ]
    return found or list(_cel_errors(spec)) or list(_unstated_metadata(kind, spec))


def series_labels(obj: Mapping[str, Any]) -> frozenset[str]:
    """The labels GMP gives every series a ``PodMonitoring`` or ``ClusterPodMonitoring``
    scrapes, ``targetLabels`` as the API server stores it (defaulted where it applies)."""
    kind, spec = obj["kind"], obj.get("spec") or {}
    target = spec.get("targetLabels")
    metadata = None if target is None else target.get("metadata", DEFAULT_METADATA[kind])
    if metadata is None:  # pod_config.go: nothing, or a ClusterPodMonitoring's namespace
        metadata = ("namespace",) if kind == "ClusterPodMonitoring" else ()
    mapped = {m.get("to", m["from"]) for m in (target or {}).get("fromPod", [])}
    always = {"namespace"} if kind == "PodMonitoring" else set()
    return FORCED_LABELS | set(metadata) | mapped | always


def _unstated_metadata(kind: str, spec: Mapping[str, Any]) -> Iterator[str]:
    """spotproof's own rule (see the module): a scrape states its metadata labels."""
    if kind in DEFAULT_METADATA and "metadata" not in spec.get("targetLabels", {}):
        yield (
            "spec.targetLabels.metadata: not stated, so whether the series carry pod, "
            "container and node depends on the GMP version's defaulting; list them"
        )


def _longer(timeout: str, interval: str) -> bool:
    """Whether the timeout outlasts the interval; False where either is no duration (the
    schema's pattern reports that)."""
    try:
        return duration_seconds(timeout) > duration_seconds(interval)
    except ValueError:
        return False


def _cel_errors(spec: Mapping[str, Any]) -> Iterator[str]:
    """The CRDs' ``x-kubernetes-validations`` on what spotproof writes: a port is not 0, a
    timeout is no longer than its interval; a rule is a record or an alert, and only an
    alert has annotations; no target label overwrites a protected one."""
    for mapping in spec.get("targetLabels", {}).get("fromPod", []):
        if mapping.get("to", mapping["from"]) in PROTECTED_LABELS:
            yield f"spec.targetLabels.fromPod: cannot relabel onto protected label {mapping}"
    for endpoint in spec.get("endpoints", []):
        if endpoint.get("port") == 0:
            yield "spec.endpoints: Port is required"
        if "timeout" in endpoint and _longer(endpoint["timeout"], endpoint.get("interval", "")):
            yield "spec.endpoints: scrape timeout must not be greater than scrape interval"
    for group in spec.get("groups", []):
        for rule in group["rules"]:
            if ("record" in rule) == ("alert" in rule):
                yield f"spec.groups[{group['name']}]: Must set exactly one of Record or Alert"
            if "annotations" in rule and "alert" not in rule:
                yield (
                    f"spec.groups[{group['name']}]: Annotations are only allowed for alerting rules"
                )
