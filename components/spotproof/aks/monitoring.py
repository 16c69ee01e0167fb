"""``spotproof:aks:Monitoring``: Azure Monitor managed Prometheus for an AKS cluster: the
workspace the samples land in, the collection rule that sends them there, the scrape of
spotproof's pods, and spotproof's rule groups evaluated against the workspace.

Facts this relies on (argument names checked in pulumi-azure-native 3.29.0):

- Enabling Prometheus on AKS "with ARM/Bicep/Terraform" is five things: an Azure Monitor
  workspace; a data collection endpoint and a data collection rule, both ``kind: Linux``, the
  rule with a ``prometheusForwarder`` source of the ``Microsoft-PrometheusMetrics`` stream, a
  ``monitoringAccounts`` destination (the workspace) and a data flow joining them; an
  association of that rule with the cluster; and ``azureMonitorProfile.metrics.enabled`` on
  the cluster (https://learn.microsoft.com/azure/azure-monitor/containers/kubernetes-monitoring-enable-arm;
  its templates are Azure/prometheus-collector@39583fd
  ``AddonArmTemplate/FullAzureMonitorMetricsProfile.json`` and
  ``AddonTerraformTemplate/main.tf``; the latter creates the cluster with metrics on
  first and associates the rule with it after, the order this component assumes).
- Prerequisites: the cluster uses a managed identity, and the subscription has the
  ``Microsoft.ContainerService``, ``Microsoft.Insights`` and ``Microsoft.AlertsManagement``
  providers registered (same page's "Prerequisites" in its CLI form,
  https://learn.microsoft.com/azure/azure-monitor/containers/kubernetes-monitoring-enable).
- The endpoint association (``configurationAccessEndpoint``) is only needed for a private
  link cluster whose workspace is in another region (same ``main.tf``); here everything is
  in the cluster's region, so only the rule is associated.
- What it costs: "There's no direct cost to Azure Monitor managed service for Prometheus or
  creating an Azure Monitor workspace. Pricing is based on ingestion and query of collected
  data" (https://learn.microsoft.com/azure/azure-monitor/metrics/prometheus-metrics-overview).
  Every sample the add-on scrapes (its default targets as well as spotproof's pods) is
  billed as ingestion, and each rule group's evaluations are queries against the workspace;
  hence monitoring is off by default on dev stacks. A longer ``scrape_interval_seconds``
  ingests proportionally fewer samples from spotproof's pods.
- Dashboards: pulumi-azure-native 3.29.0 has ``dashboard.Grafana`` (a Managed Grafana
  workspace, whose dashboards live in Grafana's HTTP API, not in ARM) and
  ``dashboard.DashboardDefinition``, at API ``2025-09-01-preview`` only, its
  ``serializedData`` documented only as "the dashboard definition data in JSON format".
  Neither deploys a Grafana JSON model through a stable ARM contract: the model is
  exported (``grafana_dashboard_json``) for import into either.
- PodMonitor targets are scraped by the pods labelled ``rsName: ama-metrics`` and
  ``kubernetes.azure.com/managedby: aks`` (the allocator's ``CollectorSelector``,
  ``otelcollector/configuration-reader-builder/main.go``), the ``ama-metrics`` Deployment in
  kube-system, off the host network (``.../templates/ama-metrics-deployment.yaml``, both
  Azure/prometheus-collector@39583fd). The workload namespaces deny ingress from outside
  (``kube.network_policy``): each admits those pods to the ``metrics`` port alone.
- The allocator turns a PodMonitor into a scrape job with prometheus-operator v0.92.0
  (``otel-allocator/internal/watcher/promOperator.go``), whose ``generatePodMonitorConfig``
  (``pkg/prometheus/promcfg.go``) keeps to ``namespaceSelector.matchNames`` and sets the
  ``namespace`` and ``pod`` labels the rules join on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_azure_native as azure
import pulumi_kubernetes as k8s

from spotproof.cloud_tags import stack_tags
from spotproof.kube.nodepool import MANAGED_BY
from spotproof.observability.model import Rule, RuleGroup
from spotproof.runtime.metrics import names
from spotproof.scheduling import TARGET_CLASS_LABEL

PROMETHEUS_STREAM = "Microsoft-PrometheusMetrics"
"""The only stream a ``prometheusForwarder`` source takes
(``monitor.KnownPrometheusForwarderDataSourceStreams``)."""
WORKSPACE_DESTINATION = "MonitoringAccount1"
"""The name the data flow and the destination share, as in Microsoft's templates."""
ENDPOINT_NAME_LIMIT = 44
RULE_NAME_LIMIT = 64
"""Microsoft's templates cut the endpoint's name to 44 characters and the rule's to 64
(``AddonArmTemplate/FullAzureMonitorMetricsProfile.json``, ``dceName`` and ``dcrName``)."""

POD_MONITOR_API = "azmonitoring.coreos.com/v1"
"""The add-on's own group: it ignores ``monitoring.coreos.com`` objects by design
(https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd)."""
COLLECTOR_NAMESPACE = "kube-system"
COLLECTOR_LABELS = {"rsName": "ama-metrics", "kubernetes.azure.com/managedby": "aks"}
"""The add-on's collectors that scrape PodMonitor targets (see the module)."""
SPOTPROOF_PODS = {"key": TARGET_CLASS_LABEL, "operator": "Exists"}
"""What every trainer and batch worker pod carries, and other pods do not."""
DEFAULT_SCRAPE_INTERVAL_SECONDS = 30
"""What the add-on uses for its own targets (``ama-metrics-settings-configmap``,
``default-targets-scrape-interval-settings``, Azure/prometheus-collector@39583fd)."""

SEVERITIES = {"critical": 0, "error": 1, "warning": 2, "info": 3}
"""A rule's ``severity`` label (``observability.rules`` uses critical, warning and info) as
Azure's 0 (critical), 1 (error), 2 (warning), 3 (informational) or 4 (verbose); an alert
without the label gets Azure's default, 3 (``rules.severity``,
https://learn.microsoft.com/azure/azure-monitor/metrics/prometheus-rule-groups)."""
MIN_GROUP_INTERVAL, MAX_GROUP_INTERVAL = 60, 15 * 60
"""A rule group is evaluated every 1 to 15 minutes (``interval`` of
``alertsmanagement.PrometheusRuleGroup``: "Should be between 1 and 15 minutes")."""

# https://prometheus.io/docs/prometheus/latest/configuration/configuration/#duration
_DURATION = re.compile(
    r"((?P<y>\d+)y)?((?P<w>\d+)w)?((?P<d>\d+)d)?((?P<h>\d+)h)?"
    r"((?P<m>\d+)m)?((?P<s>\d+)s)?((?P<ms>\d+)ms)?"
)
_SECONDS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


def prometheus_seconds(duration: str) -> int:
    """A Prometheus duration (``1m``, ``1h30m``) in whole seconds."""
    match = _DURATION.fullmatch(duration)
    if not duration or match is None:
        raise ValueError(
            f"duration {duration!r} is not a Prometheus duration; "
            "allowed: units y, w, d, h, m, s, ms in that order, e.g. 90s, 1h30m"
        )
    parts = {unit: int(value) for unit, value in match.groupdict().items() if value}
    milliseconds = parts.pop("ms", 0)
    if milliseconds % 1000:
        raise ValueError(f"duration {duration!r}: allowed: whole seconds (ISO 8601 in Azure)")
    return milliseconds // 1000 + sum(_SECONDS[unit] * n for unit, n in parts.items())


def iso8601_duration(duration: str) -> str:
    """A Prometheus duration as the ISO 8601 duration Azure's rule groups take (``1m`` is
    ``PT1M``, ``1h30m`` is ``PT1H30M``, ``2d`` is ``P2D``): Azure spells ``interval``,
    ``for`` and ``timeToResolve`` that way
    (https://learn.microsoft.com/azure/azure-monitor/metrics/prometheus-rule-groups)."""
    days, rest = divmod(prometheus_seconds(duration), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    time = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (seconds, "S")) if n)
    date = f"{days}D" if days else ""
    if not date and not time:
        return "PT0S"
    return f"P{date}" + (f"T{time}" if time else "")


def group_interval(group: RuleGroup) -> str:
    """``group.interval`` in ISO 8601, refused outside the 1 to 15 minutes Azure evaluates."""
    if not MIN_GROUP_INTERVAL <= prometheus_seconds(group.interval) <= MAX_GROUP_INTERVAL:
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


def pod_monitor(name: str, interval_seconds: int, scraped: Sequence[str]) -> dict[str, Any]:
    """The add-on's PodMonitor for every spotproof pod that serves metrics in the
    ``scraped`` namespaces (``namespaceSelector.matchNames``, in the add-on's CRD). It lives
    in kube-system, which always exists: it waits for no namespace of spotproof's.

    Why a PodMonitor rather than annotation scraping: the add-on scrapes annotated pods only
    in the namespaces ``podannotationnamespaceregex`` names, in ``ama-metrics-settings-configmap``,
    a kube-system ConfigMap holding every other setting of the add-on too (owning it would
    overwrite the cluster owner's). A PodMonitor is spotproof's own object selecting what
    the pods already carry, the target-class label and a port named ``metrics``
    (https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd:
    "Can be deployed in any namespace", "Port requires a named port", and the label limits
    to set "so that they are not dropped"). Pods without that port yield no target."""
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


@dataclass
class MonitoringArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    """The cluster's region; the workspace, endpoint, rule and rule groups go there too."""
    cluster_id: pulumi.Input[str]
    """The ManagedCluster's ARM id: what the collection rule is associated with."""
    cluster_name: pulumi.Input[str]
    """The ManagedCluster's name: the ``cluster`` label the add-on puts on every series
    unless a ``cluster_alias`` says otherwise, which the rule groups filter on
    (``properties.clusterName``, https://learn.microsoft.com/azure/azure-monitor/metrics/prometheus-rule-groups)."""
    provider: pulumi.ProviderResource
    """The cluster's Kubernetes provider, for the PodMonitor and the scrape policies."""
    rule_groups: Sequence[RuleGroup]
    namespaces: Sequence[str]
    """Where spotproof's workloads run: what the PodMonitor scrapes, and where the add-on's
    collectors are let in (``StackMonitoring.namespaces``)."""
    action_group_ids: Sequence[pulumi.Input[str]] = ()
    """Azure Monitor action groups every alert notifies; none: alerts fire unnotified."""
    scrape_interval_seconds: int = DEFAULT_SCRAPE_INTERVAL_SECONDS
    grafana_dashboard: Mapping[str, Any] | None = None
    """A Grafana JSON model, exported as ``grafana_dashboard_json`` for import."""
    ready: Sequence[pulumi.Resource] = ()
    """What creates ``namespaces``: the scrape policies in them wait for it."""
    name_prefix: str | None = None
    """Starts the Azure names of what this component creates; default the component's name."""
    tags: Mapping[str, str] = field(default_factory=dict)


class Monitoring(pulumi.ComponentResource):
    """An Azure Monitor workspace collecting the cluster's Prometheus metrics, the PodMonitor
    that adds spotproof's pods, the policies that let the add-on reach them, and one
    Prometheus rule group per ``RuleGroup``. The cluster
    itself must enable the add-on: pass :func:`cluster_monitor_profile` as its
    ``azure_monitor_profile``."""

    workspace_id: pulumi.Output[str]
    query_endpoint: pulumi.Output[str]
    """The workspace's Prometheus query URL, for Grafana and ``spotproof status``."""
    grafana_dashboard_json: str | None

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:aks:Monitoring", name, None, opts)
        prefix = args.name_prefix or name
        intervals = {group.name: group_interval(group) for group in args.rule_groups}
        rules = {
            group.name: [azure_rule(rule, args.action_group_ids) for rule in group.rules]
            for group in args.rule_groups
        }
        scrape = pod_monitor(f"{prefix}-pods", args.scrape_interval_seconds, args.namespaces)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**stack_tags(pulumi.get_stack(), purpose="monitoring"), **args.tags}
        placed = {"resource_group_name": args.resource_group_name, "location": args.location}

        workspace = azure.monitor.AzureMonitorWorkspace(
            f"{name}-workspace",
            azure_monitor_workspace_name=prefix,
            tags=tags,
            **placed,
            opts=child,
        )
        endpoint = azure.monitor.DataCollectionEndpoint(
            f"{name}-endpoint",
            data_collection_endpoint_name=f"{prefix}-prometheus"[:ENDPOINT_NAME_LIMIT],
            kind=azure.monitor.KnownDataCollectionEndpointResourceKind.LINUX,
            tags=tags,
            **placed,
            opts=child,
        )
        collection = azure.monitor.DataCollectionRule(
            f"{name}-collection",
            data_collection_rule_name=f"{prefix}-prometheus"[:RULE_NAME_LIMIT],
            kind=azure.monitor.KnownDataCollectionRuleResourceKind.LINUX,
            description="spotproof: the cluster's Prometheus metrics to its workspace",
            data_collection_endpoint_id=endpoint.id,
            data_sources={
                "prometheus_forwarder": [
                    {"name": "PrometheusDataSource", "streams": [PROMETHEUS_STREAM]}
                ]
            },
            destinations={
                "monitoring_accounts": [
                    {"account_resource_id": workspace.id, "name": WORKSPACE_DESTINATION}
                ]
            },
            data_flows=[{"streams": [PROMETHEUS_STREAM], "destinations": [WORKSPACE_DESTINATION]}],
            tags=tags,
            **placed,
            opts=child,
        )
        association = azure.monitor.DataCollectionRuleAssociation(
            f"{name}-association",
            association_name=f"{prefix}-prometheus",
            resource_uri=args.cluster_id,
            data_collection_rule_id=collection.id,
            description="Sends the cluster's Prometheus metrics to the workspace",
            opts=child,
        )
        for group in args.rule_groups:
            azure.alertsmanagement.PrometheusRuleGroup(
                f"{name}-{group.name}",
                rule_group_name=f"{prefix}-{group.name}",
                description=f"spotproof: {group.name}",
                scopes=[workspace.id],
                cluster_name=args.cluster_name,
                interval=intervals[group.name],
                enabled=True,
                rules=rules[group.name],
                tags=tags,
                **placed,
                opts=child,
            )
        # The PodMonitor CRD arrives with the add-on, after the cluster enables metrics.
        k8s.apiextensions.CustomResource(
            f"{name}-pods",
            api_version=scrape["apiVersion"],
            kind=scrape["kind"],
            metadata=scrape["metadata"],
            spec=scrape["spec"],
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[association]
            ),
        )
        in_namespaces = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=list(args.ready)
        )
        for namespace in args.namespaces:
            k8s.networking.v1.NetworkPolicy(
                f"{name}-scrape-{namespace}", **scrape_ingress(namespace), opts=in_namespaces
            )
        self.workspace_id = workspace.id
        self.query_endpoint = workspace.metrics.apply(
            lambda metrics: (metrics.prometheus_query_endpoint if metrics else None) or ""
        )
        self.grafana_dashboard_json = (
            json.dumps(args.grafana_dashboard, sort_keys=True) if args.grafana_dashboard else None
        )
        self.register_outputs(
            {
                "workspace_id": self.workspace_id,
                "query_endpoint": self.query_endpoint,
                "grafana_dashboard_json": self.grafana_dashboard_json,
            }
        )
