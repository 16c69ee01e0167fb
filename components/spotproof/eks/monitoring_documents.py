"""What ``spotproof:eks:Monitoring`` hands Amazon Managed Service for Prometheus (AMP), as
plain data: the managed collector's scrape configuration, the alert manager definition,
what an alert topic's policy must grant and the work queue's age alarm. Tests read them directly.

Facts they rely on:

- The collector takes a Prometheus configuration limited to ``global``, ``scrape_config``,
  ``static_config``, ``relabel_config``, ``metric_relabel_configs`` and
  ``kubernetes_sd_config``; it scrapes no more often than every 30 seconds, and resolves no
  name but the API server's, so targets come from Kubernetes discovery, by IP
  (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html,
  "Scraper configuration").
- The access entry AMP creates for a collector lets it get, list and watch ``pods`` (among
  others), not ``endpointslices`` (same page, "Access entry policy created"): both jobs
  discover with the ``pod`` role.
- Pod discovery yields one target per declared container port, with
  ``__meta_kubernetes_pod_label_<name>``, ``..._labelpresent_<name>``,
  ``..._container_port_name``, ``..._container_name`` and ``..._phase``; label names are
  sanitized to ``[a-zA-Z0-9_]`` (``spotproof.dev/target-class`` reads
  ``spotproof_dev_target_class``). Regexes are anchored; ``keep`` drops targets whose
  joined source labels do not match, ``drop`` those that do
  (https://prometheus.io/docs/prometheus/latest/configuration/configuration/,
  ``<kubernetes_sd_config>`` and ``<relabel_config>``).
- kube-state-metrics' series carry the ``namespace`` and ``pod`` of the object they
  describe; ``honor_labels`` keeps them rather than the scraped pod's (same page,
  ``honor_labels``).
- AMP's alert manager definition keeps the Alertmanager configuration, as text, under
  ``alertmanager_config``; ``repeat_interval`` counts at most five days
  (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-alertmanager-config.html).
  Its only receiver is SNS, a topic of the same account; an ``sns_configs`` entry takes
  ``topic_arn`` and ``sigv4`` with a ``region``, and neither ``api_url`` nor
  ``http_config``. Without a ``subject`` the default one, built from every label, may be too
  long for SNS
  (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-alertmanager-receiver-config.html).
- AMP publishes only where the topic's policy allows ``aps.amazonaws.com``
  ``sns:Publish`` and ``sns:GetTopicAttributes``, conditioned on the workspace's ARN and the
  account against the confused deputy
  (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-alertmanager-receiver-AMPpermission.html);
  CloudWatch alarms publish as ``cloudwatch.amazonaws.com``
  (https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger).
- The collector creates a network interface in each subnet it is given (the cluster's)
  and scrapes through them
  (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector.html), so on the
  wire its address is one of the VPC's. The workload namespaces deny ingress by default
  (``kube.network_policy.isolate_namespace``); a NetworkPolicy ``ipBlock`` is how a
  source outside the cluster's pods is admitted
  (https://kubernetes.io/docs/concepts/services-networking/network-policies/). The VPC
  CNI's policy controller resolves a named port in an ingress rule whose peer is an
  ``ipBlock`` since aws/amazon-network-policy-controller-k8s#92 (merged March 2024,
  fixing #81).
- ``AWS/SQS`` ``ApproximateAgeOfOldestMessage`` is in seconds, per ``QueueName``, reported
  only while the queue holds a message
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from spotproof import scheduling
from spotproof.catalog.eks import SHORTEST_SCRAPE_SECONDS
from spotproof.eks import iam_documents
from spotproof.eks.iam_documents import Document
from spotproof.kube.baseline import MANAGED_BY
from spotproof.observability.cloud_reclaims import KARPENTER_DISRUPTED
from spotproof.observability.promql import label_name
from spotproof.runtime.metrics import names

WORKLOAD_JOB = "spotproof"
KUBE_STATE_METRICS_JOB = "kube-state-metrics"
KARPENTER_JOB = "karpenter"
KARPENTER_APP = "karpenter"
KARPENTER_PORT = "http-metrics"
TARGET_CLASS = "target_class"
"""The target label a workload's series carry its pod's target class in."""

AMP_PRINCIPAL = "aps.amazonaws.com"
CLOUDWATCH_PRINCIPAL = "cloudwatch.amazonaws.com"
ALERT_RECEIVER = "sns"
ALERT_SUBJECT = "spotproof {{ .Status }}: {{ .GroupLabels.alertname }}"
"""Short, and the same for every alert of a group: SNS subjects are limited in length."""

TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:([a-z0-9-]+):(\d{12}):[A-Za-z0-9_-]{1,256}$")
"""``arn:<partition>:sns:<region>:<account>:<name>``; a standard topic's name is letters,
digits, ``-`` and ``_``, at most 256 (AMP delivers to standard topics only)."""

COLLECTOR_INGRESS = "allow-metrics-scrape"
"""The NetworkPolicy letting the collector into a workload namespace."""

QUEUE_AGE_METRIC = "ApproximateAgeOfOldestMessage"
QUEUE_AGE_PERIOD_SECONDS = 60
QUEUE_AGE_PERIODS = 3
"""Three one-minute maxima over the threshold: the age only grows while nothing takes the
oldest item, so three in a row is a queue that is stuck, not a burst."""


class _BlockText(yaml.SafeDumper):
    """Writes text of several lines as a ``|`` block, as AMP's examples show it."""


_BlockText.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def _keep(source: str, regex: str) -> dict[str, Any]:
    return {"source_labels": [source], "regex": regex, "action": "keep"}


def _copy(source: str, target: str) -> dict[str, Any]:
    return {"source_labels": [source], "target_label": target, "action": "replace"}


def workload_job() -> dict[str, Any]:
    """Every running container port named ``names.PORT_NAME`` of a pod that carries
    ``scheduling.TARGET_CLASS_LABEL``: each spotproof workload's, nothing else's, on
    whatever port number its manifest chose. Its series are labelled with the pod's
    namespace, name, container and target class."""
    label = label_name(scheduling.TARGET_CLASS_LABEL)
    return {
        "job_name": WORKLOAD_JOB,
        "metrics_path": names.METRICS_PATH,
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [
            _keep(f"__meta_kubernetes_pod_labelpresent_{label}", "true"),
            _keep("__meta_kubernetes_pod_container_port_name", names.PORT_NAME),
            # A finished pod keeps its ports in its spec but serves nothing.
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Succeeded|Failed",
                "action": "drop",
            },
            _copy("__meta_kubernetes_namespace", "namespace"),
            _copy("__meta_kubernetes_pod_name", "pod"),
            _copy("__meta_kubernetes_pod_container_name", "container"),
            _copy(f"__meta_kubernetes_pod_label_{label}", TARGET_CLASS),
        ],
    }


def kube_state_metrics_job(namespace: str, app_name: str, port_name: str) -> dict[str, Any]:
    """kube-state-metrics' metrics port, found as its pod in ``namespace`` labelled
    ``app.kubernetes.io/name: <app_name>``, its own labels kept."""
    return {
        "job_name": KUBE_STATE_METRICS_JOB,
        "honor_labels": True,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            _keep("__meta_kubernetes_pod_label_app_kubernetes_io_name", app_name),
            _keep("__meta_kubernetes_pod_container_port_name", port_name),
        ],
    }


def karpenter_job(namespace: str) -> dict[str, Any]:
    """Karpenter's controller pods in ``namespace`` (the chart's ``http-metrics`` port,
    plain HTTP, and ``app.kubernetes.io/name: karpenter`` on every pod: aws/
    karpenter-provider-aws v1.6.3 ``charts/karpenter/templates/deployment.yaml`` and
    ``_helpers.tpl``), keeping only the spot interruptions counted per NodeClaim
    (``observability.cloud_reclaims``): a controller serves hundreds of series, and AMP
    bills each sample."""
    return {
        "job_name": KARPENTER_JOB,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            _keep("__meta_kubernetes_pod_label_app_kubernetes_io_name", KARPENTER_APP),
            _keep("__meta_kubernetes_pod_container_port_name", KARPENTER_PORT),
        ],
        "metric_relabel_configs": [_keep("__name__", KARPENTER_DISRUPTED)],
    }


def scrape_configuration(
    interval_seconds: int,
    kube_state_metrics: dict[str, Any],
    karpenter: dict[str, Any] | None = None,
) -> str:
    """The collector's configuration YAML: spotproof's pods, kube-state-metrics and, given
    its job, Karpenter."""
    if interval_seconds < SHORTEST_SCRAPE_SECONDS:
        raise ValueError(
            f"scrape interval {interval_seconds}s: Amazon Managed Service for Prometheus "
            f"collectors scrape at most every {SHORTEST_SCRAPE_SECONDS}s; allowed: "
            f"{SHORTEST_SCRAPE_SECONDS} seconds or more"
        )
    config = {
        "global": {"scrape_interval": f"{interval_seconds}s"},
        "scrape_configs": [
            workload_job(),
            kube_state_metrics,
            *([karpenter] if karpenter is not None else []),
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def collector_ingress_metadata(namespace: str) -> dict[str, Any]:
    """The collector's NetworkPolicy's metadata, known before the VPC's ranges are."""
    return {"name": COLLECTOR_INGRESS, "namespace": namespace, "labels": MANAGED_BY}


def collector_ingress(namespace: str, vpc_cidrs: Sequence[str]) -> dict[str, Any]:
    """The NetworkPolicy letting the collector, from anywhere in the VPC (``vpc_cidrs``),
    reach the ``names.PORT_NAME`` port of spotproof's pods in ``namespace``, and nothing
    else of theirs. Other addresses of the VPC reach that port too: a NetworkPolicy cannot
    name the collector's interfaces, which AMP creates and replaces itself. The metrics
    carry no secret."""
    if not vpc_cidrs:
        # A rule with no peers admits every source.
        raise ValueError(
            f"no VPC address range to admit the collector from in namespace {namespace}; "
            "allowed: one CIDR or more"
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": collector_ingress_metadata(namespace),
        "spec": {
            "podSelector": {
                "matchExpressions": [{"key": scheduling.TARGET_CLASS_LABEL, "operator": "Exists"}]
            },
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"ipBlock": {"cidr": cidr}} for cidr in vpc_cidrs],
                    "ports": [{"protocol": "TCP", "port": names.PORT_NAME}],
                }
            ],
        },
    }


def topic_region(topic_arn: str) -> str:
    """The region of an SNS topic's ARN; one clear line if it is not one."""
    match = TOPIC_ARN.match(topic_arn)
    if match is None:
        raise ValueError(
            f"alert topic {topic_arn!r} is not an SNS topic ARN; allowed: "
            "arn:aws:sns:<region>:<12-digit account>:<standard topic name>"
        )
    return match.group(1)


def alert_manager_definition(topic_arns: Sequence[str]) -> str:
    """AMP's alert manager definition: every alert to each of ``topic_arns`` (one
    ``sns_configs`` entry per topic), grouped by alert name, repeated every four hours while
    it fires, and once more when it resolves (``send_resolved`` is on by default for SNS)."""
    if not topic_arns:
        raise ValueError("an alert manager needs at least one topic to route to")
    alertmanager = {
        "route": {
            "receiver": ALERT_RECEIVER,
            "group_by": ["alertname"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
        "receivers": [
            {
                "name": ALERT_RECEIVER,
                "sns_configs": [
                    {
                        "topic_arn": topic_arn,
                        "sigv4": {"region": topic_region(topic_arn)},
                        "subject": ALERT_SUBJECT,
                    }
                    for topic_arn in topic_arns
                ],
            }
        ],
    }
    config = yaml.safe_dump(alertmanager, sort_keys=False)
    return yaml.dump({"alertmanager_config": config}, Dumper=_BlockText, sort_keys=False)


def topic_grants(topic_arn: str, *, workspace_arn: str, alarm_arns: str, account: str) -> Document:
    """The statements a topic's policy needs before anything spotproof renders can publish
    to it: one workspace's alert manager, and the CloudWatch alarms matching
    ``alarm_arns``. The topic is its owner's, so these are added to its policy by them: a
    topic policy is set whole, and setting it would drop what the owner granted."""
    return iam_documents.document(
        {
            "Sid": "AmpAlertManagerPublishes",
            "Effect": "Allow",
            "Principal": {"Service": AMP_PRINCIPAL},
            "Action": ["sns:Publish", "sns:GetTopicAttributes"],
            "Resource": topic_arn,
            "Condition": {
                "ArnEquals": {"aws:SourceArn": workspace_arn},
                "StringEquals": {"aws:SourceAccount": account},
            },
        },
        {
            "Sid": "CloudWatchAlarmsPublish",
            "Effect": "Allow",
            "Principal": {"Service": CLOUDWATCH_PRINCIPAL},
            "Action": "sns:Publish",
            "Resource": topic_arn,
            "Condition": {
                "ArnLike": {"aws:SourceArn": alarm_arns},
                "StringEquals": {"aws:SourceAccount": account},
            },
        },
    )


def queue_age_alarm(threshold_minutes: int) -> dict[str, Any]:
    """``aws.cloudwatch.MetricAlarm`` arguments but the queue's ``dimensions``: the work
    queue's oldest item has waited longer than ``threshold_minutes``. An empty queue
    reports no age, which is not a breach."""
    whole = isinstance(threshold_minutes, int) and not isinstance(threshold_minutes, bool)
    if not whole or threshold_minutes <= 0:
        raise ValueError(
            f"queue age threshold {threshold_minutes!r} minutes; allowed: a whole number of "
            "minutes above 0"
        )
    return {
        "namespace": "AWS/SQS",
        "metric_name": QUEUE_AGE_METRIC,
        "statistic": "Maximum",
        "period": QUEUE_AGE_PERIOD_SECONDS,
        "evaluation_periods": QUEUE_AGE_PERIODS,
        "datapoints_to_alarm": QUEUE_AGE_PERIODS,
        "comparison_operator": "GreaterThanThreshold",
        "threshold": threshold_minutes * 60,
        "treat_missing_data": "notBreaching",
        "alarm_description": (
            f"The oldest item of the work queue has waited more than {threshold_minutes} "
            "minutes: workers are not taking work, or keep handing it back."
        ),
    }
