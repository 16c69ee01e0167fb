"""``spotproof:gke:Monitoring``: Managed Service for Prometheus (GMP) scraping spotproof's
pods, its rules, the kube-state-metrics series the Pending alerts read, alert policies on
the stack's notification channels and, when given, a Cloud Monitoring dashboard. What each
object says is ``gke.monitoring_documents``; this module creates them.

What costs money, and why the stack leaves it off in dev: GMP "charges for the number of
samples ingested into Cloud Monitoring and for read requests to the Monitoring API"
(https://cloud.google.com/stackdriver/docs/managed-prometheus/cost-controls): every
series scraped here, every series a recording rule writes, once per interval. Alerting
"charges a per-condition cost" and a cost per time series a condition's query returns
(https://cloud.google.com/monitoring/alerts/cost-control): one condition per alert rule.
Only spotproof's pods and kube-state-metrics (which watches only what the rules and
dashboards read) are scraped. GKE's system metrics (``SYSTEM_COMPONENTS``) are free
(https://cloud.google.com/stackdriver/docs/solutions/gke/managing-metrics); its kube state
packages go "to Cloud Monitoring using Google Cloud Managed Service for Prometheus", billed
as samples, and are not asked for.

Facts this relies on, each from what it names (GMP at GoogleCloudPlatform/prometheus-engine
v0.17.2, 7920a2a, ``doc/api.md``):

- Delivery: GMP's rule-evaluator sends alerts to a managed Alertmanager configured by "a
  single-key Secret in the public namespace" (``ManagedAlertmanagerSpec.configSecret``),
  whose receivers are Alertmanager's (email, webhook...), not Cloud Monitoring
  notification channels. A Cloud Monitoring alert policy with a PromQL condition names
  ``notification_channels`` directly, so each alerting rule becomes one policy and the
  ``ClusterRules`` carry only the recording rules (the same alert evaluated twice would
  fire twice).
- kube-state-metrics: GKE's managed package is "a curated set" of kube state metrics
  (https://cloud.google.com/kubernetes-engine/docs/how-to/kube-state-metrics) with no
  setting for a label allowlist; a published scrape of its pod (``gke-managed-cim``, GKE
  1.35.8, measured by others) found four families, ``kube_pod_status_phase`` among them and
  neither ``kube_pod_labels`` nor ``kube_pod_created``, which the Pending rules join on. So
  the cluster runs spotproof's own (``kube.kube_state_metrics``, as on EKS) and GKE's ``POD``
  package is off (:func:`cluster_monitoring_config`): its ``kube_pod_status_phase`` would
  count every pod twice.
- The GMP objects go into namespaces that must exist first: the cluster's workload
  namespace is the baseline's (``namespaces_ready``). The pulumi-kubernetes provider
  retries a create that finds no namespace a few times only (``await.go``: five retries,
  backoff factor 2), so a namespace made elsewhere must be among ``namespaces_ready`` too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from spotproof.catalog import Cloud
from spotproof.cloud_tags import stack_tags
from spotproof.fleet.errors import SpecError
from spotproof.gke import monitoring_documents as documents
from spotproof.kube import kube_state_metrics as ksm
from spotproof.observability.dashboards import cloud_monitoring_dashboard
from spotproof.observability.model import RuleGroup
from spotproof.observability.stack import StackMonitoring

SYSTEM_COMPONENTS = "SYSTEM_COMPONENTS"


def cluster_monitoring_config(extra_components: Sequence[str] = ()) -> dict[str, Any]:
    """The cluster's ``monitoring_config`` when the stack monitors it: managed collection
    on (it installs the CRDs and collectors these objects need; GKE turns it on by default
    from 1.27, declared so a diff shows it) and GKE's system metrics, plus
    ``extra_components``, never ``POD`` (see the module)."""
    if "POD" in extra_components:
        raise SpecError(
            "cluster_monitoring_config.extra_components",
            "POD",
            "GKE's pod package would report every pod's phase again, beside "
            "spotproof's kube-state-metrics",
            "GKE's other packages",
        )
    components = list(dict.fromkeys([SYSTEM_COMPONENTS, *extra_components]))
    return {"enable_components": components, "managed_prometheus": {"enabled": True}}


@dataclass
class MonitoringArgs:
    project: pulumi.Input[str]
    cluster_name: str
    """The GKE cluster's name: it names the alert policies, which live in the project, and
    their queries read only the series GMP labels with it (``cluster``)."""
    provider: k8s.Provider
    """The cluster's Kubernetes provider."""
    namespaces: Sequence[str]
    """The namespaces of spotproof's workloads, whose pods carry ``TARGET_CLASS_LABEL`` and
    a container port named ``metrics``."""
    rule_groups: Sequence[RuleGroup] = ()
    notification_channels: Sequence[pulumi.Input[str]] = ()
    """Cloud Monitoring channel names (``projects/P/notificationChannels/ID``)."""
    scrape_interval_seconds: int = 30
    dashboard: Mapping[str, Any] | None = None
    """A Cloud Monitoring dashboard (``projects.dashboards`` JSON); None: no dashboard.
    Created as given: :func:`cloud_monitoring_dashboard` with ``cluster`` narrows its
    queries to the cluster."""
    ready: Sequence[pulumi.Resource] = ()
    """What must exist before kube-state-metrics can start: the system nodes."""
    namespaces_ready: Sequence[pulumi.Resource] = ()
    """What creates ``namespaces`` (the cluster's baseline): the scrapes and the
    NetworkPolicies in them wait for it."""

    def __post_init__(self) -> None:
        if not self.namespaces or len(set(self.namespaces)) != len(self.namespaces):
            raise SpecError(
                "MonitoringArgs.namespaces",
                list(self.namespaces),
                "no namespace to scrape, or one named twice",
                "the workload namespaces, each once",
            )
        interval = self.scrape_interval_seconds
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise SpecError(
                "MonitoringArgs.scrape_interval_seconds",
                interval,
                "not a whole number of seconds",
                "1 or more",
            )
        documents.alerting_rules(self.rule_groups)
        for group in self.rule_groups:
            if group.alerts and documents.seconds(group.interval) % 30:
                raise SpecError(
                    f"MonitoringArgs.rule_groups[{group.name}].interval",
                    group.interval,
                    "Cloud Monitoring evaluates PromQL conditions every multiple of 30 s",
                    "30s, 1m, 1m30s, ...",
                )
            for rule in group.alerts:
                try:
                    documents.policy_query(self.cluster_name, rule)
                except ValueError as error:
                    raise SpecError(
                        f"MonitoringArgs.rule_groups[{group.name}].{rule.alert}.expr",
                        rule.expr,
                        f"cannot be narrowed to cluster {self.cluster_name!r}: {error}",
                        f'PromQL whose selectors name no cluster, or cluster="{self.cluster_name}"',
                    ) from error

    @classmethod
    def of_stack(
        cls,
        monitoring: StackMonitoring,
        *,
        project: str,
        cluster_name: str,
        provider: k8s.Provider,
        ready: Sequence[pulumi.Resource],
        namespaces_ready: Sequence[pulumi.Resource],
    ) -> MonitoringArgs:
        """A stack's monitoring (``observability.stack.stack_monitoring``) on its cluster:
        its rules, namespaces, channels and scrape interval, and its dashboard."""
        return cls(
            project=project,
            cluster_name=cluster_name,
            provider=provider,
            namespaces=monitoring.namespaces,
            rule_groups=monitoring.rule_groups,
            notification_channels=monitoring.settings.notify,
            scrape_interval_seconds=monitoring.settings.scrape_interval_seconds,
            dashboard=cloud_monitoring_dashboard(monitoring.dashboard_title, cluster=cluster_name),
            ready=ready,
            namespaces_ready=namespaces_ready,
        )


class Monitoring(pulumi.ComponentResource):
    """GMP scraping and rules, spotproof's kube-state-metrics, one alert policy per alerting
    rule and the dashboard. The cluster needs :func:`cluster_monitoring_config`."""

    alert_policies: dict[str, gcp.monitoring.AlertPolicy]
    dashboard: gcp.monitoring.Dashboard | None
    outputs: dict[str, pulumi.Input[Any]]
    """What a user looks for: the alert policies' and the dashboard's resource names, the
    ``ClusterRules`` (``kubectl get clusterrules``) and the namespaces scraped."""

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:gke:Monitoring", name, None, opts)
        self._name = name
        cloud = pulumi.ResourceOptions(parent=self)
        cluster_wide = pulumi.ResourceOptions(parent=self, provider=args.provider)
        in_namespaces = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=list(args.namespaces_ready)
        )
        interval = args.scrape_interval_seconds

        ksm.KubeStateMetrics(
            f"{name}-kube-state-metrics",
            ksm.KubeStateMetricsArgs(provider=args.provider, cloud=Cloud.GKE, ready=args.ready),
            opts=cloud,
        )
        self._apply(documents.kube_state_metrics_scrape(interval), cluster_wide)
        for ns in args.namespaces:
            self._apply(documents.pod_monitoring(ns, interval), in_namespaces)
            self._apply(documents.collector_ingress(ns), in_namespaces)
        rules = documents.cluster_rules(args.rule_groups)
        if rules is not None:
            self._apply(rules, cluster_wide)

        labels = stack_tags(pulumi.get_stack(), purpose="monitoring")
        self.alert_policies = {
            alerting.key: gcp.monitoring.AlertPolicy(
                f"{name}-{alerting.key}",
                project=args.project,
                **documents.alert_policy(
                    args.cluster_name, alerting, args.notification_channels, labels
                ),
                opts=cloud,
            )
            for alerting in documents.alerting_rules(args.rule_groups)
        }
        self.dashboard = (
            gcp.monitoring.Dashboard(
                f"{name}-dashboard",
                project=args.project,
                dashboard_json=json.dumps(args.dashboard, sort_keys=True),
                opts=cloud,
            )
            if args.dashboard is not None
            else None
        )
        self.outputs = {
            "alert_policies": {k: p.name for k, p in self.alert_policies.items()},
            "dashboard": self.dashboard.id if self.dashboard is not None else None,
            "cluster_rules": rules["metadata"]["name"] if rules is not None else None,
            "namespaces": list(args.namespaces),
        }
        self.register_outputs(self.outputs)

    def _apply(self, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
        meta = obj["metadata"]
        where = f"{meta['namespace']}-" if "namespace" in meta else ""
        name = f"{self._name}-{obj['kind'].lower()}-{where}{meta['name']}"
        if obj["kind"] == "NetworkPolicy":
            return k8s.networking.v1.NetworkPolicy(name, metadata=meta, spec=obj["spec"], opts=opts)
        return k8s.apiextensions.CustomResource(
            name,
            api_version=obj["apiVersion"],
            kind=obj["kind"],
            metadata=meta,
            spec=obj["spec"],
            opts=opts,
        )
