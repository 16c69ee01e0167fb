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
- The rule groups' form, the PodMonitor and the scrape policies are
  ``aks.monitoring_documents``, with the facts they rely on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_azure_native as azure
import pulumi_kubernetes as k8s

from spotproof.aks import monitoring_documents as documents
from spotproof.aks.monitoring_documents import cluster_monitor_profile
from spotproof.cloud_tags import stack_tags
from spotproof.observability.model import RuleGroup

PROMETHEUS_STREAM = "Microsoft-PrometheusMetrics"
"""The only stream a ``prometheusForwarder`` source takes
(``monitor.KnownPrometheusForwarderDataSourceStreams``)."""
WORKSPACE_DESTINATION = "MonitoringAccount1"
"""The name the data flow and the destination share, as in Microsoft's templates."""
ENDPOINT_NAME_LIMIT = 44
RULE_NAME_LIMIT = 64
"""Microsoft's templates cut the endpoint's name to 44 characters and the rule's to 64
(``AddonArmTemplate/FullAzureMonitorMetricsProfile.json``, ``dceName`` and ``dcrName``)."""

__all__ = ["Monitoring", "MonitoringArgs", "cluster_monitor_profile"]


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
    scrape_interval_seconds: int = documents.DEFAULT_SCRAPE_INTERVAL_SECONDS
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
        intervals = {group.name: documents.group_interval(group) for group in args.rule_groups}
        rules = {
            group.name: [documents.azure_rule(rule, args.action_group_ids) for rule in group.rules]
            for group in args.rule_groups
        }
        scrape = documents.pod_monitor(
            f"{prefix}-pods", args.scrape_interval_seconds, args.namespaces
        )
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
                f"{name}-scrape-{namespace}",
                **documents.scrape_ingress(namespace),
                opts=in_namespaces,
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
