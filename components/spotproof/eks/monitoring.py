"""``spotproof:eks:Monitoring``: an EKS stack's metrics, alerts and alarms, in Amazon Managed
Service for Prometheus (AMP).

What it builds: a workspace; spotproof's rule groups as one rule groups namespace; an alert
manager that sends every alert to the stack's SNS topics; AMP's managed collector, scraping
spotproof's pods and kube-state-metrics (which this component runs, EKS ships none); in
each workload namespace, a NetworkPolicy that lets the collector through that namespace's
default deny; and a CloudWatch alarm on the work queue's oldest item, a metric AMP never
sees. The documents
it hands AMP, and the facts they rest on, are in ``monitoring_documents``.

What costs money, so that a dev stack leaves it off
(https://aws.amazon.com/prometheus/pricing/): AMP bills every sample ingested, the samples
stored and the query samples processed; the managed collector bills every hour it is on,
whether or not anything runs, and every sample it collects. Samples grow with pods times
series per pod divided by the scrape interval, which is why the interval defaults to a
minute and kube-state-metrics watches a few resources only. The queue alarm is a standard
CloudWatch alarm, billed per alarm-month; SNS bills per notification.

How the collector reaches the cluster:

- it needs the cluster's *private* endpoint, a VPC with DNS, and subnets in two or more
  zones; it is attached through network interfaces in ``subnet_ids`` with
  ``security_group_ids``
  (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html);
- on a cluster in API authentication mode (``API`` or ``API_AND_CONFIG_MAP``), AMP creates
  the collector's access entry, with the read-only Kubernetes permissions it needs, itself
  ("Configure Amazon EKS for scraper access with access entries", same page). This
  component therefore declares no access entry or RBAC of its own: one would collide with
  AMP's (EKS gives a principal one access entry). A cluster still on the ``aws-auth``
  ConfigMap needs the page's manual steps instead;
- AMP tags the workspace ``AMPAgentlessScraper``; the workspace declares the tag itself so
  that ``pulumi up`` does not remove it (pulumi-aws ``amp.Scraper``, "Ignoring changes to
  Prometheus Workspace destination").

Amazon Managed Grafana dashboards have no resource in pulumi-aws (its ``grafana`` module
manages workspaces, their API keys, service accounts, SAML and role associations only), so
the dashboard's JSON model is an output, to import into Grafana or apply with a Grafana
provider.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import yaml

from spotproof.catalog import Cloud
from spotproof.cloud_tags import stack_tags
from spotproof.eks import monitoring_documents as documents
from spotproof.fleet.eks import EksFleet, NetworkSpec
from spotproof.kube import kube_state_metrics as ksm
from spotproof.observability.dashboards import grafana_dashboard
from spotproof.observability.model import RuleGroup, rule_file
from spotproof.observability.stack import StackMonitoring

SCRAPER_TAG = "AMPAgentlessScraper"
RULES_NAMESPACE = "spotproof"


def rules_data(groups: Sequence[RuleGroup]) -> str:
    """A rule groups namespace's ``data``: the rule file itself, as YAML
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-Ruler.html)."""
    return yaml.safe_dump(rule_file(groups), sort_keys=False)


@dataclass
class MonitoringArgs:
    cluster_arn: pulumi.Input[str]
    """The EKS cluster the collector scrapes. It must use access entries (see the module)
    and have its private endpoint on."""
    subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    """Subnets of the cluster, in two zones or more, where the collector's network
    interfaces go."""
    security_group_ids: pulumi.Input[Sequence[pulumi.Input[str]]]
    """Groups the collector's interfaces join; their members must be allowed to reach the
    pods' metrics ports. The cluster security group is: EKS allows all traffic between its
    members, the nodes among them
    (https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html)."""
    provider: k8s.Provider
    """Kubernetes provider of that cluster (kube-state-metrics and the NetworkPolicies go
    there)."""
    region: str
    namespaces: Sequence[str] = ()
    """The workload namespaces, which deny ingress by default: each gets a NetworkPolicy
    admitting the collector to spotproof's pods' metrics port
    (``monitoring_documents.collector_ingress``)."""
    vpc_cidrs: pulumi.Input[Sequence[str]] = ()
    """The address ranges of the cluster's VPC (:func:`vpc_cidrs`), where the collector's
    interfaces are; needed with ``namespaces``."""
    rule_groups: Sequence[RuleGroup] = ()
    """The alerting and recording rules (``observability.rules``); none: no namespace."""
    alert_topic_arns: Sequence[pulumi.Input[str]] = ()
    """Standard SNS topics of the stack's account and region that alerts and the queue
    alarm go to (the stack's ``monitoring.notify``). Their access policies are their
    owners': the component outputs what each must grant (``alert_topic_policies``) and
    changes none, since a topic policy is set whole. None: alerts are evaluated and notify
    no one (no alert manager); the alarm shows in CloudWatch only."""
    scrape_interval_seconds: int = 60
    """How often pods are scraped; 30 or more (the collector's floor)."""
    queue_name: pulumi.Input[str] | None = None
    """The batch work queue whose oldest item's age is alarmed on; None: no alarm."""
    queue_age_threshold_minutes: int = 30
    grafana_dashboard: Mapping[str, Any] | None = None
    """A Grafana dashboard JSON model, passed through as the ``grafana_dashboard`` output."""
    ready: Sequence[pulumi.Resource] = ()
    """What must exist before anything goes into the cluster: the system nodes
    (kube-state-metrics runs there) and ``namespaces``."""
    name_prefix: str | None = None
    """Starts the cloud names of what this component creates (the workspace's and the
    collector's alias, the alarm); default the component's name."""
    karpenter_namespace: str | None = None
    """Where the cluster's Karpenter runs, whose spot interruption count the collector
    scrapes (``monitoring_documents.karpenter_job``); None: not scraped."""


class Monitoring(pulumi.ComponentResource):
    """AMP workspace, rules, alert manager and managed collector for one EKS cluster,
    kube-state-metrics on its system pool, the collector's way into the workload
    namespaces, and the work queue's age alarm."""

    workspace_id: pulumi.Output[str]
    workspace_arn: pulumi.Output[str]
    prometheus_endpoint: pulumi.Output[str]
    """Where to query (Grafana's Prometheus data source, with SigV4)."""
    scraper_arn: pulumi.Output[str]
    alert_topic_policies: pulumi.Output[dict[str, Any]]
    """Each alert topic's ARN to the statements its policy must add
    (``monitoring_documents.topic_grants``) before AMP and the alarm can publish to it."""
    grafana_dashboard: str | None
    """The dashboard JSON model as text; None when none was given."""

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # Bad settings fail here, in one line, before anything is declared.
        scrape_configuration = documents.scrape_configuration(
            args.scrape_interval_seconds,
            documents.kube_state_metrics_job(ksm.NAMESPACE, ksm.NAME, ksm.METRICS_PORT[0]),
            documents.karpenter_job(args.karpenter_namespace)
            if args.karpenter_namespace is not None
            else None,
        )
        alarm = (
            documents.queue_age_alarm(args.queue_age_threshold_minutes)
            if args.queue_name is not None
            else None
        )
        for topic_arn in args.alert_topic_arns:
            if isinstance(topic_arn, str) and documents.topic_region(topic_arn) != args.region:
                raise ValueError(
                    f"alert topic {topic_arn} is not in the stack's region {args.region}; "
                    f"allowed: an SNS topic in {args.region}, where the workspace and the "
                    "alarm publish"
                )
        if args.namespaces and not isinstance(args.vpc_cidrs, pulumi.Output):
            documents.collector_ingress(args.namespaces[0], list(args.vpc_cidrs))

        super().__init__("spotproof:eks:Monitoring", name, None, opts)
        prefix = args.name_prefix or name
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        tags = stack_tags(pulumi.get_stack(), purpose="monitoring")

        workspace = aws.amp.Workspace(
            f"{name}-workspace",
            alias=prefix,
            region=args.region,
            tags={**tags, SCRAPER_TAG: ""},
            opts=child,
        )
        if args.rule_groups:
            aws.amp.RuleGroupNamespace(
                f"{name}-rules",
                name=RULES_NAMESPACE,
                workspace_id=workspace.id,
                data=rules_data(args.rule_groups),
                region=args.region,
                tags=tags,
                opts=child,
            )

        alarm_name = f"{prefix}-work-queue-age"
        alarm_arns = pulumi.Output.all(partition, account).apply(
            lambda parts: f"arn:{parts[0]}:cloudwatch:{args.region}:{parts[1]}:alarm:{prefix}-*"
        )
        topics = pulumi.Output.all(*args.alert_topic_arns)
        self.alert_topic_policies = pulumi.Output.all(
            topics, workspace.arn, alarm_arns, account
        ).apply(
            lambda parts: {
                topic: documents.topic_grants(
                    topic, workspace_arn=parts[1], alarm_arns=parts[2], account=parts[3]
                )
                for topic in parts[0]
            }
        )
        if args.alert_topic_arns:
            aws.amp.AlertManagerDefinition(
                f"{name}-alert-manager",
                workspace_id=workspace.id,
                definition=topics.apply(documents.alert_manager_definition),
                region=args.region,
                opts=child,
            )

        ksm.KubeStateMetrics(
            f"{name}-kube-state-metrics",
            ksm.KubeStateMetricsArgs(provider=args.provider, cloud=Cloud.EKS, ready=args.ready),
            opts=child,
        )
        cidrs = pulumi.Output.from_input(args.vpc_cidrs)
        in_cluster = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=list(args.ready)
        )
        for namespace in args.namespaces:
            k8s.networking.v1.NetworkPolicy(
                f"{name}-scrape-{namespace}",
                metadata=documents.collector_ingress_metadata(namespace),
                spec=cidrs.apply(
                    lambda c, n=namespace: documents.collector_ingress(n, list(c))["spec"]
                ),
                opts=in_cluster,
            )
        scraper = aws.amp.Scraper(
            f"{name}-scraper",
            alias=prefix,
            source={
                "eks": {
                    "cluster_arn": args.cluster_arn,
                    "subnet_ids": args.subnet_ids,
                    "security_group_ids": args.security_group_ids,
                }
            },
            destination={"amp": {"workspace_arn": workspace.arn}},
            scrape_configuration=scrape_configuration,
            region=args.region,
            tags=tags,
            opts=child,
        )

        if alarm is not None:
            aws.cloudwatch.MetricAlarm(
                f"{name}-queue-age",
                name=alarm_name,
                dimensions={"QueueName": args.queue_name},
                alarm_actions=list(args.alert_topic_arns),
                ok_actions=list(args.alert_topic_arns),
                region=args.region,
                tags=tags,
                opts=child,
                **alarm,
            )

        self.workspace_id = workspace.id
        self.workspace_arn = workspace.arn
        self.prometheus_endpoint = workspace.prometheus_endpoint
        self.scraper_arn = scraper.arn
        self.grafana_dashboard = (
            json.dumps(args.grafana_dashboard, sort_keys=True)
            if args.grafana_dashboard is not None
            else None
        )
        self.register_outputs(
            {
                "workspace_id": self.workspace_id,
                "workspace_arn": self.workspace_arn,
                "prometheus_endpoint": self.prometheus_endpoint,
                "scraper_arn": self.scraper_arn,
                "alert_topic_policies": self.alert_topic_policies,
                "grafana_dashboard": self.grafana_dashboard,
            }
        )

    @property
    def stack_outputs(self) -> dict[str, pulumi.Input[Any]]:
        """What the stack output ``monitoring`` tells its user: where to query, what each
        alert topic's policy must add (nothing publishes until it does), and the dashboard
        to import."""
        return {
            "workspace_id": self.workspace_id,
            "prometheus_endpoint": self.prometheus_endpoint,
            "alert_topic_policies": self.alert_topic_policies,
            "grafana_dashboard": self.grafana_dashboard,
        }


def vpc_cidrs(
    network: NetworkSpec, region: str, opts: pulumi.InvokeOptions
) -> pulumi.Output[list[str]]:
    """The address ranges of the cluster's VPC: the one spotproof creates (``network.cidr``,
    its only range), or every range associated with the VPC of the stack's subnets (a
    subnet may lie in a secondary one). A cluster is given one VPC and its subnets in it
    (https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html), so the first
    subnet's VPC is theirs."""
    if not network.subnets:
        return pulumi.Output.from_input([network.cidr])
    subnet = aws.ec2.get_subnet_output(id=network.subnets[0].id, region=region, opts=opts)
    vpc = aws.ec2.get_vpc_output(id=subnet.vpc_id, region=region, opts=opts)
    return vpc.cidr_block_associations.apply(
        lambda blocks: sorted({block.cidr_block for block in blocks})
    )


def for_cluster(
    name: str,
    monitoring: StackMonitoring,
    *,
    cluster: aws.eks.Cluster,
    fleet: EksFleet,
    provider: k8s.Provider,
    region: str,
    queue_name: str | None,
    ready: Sequence[pulumi.Resource],
    name_prefix: str,
    opts: pulumi.ResourceOptions,
) -> Monitoring:
    """``monitoring`` (the stack's, ``observability.stack.stack_monitoring``) of an EKS
    cluster ``HybridCluster`` created in ``fleet.network``: the collector joins the cluster
    security group in the cluster's subnets (EKS made the one, the stack chose the others),
    and scrapes Karpenter where ``fleet.karpenter`` installs it."""
    settings = monitoring.settings
    return Monitoring(
        name,
        MonitoringArgs(
            cluster_arn=cluster.arn,
            subnet_ids=cluster.vpc_config.subnet_ids,
            security_group_ids=[cluster.vpc_config.cluster_security_group_id],
            provider=provider,
            region=region,
            namespaces=monitoring.namespaces,
            vpc_cidrs=vpc_cidrs(fleet.network, region, pulumi.InvokeOptions(parent=opts.parent)),
            rule_groups=monitoring.rule_groups,
            alert_topic_arns=settings.notify,
            scrape_interval_seconds=settings.scrape_interval_seconds,
            queue_name=queue_name,
            queue_age_threshold_minutes=settings.queue_age_minutes,
            grafana_dashboard=grafana_dashboard(monitoring.dashboard_title),
            ready=ready,
            name_prefix=name_prefix,
            karpenter_namespace=fleet.karpenter.namespace,
        ),
        opts=opts,
    )
