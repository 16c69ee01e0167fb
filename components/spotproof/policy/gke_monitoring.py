"""A GKE stack's Cloud Monitoring alert policies, whoever declared them.

Cloud Monitoring validates, when a policy is created, that the metrics its PromQL condition
names exist, unless the condition sets ``disableMetricValidation`` ("whether to disable
metric existence validation for this condition": ``AlertPolicy.Condition.
PrometheusQueryLanguageCondition``, Cloud Monitoring API v3; hashicorp/
terraform-provider-google#20491 asked for the field because such a policy could not be
created before its metrics, GoogleCloudPlatform/magic-modules#12438 added it). A stack's
trainers, workers and kube-state-metrics have not been scraped when ``pulumi up`` creates
its policies, so on a fresh project a validated condition fails the update half-way.
``[gke-alert-metrics-unvalidated]`` says so before: every PromQL condition turns the
check off (``gke.monitoring_documents.alert_policy`` renders it so).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.policy.base import ResourceRule

ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
PROMQL_CONDITION = "conditionPrometheusQueryLanguage"
METRIC_VALIDATION = "disableMetricValidation"
"""The condition's field, as Pulumi's inputs spell it (``disable_metric_validation`` in
pulumi-gcp 10.2.0's Python arguments)."""


def promql_metrics_unvalidated(inputs: Mapping[str, Any]) -> Iterator[str]:
    for index, condition in enumerate(inputs.get("conditions") or ()):
        promql = (condition or {}).get(PROMQL_CONDITION)
        if promql is None or promql.get(METRIC_VALIDATION) is True:
            continue
        shown = condition.get("displayName") or f"conditions[{index}]"
        yield (
            f"PromQL condition {shown!r} does not set {METRIC_VALIDATION}: true; Cloud "
            "Monitoring refuses to create it while a metric it reads has no data yet, as "
            "spotproof's do until the workloads are scraped"
        )


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "gke-alert-metrics-unvalidated",
        "PromQL alert conditions create before their metrics exist.",
        ALERT_POLICY,
        promql_metrics_unvalidated,
    ),
)
