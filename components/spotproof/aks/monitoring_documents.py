"""What ``spotproof:aks:Monitoring`` hands Azure Monitor managed Prometheus and its metrics
add-on (ama-metrics), as plain data: spotproof's rule groups in Azure's form, the
PodMonitor that scrapes spotproof's pods, the NetworkPolicy that lets the add-on reach
them, and the cluster's monitor profile. Tests read them directly.

Facts they rely on:

- A Prometheus rule group is evaluated every 1 to 15 minutes; ``interval``, an alert's
  ``for`` and ``timeToResolve`` are ISO 8601 durations; an alert's ``severity`` is 0
  (critical) to 4 (verbose), 3 when unset; its ``actions`` name action groups by
  ``actionGroupId`` (https://learn.microsoft.com/azure/azure-monitor/metrics/prometheus-rule-groups;
  ``alertsmanagement.PrometheusRuleGroup`` in pulumi-azure-native 3.29.0).
- The add-on reads PodMonitors in its own group, ``azmonitoring.coreos.com/v1``, in any
  namespace; a PodMonitor needs a named port, and the label limits of Microsoft's template
  keep series from being dropped
  (https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd).
  Its CRD is prometheus-operator's PodMonitor: ``podMetricsEndpoints[].relabelings`` items
  take ``sourceLabels`` (each ``^[a-zA-Z_][a-zA-Z0-9_]*$``), ``targetLabel``, ``regex``,
  ``replacement``, ``separator``, ``modulus`` and ``action`` (default ``replace``)
  (Azure/prometheus-collector@39583fd ``otelcollector/deploy/addon-chart/
  azure-monitor-metrics-addon/templates/ama-metrics-podmonitor-crd.yaml``).
- The add-on's target allocator turns a PodMonitor into a scrape job with
  prometheus-operator v0.92.0 (``otel-allocator/internal/watcher/promOperator.go``), whose
  ``generatePodMonitorConfig`` (``pkg/prometheus/promcfg.go``) keeps to
  ``namespaceSelector.matchNames``, sets the ``namespace``, ``pod`` and ``container``
  labels the rules join on, and applies an endpoint's ``relabelings`` after its own, to
  targets that still carry pod discovery's ``__meta_kubernetes_pod_label_<name>``.
- PodMonitor targets are scraped by the pods labelled ``rsName: ama-metrics`` and
  ``kubernetes.azure.com/managedby: aks`` (the allocator's ``CollectorSelector``,
  ``otelcollector/configuration-reader-builder/main.go``), the ``ama-metrics`` Deployment in
  kube-system, off the host network (``.../templates/ama-metrics-deployment.yaml``, both
  Azure/prometheus-collector@39583fd). The workload namespaces deny ingress from outside
  (``kube.network_policy``): each admits those pods to the ``metrics`` port alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spotproof.kube.nodepool import MANAGED_BY
from spotproof.observability.model import Rule, RuleGroup, duration_seconds
from spotproof.observability.promql import label_name
from spotproof.runtime.metrics import names
from spotproof.scheduling import TARGET_CLASS_LABEL

if TYPE_CHECKING:
    import pulumi

POD_MONITOR_API = "azmonitoring.coreos.com/v1"
"""The add-on's own group: it ignores ``monitoring.coreos.com`` objects by design."""
COLLECTOR_NAMESPACE = "kube-system"
COLLECTOR_LABELS = {"rsName": "ama-metrics", "kubernetes.azure.com/managedby": "aks"}
"""The add-on's collectors that scrape PodMonitor targets (see the module)."""
SPOTPROOF_PODS = {"key": TARGET_CLASS_LABEL, "operator": "Exists"}
"""What every trainer and batch worker pod carries, and other pods do not."""
TARGET_CLASS = "target_class"
"""The label a workload's series carry its pod's target class in, as on GKE and EKS."""
DEFAULT_SCRAPE_INTERVAL_SECONDS = 30
"""What the add-on uses for its own targets (``ama-metrics-settings-configmap``,
``default-targets-scrape-interval-settings``, Azure/prometheus-collector@39583fd)."""

SEVERITIES = {"critical": 0, "error": 1, "warning": 2, "info": 3}
"""A rule's ``severity`` label (``observability.rules`` uses critical, warning and info) as
Azure's level; an alert without the label gets Azure's default, 3."""
MIN_GROUP_INTERVAL, MAX_GROUP_INTERVAL = 60, 15 * 60
"""A rule group is evaluated every 1 to 15 minutes ("Should be between 1 and 15 minutes")."""


def iso8601_duration(duration: str) -> str:
    """A Prometheus duration as the ISO 8601 duration Azure's rule groups take (``1m`` is
    ``PT1M``, ``1h30m`` is ``PT1H30M``, ``2d`` is ``P2D``)."""
    seconds = duration_seconds(duration)
    if seconds != int(seconds):
        raise ValueError(f"duration {duration!r}: allowed: whole seconds (ISO 8601 in Azure)")
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds_left = divmod(rest, 60)
    parts = ((hours, "H"), (minutes, "M"), (seconds_left, "S"))
    time = "".join(f"{n}{unit}" for n, unit in parts if n)
    date = f"{days}D" if days else ""
    if not date and not time:
        return "PT0S"
    return f"P{date}" + (f"T{time}" if time else "")


def group_interval(group: RuleGroup) -> str:
    """``group.interval`` in ISO 8601, refused outside the 1 to 15 minutes Azure evaluates."""
    if not MIN_GROUP_INTERVAL <= duration_seconds(group.interval) <= MAX_GROUP_INTERVAL:
        raise ValueError(
            f"rule group {group.name!r}: interval {group.interval} is not evaluated by Azure "
            "Monitor; allowed: 1m to 15m"
        )
    return iso8601_duration(group.interval)


def severity(rule: Rule) -> int:
    """Azure's severity of an alert, from the rule's ``severity`` label."""
    label = rule.labels.get("severity")
    if label is None:
        return SEVERITIES["info"]
    if label not in SEVERITIES:
        raise ValueError(
            f"alert {rule.alert}: severity label {label!r} has no Azure severity; "
            f"allowed: {', '.join(SEVERITIES)}"
        )
    return SEVERITIES[label]


def azure_rule(rule: Rule, action_group_ids: Sequence[pulumi.Input[str]]) -> dict[str, Any]:
    """One rule as ``alertsmanagement.PrometheusRuleArgs``: Prometheus's ``expr`` is Azure's
    ``expression``; an alert also carries its severity and the action groups it notifies
    (``actions[].actionGroupId``); a recording rule takes neither."""
    azure_form: dict[str, Any] = {"expression": rule.expr}
    if rule.labels:
        azure_form["labels"] = dict(rule.labels)
    if rule.record:
        return {"record": rule.record, **azure_form}
    azure_form |= {"alert": rule.alert, "severity": severity(rule)}
    if rule.for_:
        azure_form["for_"] = iso8601_duration(rule.for_)
    if rule.annotations:
        azure_form["annotations"] = dict(rule.annotations)
    if action_group_ids:
        azure_form["actions"] = [{"action_group_id": each} for each in action_group_ids]
    return azure_form


def cluster_monitor_profile() -> dict[str, Any]:
    """The ManagedCluster's ``azure_monitor_profile``: the metrics add-on (ama-metrics) on,
    and kube-state-metrics told to copy the target-class pod label into ``kube_pod_labels``
    (as ``label_spotproof_dev_target_class``) for the Pending alerts. The allowlist is
    "resource names in their plural form and Kubernetes label keys", ``pods=[app]``
    (https://learn.microsoft.com/azure/azure-monitor/containers/kubernetes-monitoring-enable,
    optional parameters); the add-on's minimal ingestion profile keeps ``kube_.*_labels``
    and ``kube_pod_status_phase`` (Azure/prometheus-collector@39583fd
    ``otelcollector/shared/configmap/mp/tomlparser-default-targets-metrics-keep-list.go``)."""
    return {
        "metrics": {
            "enabled": True,
            "kube_state_metrics": {"metric_labels_allowlist": f"pods=[{TARGET_CLASS_LABEL}]"},
        }
    }


def target_class_relabeling() -> dict[str, Any]:
    """Copies the pod's ``spotproof.dev/target-class`` label, as pod discovery names it,
    into ``target_class`` on every series of the target: the rules and dashboards split by
    it, as they do on EKS (the same relabeling in its collector's job) and GKE. Not
    ``podTargetLabels``: that writes the label under its sanitised name
    (``spotproof_dev_target_class``), which no rule reads."""
    source = label_name(TARGET_CLASS_LABEL, prefix="__meta_kubernetes_pod_label_")
    return {"sourceLabels": [source], "targetLabel": TARGET_CLASS, "action": "replace"}


def pod_monitor(name: str, interval_seconds: int, scraped: Sequence[str]) -> dict[str, Any]:
    """The add-on's PodMonitor for every spotproof pod that serves metrics in the
    ``scraped`` namespaces, its series labelled with the pod's target class. It lives in
    kube-system, which always exists: it waits for no namespace of spotproof's.

    Why a PodMonitor rather than annotation scraping: the add-on scrapes annotated pods only
    in the namespaces ``podannotationnamespaceregex`` names, in ``ama-metrics-settings-configmap``,
    a kube-system ConfigMap holding every other setting of the add-on too (owning it would
    overwrite the cluster owner's). A PodMonitor is spotproof's own object selecting what
    the pods already carry, the target-class label and a port named ``metrics``. Pods
    without that port yield no target."""
    if not scraped or len(set(scraped)) != len(scraped):
        raise ValueError(f"scraped namespaces {list(scraped)}: allowed: at least one, each once")
    if not 1 <= interval_seconds <= 3600:  # spotproof's sanity bound, not the add-on's
        raise ValueError(
            f"scrape interval {interval_seconds}s: allowed: 1 to 3600 seconds "
            f"(the add-on's own targets use {DEFAULT_SCRAPE_INTERVAL_SECONDS})"
        )
    return {
        "apiVersion": POD_MONITOR_API,
        "kind": "PodMonitor",
        "metadata": {"name": name, "namespace": "kube-system", "labels": dict(MANAGED_BY)},
        "spec": {
            "labelLimit": 63,
            "labelNameLengthLimit": 511,
            "labelValueLengthLimit": 1023,
            "selector": {"matchExpressions": [SPOTPROOF_PODS]},
            "namespaceSelector": {"matchNames": sorted(scraped)},
            "podMetricsEndpoints": [
                {
                    "port": names.PORT_NAME,
                    "path": names.METRICS_PATH,
                    "interval": f"{interval_seconds}s",
                    "relabelings": [target_class_relabeling()],
                }
            ],
        },
    }


def scrape_ingress(namespace: str) -> dict[str, Any]:
    """The NetworkPolicy admitting the add-on's collectors to the ``metrics`` port of
    spotproof's pods in ``namespace``, and nothing else."""
    collectors = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": COLLECTOR_NAMESPACE}},
        "podSelector": {"matchLabels": dict(COLLECTOR_LABELS)},
    }
    port = {"protocol": "TCP", "port": names.PORT_NAME}
    return {
        "metadata": {"name": "allow-metrics-scrape", "namespace": namespace, "labels": MANAGED_BY},
        "spec": {
            "podSelector": {"matchExpressions": [SPOTPROOF_PODS]},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [collectors], "ports": [port]}],
        },
    }
