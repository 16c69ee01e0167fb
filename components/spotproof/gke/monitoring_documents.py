"""What ``spotproof:gke:Monitoring`` hands Managed Service for Prometheus (GMP) and Cloud
Monitoring, as plain data: the scrapes, the recording rules, the NetworkPolicy that lets
GMP's collector in, and one alert policy per alerting rule. Tests read them directly.

Facts they rely on, each from what it names (GMP at GoogleCloudPlatform/prometheus-engine
v0.17.2, 7920a2a: ``doc/api.md``, the CRDs under ``charts/operator/crds``,
``pkg/operator/apis/monitoring/v1/pod_config.go``, ``charts/operator/templates/collector.yaml``):

- ``PodMonitoring`` scrapes pods "within the PodMonitoring's namespace"; its endpoint's
  ``port`` is a name or a number ("the container metadata label is only populated if the
  port is referenced by name"), ``interval`` is required, ``path`` defaults to
  ``/metrics``. spotproof's pods are in a few known namespaces: one PodMonitoring each,
  so nothing outside them is scraped (and billed).
- Rule scopes (``doc/api.md``; https://cloud.google.com/stackdriver/docs/managed-prometheus/rules-managed):
  ``Rules`` see "only metric data from this namespace"; ``ClusterRules`` see the whole
  cluster and keep its ``project_id`` and ``cluster`` labels. The Pending rules join
  kube-state-metrics' series (scraped in its own namespace) with the workloads' own, in
  other namespaces: ``ClusterRules``, which also keeps two stacks in one project apart. A
  group needs at least one rule (the CRD's ``rules`` has ``minItems: 1``).
- A ``PodMonitoring`` always sets ``namespace`` to the scraped pod's (``pod_config.go``),
  pushing kube-state-metrics' own ``namespace`` label aside, and the joins need it: its
  scrape is a ``ClusterPodMonitoring`` with ``targetLabels.metadata: []`` (one sets only
  what ``metadata`` lists). The workloads' series get the pod's target class as
  ``target_class`` (``targetLabels.fromPod``), as the EKS scrape does.
- The workloads' ``pod`` label, which every rule groups by, is one of
  ``targetLabels.metadata``, and GMP adds none when ``metadata`` is absent
  (``pod_config.go``: "won't add any labels in that case"). At v0.17.2 the CRD defaults
  ``metadata`` itself, so the API server fills it in wherever ``targetLabels`` is written
  (``e2e/crd_validation_test.go``, ``TargetLabels/nondefault``); from v0.16.0-rc.0 to
  rc.2 the default sat on ``targetLabels`` as a whole (commit 1b9da44), and a
  ``targetLabels`` with ``fromPod`` alone kept no ``pod`` (fixed by 8bd22c6, "default
  podmonitorings correctly"). :data:`WORKLOAD_METADATA` is written out, so the labels do
  not depend on which defaulting the cluster's GMP does.
- GMP's collector is the ``DaemonSet`` ``collector`` in ``gmp-system``, pods labelled
  ``app.kubernetes.io/name: collector``, without ``hostNetwork`` (``collector.yaml``), so a
  NetworkPolicy peer selects it. spotproof's workload namespaces deny all ingress but
  their own pods' (``kube.network_policy.isolate_namespace``); policies add up
  (https://kubernetes.io/docs/concepts/services-networking/network-policies/), so one more
  in each admits the collector to the ``metrics`` port, a named port of the target pods.
- A Cloud Monitoring alert policy with a PromQL condition (pulumi-gcp
  ``monitoring.AlertPolicy``, ``condition_prometheus_query_language``): the
  ``evaluation_interval`` "must be a positive multiple of 30 seconds", taken "from the
  enclosing rule group"; ``duration`` is the rule's ``for``. A policy lives in the project
  and its query reads every cluster there, so :func:`policy_query` narrows it to the
  stack's cluster (``promql.in_cluster``): GMP gives every series it scrapes the
  ``cluster`` label, the name the operator reads from the node's ``cluster-name``
  metadata, the GKE cluster's (``cmd/operator/main.go``; ``pod_config.go``
  ``ScrapeConfigs`` forces it), and ``ClusterRules`` set it on what they record
  (``rules_config.go``). Those recording rules need no narrowing of their own: GMP adds
  the cluster's matcher to every selector of a ``ClusterRules`` (``rules_config.go``,
  ``scope``). Pub/Sub's metric is Cloud Monitoring's, without a cluster: its rule names
  the stack's subscription instead (``observability.queues``).
- Cloud Monitoring checks that the metrics a PromQL condition names exist when the policy
  is created, unless the condition sets ``disableMetricValidation``: "whether to disable
  metric existence validation for this condition", which lets a policy be "defined on
  metrics that do not yet exist" (``AlertPolicy.Condition.PrometheusQueryLanguageCondition``,
  Cloud Monitoring API v3; in pulumi-gcp 10.2.0 the field ``disable_metric_validation``
  of ``monitoring.AlertPolicyConditionConditionPrometheusQueryLanguageArgs``, added by
  GoogleCloudPlatform/magic-modules#12438 for hashicorp/terraform-provider-google#20491,
  which asked for it because such a policy would not create). spotproof's metrics
  exist only once its trainers, workers and kube-state-metrics have been scraped, after the
  policies are created: every condition sets it.
- Its ``documentation`` is not a Prometheus template: Cloud Monitoring fills in
  ``${...}`` variables (https://cloud.google.com/monitoring/alerts/doc-variables) and sends
  ``{{ ... }}`` as written. Google's own ``gcloud monitoring policies migrate`` translates a
  rule's annotations as :func:`document_variables` does (``{{ $labels.x }}`` to
  ``${metric_or_resource.label.x}``, as a PromQL label may be a metric's or a monitored
  resource's; ``{{ $value }}`` to ``${metric.label.value}``): ``TranslatePromQLTemplate
  ToDocumentVariables`` in google-cloud-sdk-unofficial/google-cloud-sdk@01f043c,
  ``lib/googlecloudsdk/command_lib/monitoring/util.py``. Formatting functions have no
  equivalent: the value is shown raw, with its unit where the template implied one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pulumi

from spotproof.fleet.errors import SpecError
from spotproof.kube import kube_state_metrics as ksm
from spotproof.kube.baseline import MANAGED_BY
from spotproof.observability.model import Rule, RuleGroup, duration_seconds, rule_file
from spotproof.observability.promql import in_cluster
from spotproof.observability.queues import PUBSUB_OLDEST_UNACKED
from spotproof.runtime.metrics.names import METRICS_PATH, PORT_NAME
from spotproof.scheduling import TARGET_CLASS_LABEL

GMP_API_VERSION = "monitoring.googleapis.com/v1"
TARGET_CLASS = "target_class"
"""The label the workloads' series carry their pod's ``TARGET_CLASS_LABEL`` in (EKS's too)."""
WORKLOAD_METADATA = (
    "container",
    "node",
    "pod",
    "top_level_controller_name",
    "top_level_controller_type",
)
"""The pod's labels each workload series carries (``targetLabels.metadata``): GMP's default
set, ``pod`` among them, which every rule groups by, and ``node``, which says where a
reclaimed pod ran (one value per pod: no more series)."""
PROJECT_WIDE = frozenset({PUBSUB_OLDEST_UNACKED})
"""Metrics the alert policies read that carry no ``cluster`` label: Cloud Monitoring's own."""
WORKLOAD_MONITORING = "spotproof-workloads"
"""Name of each namespace's PodMonitoring, hence the ``job`` label of its series."""
COLLECTOR_NAMESPACE = "gmp-system"
COLLECTOR_LABELS = {"app.kubernetes.io/name": "collector"}
SCRAPE_POLICY = "allow-metrics-scrape"

SEVERITIES = {"critical": "CRITICAL", "error": "ERROR", "warning": "WARNING"}
"""A rule's ``severity`` label as the alert policy's ``severity`` (the values it takes)."""

_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_LABEL = re.compile(r"\s*(?:humanize\s+)?\$labels(?:\.([a-zA-Z_][a-zA-Z0-9_]*))?\s*")
_VALUE = re.compile(
    r'\s*(?:humanize\s+)?\$value\s*(?:\|\s*(humanizeDuration|humanize|printf\s+"[^"]*")\s*)?'
)
_VALUE_UNITS = {"humanizeDuration": " s"}
"""What a formatting function implied of the raw value: ``humanizeDuration`` reads seconds."""


def seconds(duration: str) -> int:
    """A Prometheus duration (``1h30m``) in whole seconds: what Cloud Monitoring's
    ``duration`` and ``evaluation_interval`` take."""
    value = duration_seconds(duration)
    if value != int(value):
        raise ValueError(f"{duration!r} is not a Prometheus duration in whole seconds")
    return int(value)


def pod_monitoring(namespace: str, interval_seconds: int) -> dict[str, Any]:
    """The PodMonitoring of one workload namespace: every spotproof pod's ``metrics`` port."""
    return {
        "apiVersion": GMP_API_VERSION,
        "kind": "PodMonitoring",
        "metadata": {"name": WORKLOAD_MONITORING, "namespace": namespace, "labels": MANAGED_BY},
        "spec": {
            "selector": {"matchExpressions": [{"key": TARGET_CLASS_LABEL, "operator": "Exists"}]},
            "endpoints": [
                {"port": PORT_NAME, "path": METRICS_PATH, "interval": f"{interval_seconds}s"}
            ],
            "targetLabels": {
                "metadata": list(WORKLOAD_METADATA),
                "fromPod": [{"from": TARGET_CLASS_LABEL, "to": TARGET_CLASS}],
            },
        },
    }


def kube_state_metrics_scrape(interval_seconds: int) -> dict[str, Any]:
    """The ClusterPodMonitoring of spotproof's kube-state-metrics, its labels kept."""
    return {
        "apiVersion": GMP_API_VERSION,
        "kind": "ClusterPodMonitoring",
        "metadata": {"name": ksm.NAME, "labels": MANAGED_BY},
        "spec": {
            "selector": {"matchLabels": ksm.LABELS},
            "endpoints": [{"port": ksm.METRICS_PORT[0], "interval": f"{interval_seconds}s"}],
            "targetLabels": {"metadata": []},
        },
    }


def collector_ingress(namespace: str) -> dict[str, Any]:
    """The NetworkPolicy admitting GMP's collector to the ``metrics`` port in ``namespace``."""
    collector = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": COLLECTOR_NAMESPACE}},
        "podSelector": {"matchLabels": COLLECTOR_LABELS},
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": SCRAPE_POLICY, "namespace": namespace, "labels": MANAGED_BY},
        "spec": {
            "podSelector": {
                "matchExpressions": [{"key": TARGET_CLASS_LABEL, "operator": "Exists"}]
            },
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [collector], "ports": [{"protocol": "TCP", "port": PORT_NAME}]}],
        },
    }


def recording_groups(groups: Sequence[RuleGroup]) -> list[RuleGroup]:
    """Each group with its recording rules only; groups left empty are dropped."""
    kept = [replace(g, rules=tuple(r for r in g.rules if r.record)) for g in groups]
    return [g for g in kept if g.rules]


def cluster_rules(groups: Sequence[RuleGroup]) -> dict[str, Any] | None:
    """The ClusterRules of the recording rules; None when there are none."""
    recording = recording_groups(groups)
    if not recording:
        return None
    return {
        "apiVersion": GMP_API_VERSION,
        "kind": "ClusterRules",
        "metadata": {"name": "spotproof", "labels": MANAGED_BY},
        "spec": rule_file(recording),
    }


@dataclass(frozen=True)
class AlertingRule:
    """An alerting rule, its group, and what tells it from others of the same name."""

    group: RuleGroup
    rule: Rule
    distinct: tuple[str, ...]
    """``label=value`` of the labels whose values differ among the rules named alike (one
    alert per target class, say); empty when the name is unique."""

    @property
    def key(self) -> str:
        """Unique among the stack's alerting rules, and stable while the rules are."""
        parts = [self.rule.alert, *(part.split("=", 1)[1] for part in self.distinct)]
        return "-".join(_kebab(part) for part in parts)


def alerting_rules(groups: Sequence[RuleGroup]) -> list[AlertingRule]:
    """Every alerting rule; refused when two are told apart by neither name nor labels, or
    when an annotation uses a template Cloud Monitoring cannot fill in."""
    pairs = [(group, rule) for group in groups for rule in group.alerts]
    found = []
    for group, rule in pairs:
        alike = [other for _, other in pairs if other.alert == rule.alert]
        varying = sorted(k for k in rule.labels if len({o.labels.get(k) for o in alike}) > 1)
        distinct = tuple(f"{key}={rule.labels[key]}" for key in varying)
        found.append(AlertingRule(group, rule, distinct))
        where = f"MonitoringArgs.rule_groups[{group.name}].{rule.alert}.annotations"
        for name, text in rule.annotations.items():
            document_variables(text, f"{where}.{name}")
    keys = [alerting.key for alerting in found]
    if len(set(keys)) != len(keys):
        raise SpecError(
            "MonitoringArgs.rule_groups",
            sorted({k for k in keys if keys.count(k) > 1}),
            "alerting rules that neither their name nor their labels tell apart",
            "a distinct name or label values",
        )
    return found


def document_variables(template: str, key: str = "annotation") -> str:
    """A Prometheus annotation as alert policy documentation: ``{{ $labels.x }}`` as
    ``${metric_or_resource.label.x}``, ``{{ $labels }}`` as ``${metric_or_resource.labels}``,
    ``{{ $value }}`` (plain, humanized, printf'd or as a duration) as
    ``${metric.label.value}``; any other template is refused (see the module)."""

    def translate(match: re.Match[str]) -> str:
        inner = match.group(1)
        label = _LABEL.fullmatch(inner)
        if label is not None and label.group(1) is None:
            return "${metric_or_resource.labels}"
        if label is not None:
            return f"${{metric_or_resource.label.{label.group(1)}}}"
        value = _VALUE.fullmatch(inner)
        if value is not None:
            return "${metric.label.value}" + _VALUE_UNITS.get(value.group(1) or "", "")
        raise SpecError(
            key,
            match.group(0),
            "a template Cloud Monitoring's alert documentation cannot fill in",
            "{{ $labels }}, {{ $labels.NAME }} and {{ $value }}, plain or piped to humanize, "
            "humanizeDuration or printf",
        )

    return _TEMPLATE.sub(translate, template)


def policy_query(cluster: str, rule: Rule) -> str:
    """An alerting rule's expression as its policy asks it: of ``cluster``'s series only."""
    return in_cluster(rule.expr, cluster, project_wide=PROJECT_WIDE)


def alert_policy(
    cluster: str,
    alerting: AlertingRule,
    channels: Sequence[pulumi.Input[str]],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The ``monitoring.AlertPolicy`` arguments for one alerting rule."""
    group, rule = alerting.group, alerting.rule
    title = f"{rule.alert} ({', '.join(alerting.distinct)})" if alerting.distinct else rule.alert
    condition: dict[str, Any] = {
        "query": policy_query(cluster, rule),
        "evaluation_interval": f"{seconds(group.interval)}s",
        "rule_group": group.name,
        "alert_rule": rule.alert,
        # The rules' metrics appear only once workloads run: validated, a fresh project's
        # policies would not create (policy.gke_monitoring, METRIC_VALIDATION).
        "disable_metric_validation": True,
    }
    if rule.for_:
        condition["duration"] = f"{seconds(rule.for_)}s"
    if rule.labels:
        condition["labels"] = dict(rule.labels)
    summary = rule.annotations.get("summary", rule.alert)
    policy: dict[str, Any] = {
        "display_name": f"{cluster}: {title}",
        "combiner": "OR",
        "conditions": [{"display_name": title, "condition_prometheus_query_language": condition}],
        "notification_channels": list(channels),
        "documentation": {
            "subject": document_variables(f"{cluster}: {summary}"),
            "content": document_variables(rule.annotations.get("description", summary)),
            "mime_type": "text/markdown",
        },
        "user_labels": dict(labels),
    }
    severity = SEVERITIES.get(rule.labels.get("severity", ""))
    if severity is not None:
        policy["severity"] = severity
    return policy


def _kebab(word: str) -> str:
    """``PendingGPUPodsTooLong`` -> ``pending-gpu-pods-too-long``; ``spot-gpu`` stays."""
    split = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", word).lower()
    return re.sub(r"[^a-z0-9]+", "-", split).strip("-")
