"""The Azure Monitor metrics add-on's ``PodMonitor`` checked as its API server would.

kubernetes-validate has no schema for it. The fields and types are those of the add-on's
CRD, ``podmonitors.azmonitoring.coreos.com`` (Azure/prometheus-collector@39583fd,
``otelcollector/deploy/addon-chart/azure-monitor-metrics-addon/templates/
ama-metrics-podmonitor-crd.yaml``): prometheus-operator's PodMonitor in the add-on's own
group, ``spec.selector`` required, durations matching the CRD's pattern, and each
endpoint's ``relabelings`` with the CRD's fields, actions and source-label pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.plan.schemas.jobset import unknown_fields

API_VERSION = "azmonitoring.coreos.com/v1"
SPEC_FIELDS = frozenset(
    {
        "attachMetadata", "bodySizeLimit", "convertClassicHistogramsToNHCB",
        "fallbackScrapeProtocol", "jobLabel", "keepDroppedTargets", "labelLimit",
        "labelNameLengthLimit", "labelValueLengthLimit", "namespaceSelector",
        "nativeHistogramBucketLimit", "nativeHistogramMinBucketFactor", "podMetricsEndpoints",
        "podTargetLabels", "sampleLimit", "scrapeClass", "scrapeClassicHistograms",
        "scrapeProtocols", "selector", "selectorMechanism", "targetLimit",
    }
)  # fmt: skip
ENDPOINT_FIELDS = frozenset(
    {
        "authorization", "basicAuth", "bearerTokenSecret", "enableHttp2", "filterRunning",
        "followRedirects", "honorLabels", "honorTimestamps", "interval", "metricRelabelings",
        "noProxy", "oauth2", "params", "path", "port", "portNumber", "proxyConnectHeader",
        "proxyFromEnvironment", "proxyUrl", "relabelings", "scheme", "scrapeTimeout",
        "targetPort", "tlsConfig", "trackTimestampsStaleness",
    }
)  # fmt: skip
NAMESPACE_SELECTOR_FIELDS = frozenset({"any", "matchNames"})
SELECTOR_FIELDS = frozenset({"matchExpressions", "matchLabels"})
RELABEL_FIELDS = frozenset(
    {"action", "modulus", "regex", "replacement", "separator", "sourceLabels", "targetLabel"}
)
RELABEL_ACTIONS = frozenset(
    {
        "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod",
        "labelmap", "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep",
        "lowercase", "Lowercase", "uppercase", "Uppercase", "keepequal", "KeepEqual",
        "dropequal", "DropEqual",
    }
)  # fmt: skip
"""The CRD's enum for ``action``, which defaults to ``replace``."""
SOURCE_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""The CRD's pattern for each of a relabeling's ``sourceLabels``."""
INTEGERS = ("labelLimit", "labelNameLengthLimit", "labelValueLengthLimit", "sampleLimit")
DURATION = re.compile(r"0|(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")
"""The CRD's pattern for ``interval`` and ``scrapeTimeout``."""


def is_pod_monitor(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == API_VERSION


def errors(obj: Mapping[str, Any]) -> list[str]:
    if obj.get("kind") != "PodMonitor":
        return [f"kind {obj.get('kind')!r}: allowed in {API_VERSION}: PodMonitor"]
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return ["spec is required"]
    return list(_spec(spec))


def _spec(spec: Mapping[str, Any]) -> Iterator[str]:
    yield from unknown_fields("spec", spec, SPEC_FIELDS)
    if "selector" not in spec:
        yield "spec.selector: required"
    else:
        yield from unknown_fields("spec.selector", spec["selector"], SELECTOR_FIELDS)
    selector = spec.get("namespaceSelector", {})
    yield from unknown_fields("spec.namespaceSelector", selector, NAMESPACE_SELECTOR_FIELDS)
    if isinstance(selector, Mapping):
        names = selector.get("matchNames", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            yield "spec.namespaceSelector.matchNames: expected a list of strings"
        if not isinstance(selector.get("any", False), bool):
            yield "spec.namespaceSelector.any: expected a boolean"
    for key in INTEGERS:
        if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], int)):
            yield f"spec.{key}: expected an integer"
    if not _strings(spec.get("podTargetLabels", [])):
        yield "spec.podTargetLabels: expected a list of strings"
    endpoints = spec.get("podMetricsEndpoints", [])
    if not isinstance(endpoints, list):
        yield "spec.podMetricsEndpoints: expected a list"
        return
    for index, endpoint in enumerate(endpoints):
        path = f"spec.podMetricsEndpoints[{index}]"
        yield from unknown_fields(path, endpoint, ENDPOINT_FIELDS)
        if not isinstance(endpoint, Mapping):
            continue
        for key in ("port", "path", "scheme"):
            if key in endpoint and not isinstance(endpoint[key], str):
                yield f"{path}.{key}: expected a string"
        for key in ("interval", "scrapeTimeout"):
            value = endpoint.get(key)
            if value is not None and not (isinstance(value, str) and DURATION.fullmatch(value)):
                yield f"{path}.{key}: {value!r} is not a duration (e.g. 30s, 1m)"
        yield from _relabelings(f"{path}.relabelings", endpoint.get("relabelings", []))


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _relabelings(path: str, relabelings: Any) -> Iterator[str]:
    if not isinstance(relabelings, list):
        yield f"{path}: expected a list"
        return
    for index, relabeling in enumerate(relabelings):
        at = f"{path}[{index}]"
        yield from unknown_fields(at, relabeling, RELABEL_FIELDS)
        if not isinstance(relabeling, Mapping):
            continue
        sources = relabeling.get("sourceLabels", [])
        if not _strings(sources) or not all(SOURCE_LABEL.fullmatch(s) for s in sources):
            yield f"{at}.sourceLabels: expected label names ([a-zA-Z_][a-zA-Z0-9_]*)"
        action = relabeling.get("action", "replace")
        if not isinstance(action, str) or action not in RELABEL_ACTIONS:
            yield f"{at}.action: {action!r}; allowed: {', '.join(sorted(RELABEL_ACTIONS))}"
        for key in ("regex", "replacement", "separator", "targetLabel"):
            if key in relabeling and not isinstance(relabeling[key], str):
                yield f"{at}.{key}: expected a string"
