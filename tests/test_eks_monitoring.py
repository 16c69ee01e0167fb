"""``spotproof:eks:Monitoring``: declared alone against an existing EKS cluster, what it hands
Amazon Managed Service for Prometheus, the collector and CloudWatch; and in the EKS
stacks' real plans, what ``HybridCluster`` renders with ``spotproof:monitoring``. Read from
the recorded registrations."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from spotproof.catalog import Cloud
from spotproof.eks import monitoring_documents as documents
from spotproof.eks.monitoring import Monitoring, MonitoringArgs
from spotproof.fleet.monitoring import read_monitoring
from spotproof.kube import kube_state_metrics as ksm
from spotproof.observability.cloud_reclaims import KARPENTER_DISRUPTED
from spotproof.observability.dashboards import grafana_dashboard
from spotproof.observability.model import Rule, RuleGroup, rule_file
from spotproof.observability.stack import stack_monitoring
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.eks import OFFLINE_VPC_CIDR
from spotproof.plan.recording.offline import OFFLINE_ACCOUNT
from spotproof.policy.disruption import selects
from spotproof.runtime.metrics import names
from spotproof.scheduling import TARGET_CLASS_LABEL
from spotproof.testing import OfflineCloud, Recording, record
from tests.support import stack_config

REGION = "us-west-2"
CLOUD = OfflineCloud(region=REGION)
CLUSTER_ARN = f"arn:aws:eks:{REGION}:{CLOUD.account}:cluster/research"
TOPICS = (
    f"arn:aws:sns:{REGION}:{CLOUD.account}:oncall",
    f"arn:aws:sns:{REGION}:{CLOUD.account}:ml-platform",
)
WORKSPACE_ARN = f"arn:aws:aps:{REGION}:{CLOUD.account}:workspace/ws-monitoring-workspace"
"""The component's workspace as the faker below answers for it."""
GROUPS = (
    RuleGroup(
        "spotproof-pending",
        "1m",
        (
            Rule(record="spotproof:pending_pods:count", expr="count(kube_pod_status_phase)"),
            Rule(alert="SpotPending", expr="spotproof:pending_pods:count > 0", for_="15m"),
        ),
    ),
)
DASHBOARD = {"title": "spotproof", "panels": [{"type": "timeseries", "title": "Reclaims"}]}

WORKSPACE = "aws:amp/workspace:Workspace"
SCRAPER = "aws:amp/scraper:Scraper"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
ALERT_MANAGER = "aws:amp/alertManagerDefinition:AlertManagerDefinition"
RULES = "aws:amp/ruleGroupNamespace:RuleGroupNamespace"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
VPC_CIDRS = ("10.20.0.0/16", "100.64.0.0/16")
"""A VPC with a secondary range, where pods often get their addresses."""


def _monitoring(**changes: Any) -> Callable[[], None]:
    def program() -> None:
        settings: dict[str, Any] = {
            "cluster_arn": CLUSTER_ARN,
            "subnet_ids": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
            "security_group_ids": ["sg-0123456789abcdef0"],
            "provider": pulumi.ProviderResource("kubernetes", "existing", {"kubeconfig": "{}"}),
            "region": REGION,
            "rule_groups": GROUPS,
            "queue_name": "research-work",
            "queue_age_threshold_minutes": 45,
            "alert_topic_arns": TOPICS,
            "grafana_dashboard": DASHBOARD,
            "namespaces": ("training",),
            "vpc_cidrs": VPC_CIDRS,
            "name_prefix": "research",
            "karpenter_namespace": "karpenter",
            **changes,
        }
        monitoring = Monitoring("monitoring", MonitoringArgs(**settings))
        pulumi.export("topic_policies", monitoring.alert_topic_policies)
        pulumi.export("dashboard", monitoring.grafana_dashboard)
        pulumi.export("endpoint", monitoring.prometheus_endpoint)

    return program


@pytest.fixture(scope="module")
def notifying() -> Recording:
    """Rules, two alert topics, a work queue, one workload namespace."""
    return record(_monitoring(), stack="research", project="ml-infra", cloud=CLOUD)


@pytest.fixture(scope="module")
def bare() -> Recording:
    """No rules, no topic, no queue, no namespace."""
    program = _monitoring(
        alert_topic_arns=(),
        queue_name=None,
        rule_groups=(),
        namespaces=(),
        karpenter_namespace=None,
    )
    return record(program, stack="research", project="ml-infra", cloud=CLOUD)


def _only(recording: Recording, type_: str) -> dict[str, Any]:
    [resource] = recording.of_type(type_)
    return resource.inputs


def _scrape_jobs(recording: Recording) -> dict[str, dict[str, Any]]:
    configuration = yaml.safe_load(_only(recording, SCRAPER)["scrapeConfiguration"])
    return {job["job_name"]: job for job in configuration["scrape_configs"]}


def _relabel(target: Mapping[str, str], configs: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus's target relabeling, for the actions used here: source labels joined by
    ``;``, the regex anchored at both ends, ``keep`` and ``drop`` deciding, ``replace``
    writing ``$1`` into the target label; what is left, less the ``__`` labels, or None
    when the target is dropped
    (https://prometheus.io/docs/prometheus/latest/configuration/configuration/#relabel_config)."""
    labels = dict(target)
    for config in configs:
        value = ";".join(labels.get(source, "") for source in config["source_labels"])
        match = re.fullmatch(config.get("regex", "(.*)"), value)
        action = config.get("action", "replace")
        if (action == "keep" and not match) or (action == "drop" and match):
            return None
        if action == "replace" and match:
            labels[config["target_label"]] = match.expand(
                config.get("replacement", "$1").replace("$", "\\")
            )
    return {key: value for key, value in labels.items() if not key.startswith("__")}


def _pod_target(**overrides: str) -> dict[str, str]:
    """What pod discovery yields for a trainer's metrics port (``names.PORT_NAME``)."""
    return {
        "__meta_kubernetes_namespace": "training",
        "__meta_kubernetes_pod_name": "trainer-0",
        "__meta_kubernetes_pod_container_name": "trainer",
        "__meta_kubernetes_pod_container_port_name": names.PORT_NAME,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_label_spotproof_dev_target_class": "spot-gpu",
        "__meta_kubernetes_pod_labelpresent_spotproof_dev_target_class": "true",
        **overrides,
    }


# --- rules and alerts ---------------------------------------------------------------------


def test_rule_namespace_holds_the_given_groups_as_their_rule_file(notifying: Recording) -> None:
    namespace = _only(notifying, RULES)
    assert yaml.safe_load(namespace["data"]) == rule_file(GROUPS)
    assert namespace["workspaceId"] == "ws-monitoring-workspace"


def test_no_rule_groups_declare_no_namespace(bare: Recording) -> None:
    assert not bare.of_type(RULES)


def test_alert_manager_routes_every_alert_to_each_given_topic(notifying: Recording) -> None:
    definition = _only(notifying, ALERT_MANAGER)
    config = yaml.safe_load(yaml.safe_load(definition["definition"])["alertmanager_config"])
    [receiver] = config["receivers"]
    assert config["route"]["receiver"] == receiver["name"]
    assert "routes" not in config["route"]
    assert receiver["sns_configs"] == [
        {"topic_arn": TOPICS[0], "sigv4": {"region": REGION}, "subject": documents.ALERT_SUBJECT},
        {
            "topic_arn": TOPICS[1],
            "sigv4": {"region": REGION},
            "subject": documents.ALERT_SUBJECT,
        },
    ]


def test_without_topics_there_is_no_alert_manager(bare: Recording) -> None:
    assert not bare.of_type(ALERT_MANAGER)
    assert bare.outputs["topic_policies"] == {}


def test_bares_are_not_touched_and_what_each_must_grant_is_output(
    notifying: Recording,
) -> None:
    assert not [r for r in notifying.resources if r.type.startswith("aws:sns/")]
    policies = notifying.outputs["topic_policies"]
    assert set(policies) == set(TOPICS)
    statements = {s["Sid"]: s for s in policies[TOPICS[0]]["Statement"]}
    amp, alarms = statements["AmpAlertManagerPublishes"], statements["CloudWatchAlarmsPublish"]
    assert amp["Principal"] == {"Service": "aps.amazonaws.com"}
    assert amp["Resource"] == alarms["Resource"] == TOPICS[0]
    assert amp["Condition"] == {
        "ArnEquals": {"aws:SourceArn": WORKSPACE_ARN},
        "StringEquals": {"aws:SourceAccount": CLOUD.account},
    }
    alarm_name = _only(notifying, ALARM)["name"]
    alarm_arn = f"arn:aws:cloudwatch:{REGION}:{CLOUD.account}:alarm:{alarm_name}"
    pattern = alarms["Condition"]["ArnLike"]["aws:SourceArn"]
    assert re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), alarm_arn)


def test_queue_age_alarm_watches_the_given_queue_and_notifies_the_topics(
    notifying: Recording,
) -> None:
    alarm = _only(notifying, ALARM)
    assert (alarm["namespace"], alarm["metricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert alarm["dimensions"] == {"QueueName": "research-work"}
    assert alarm["threshold"] == 45 * 60
    assert alarm["comparisonOperator"] == "GreaterThanThreshold"
    assert alarm["treatMissingData"] == "notBreaching"
    assert alarm["alarmActions"] == alarm["okActions"] == list(TOPICS)


def test_queue_age_alarm_fires_on_three_one_minute_maxima_in_a_row(notifying: Recording) -> None:
    """One breaching minute is a burst; three in a row is a queue nothing takes from."""
    alarm = _only(notifying, ALARM)
    assert (alarm["statistic"], alarm["period"]) == ("Maximum", 60)
    assert (alarm["evaluationPeriods"], alarm["datapointsToAlarm"]) == (3, 3)


def test_no_queue_no_alarm(bare: Recording) -> None:
    assert not bare.of_type(ALARM)


# --- the collector ------------------------------------------------------------------------


def test_scraper_scrapes_the_given_cluster_into_the_workspace(notifying: Recording) -> None:
    scraper = _only(notifying, SCRAPER)
    assert scraper["source"] == {
        "eks": {
            "clusterArn": CLUSTER_ARN,
            "subnetIds": ["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
            "securityGroupIds": ["sg-0123456789abcdef0"],
        }
    }
    workspace = notifying.one(WORKSPACE, "monitoring-workspace")
    assert scraper["destination"] == {"amp": {"workspaceArn": WORKSPACE_ARN}}
    assert workspace.inputs["tags"]["AMPAgentlessScraper"] == ""


def test_workload_job_keeps_the_metrics_port_of_labelled_running_pods(
    notifying: Recording,
) -> None:
    job = _scrape_jobs(notifying)[documents.WORKLOAD_JOB]
    assert job["metrics_path"] == "/metrics"
    assert _relabel(_pod_target(), job["relabel_configs"]) == {
        "namespace": "training",
        "pod": "trainer-0",
        "container": "trainer",
        "target_class": "spot-gpu",
    }


@pytest.mark.parametrize(
    "target",
    [
        {"__meta_kubernetes_pod_container_port_name": "http"},
        {
            "__meta_kubernetes_pod_label_spotproof_dev_target_class": "",
            "__meta_kubernetes_pod_labelpresent_spotproof_dev_target_class": "",
        },
        {"__meta_kubernetes_pod_phase": "Succeeded"},
    ],
    ids=["another-port", "unlabelled-pod", "finished-pod"],
)
def test_workload_job_drops_every_other_target(
    notifying: Recording, target: dict[str, str]
) -> None:
    job = _scrape_jobs(notifying)[documents.WORKLOAD_JOB]
    assert _relabel(_pod_target(**target), job["relabel_configs"]) is None


def test_kube_state_metrics_job_finds_the_deployed_metrics_port_only(notifying: Recording) -> None:
    job = _scrape_jobs(notifying)[documents.KUBE_STATE_METRICS_JOB]
    deployment = notifying.one(
        "kubernetes:apps/v1:Deployment", "monitoring-kube-state-metrics-deployment"
    ).inputs
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    targets = {
        port["name"]: {
            "__meta_kubernetes_namespace": deployment["metadata"]["namespace"],
            "__meta_kubernetes_pod_container_port_name": port["name"],
            **{
                "__meta_kubernetes_pod_label_" + re.sub(r"\W", "_", key): value
                for key, value in pod["metadata"]["labels"].items()
            },
        }
        for port in container["ports"]
    }
    kept = {name for name, t in targets.items() if _relabel(t, job["relabel_configs"]) is not None}
    assert kept == {"http-metrics"}
    assert job["honor_labels"] is True
    assert job["kubernetes_sd_configs"] == [
        {"role": "pod", "namespaces": {"names": [deployment["metadata"]["namespace"]]}}
    ]


def _karpenter_target(**overrides: str) -> dict[str, str]:
    """Pod discovery's target for a Karpenter controller's port, as its chart labels it
    (aws/karpenter-provider-aws v1.6.3 ``charts/karpenter/templates``: ``deployment.yaml``
    names the port, ``_helpers.tpl`` the selector labels)."""
    return {
        "__meta_kubernetes_namespace": "karpenter",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "karpenter",
        "__meta_kubernetes_pod_label_app_kubernetes_io_instance": "karpenter",
        "__meta_kubernetes_pod_container_port_name": "http-metrics",
        **overrides,
    }


def test_karpenter_job_scrapes_the_controllers_metrics_port_in_its_namespace(
    notifying: Recording,
) -> None:
    job = _scrape_jobs(notifying)[documents.KARPENTER_JOB]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["karpenter"]}}]
    assert _relabel(_karpenter_target(), job["relabel_configs"]) is not None
    health = _karpenter_target(__meta_kubernetes_pod_container_port_name="http")
    assert _relabel(health, job["relabel_configs"]) is None


def test_karpenter_job_keeps_the_spot_interruption_count_alone(notifying: Recording) -> None:
    """A controller serves hundreds of series; AMP bills each sample."""
    configs = _scrape_jobs(notifying)[documents.KARPENTER_JOB]["metric_relabel_configs"]
    kept = {
        name
        for name in (KARPENTER_DISRUPTED, "karpenter_nodes_allocatable", "go_goroutines")
        if _relabel({"__name__": name}, configs) is not None
    }
    assert kept == {KARPENTER_DISRUPTED}


def test_without_karpenters_namespace_karpenter_is_not_scraped(bare: Recording) -> None:
    assert documents.KARPENTER_JOB not in _scrape_jobs(bare)


def test_eks_prod_scrapes_its_karpenter_where_the_stack_installs_it(eks_prod: PlanResult) -> None:
    configuration = yaml.safe_load(_only(eks_prod.recording, SCRAPER)["scrapeConfiguration"])
    (job,) = (j for j in configuration["scrape_configs"] if j["job_name"] == "karpenter")
    namespace = eks_prod.spec.platform.karpenter.namespace
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": [namespace]}}]


def test_scrape_configuration_is_a_valid_prometheus_configuration(
    notifying: Recording, tmp_path: Path
) -> None:
    """Debian's promtool is built without Kubernetes discovery, so each job's discovery is
    swapped for a static target; the rest is parsed as the collector receives it."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed: `apt-get install prometheus`")
    configuration = yaml.safe_load(_only(notifying, SCRAPER)["scrapeConfiguration"])
    assert configuration["global"] == {"scrape_interval": "60s"}
    for job in configuration["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs")
        job["static_configs"] = [{"targets": ["10.0.0.1:9464"]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(configuration))
    checked = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- the collector's way into the workload namespaces -------------------------------------


def _collector_policy(recording: Recording, namespace: str) -> dict[str, Any]:
    [policy] = [
        r.inputs
        for r in recording.of_type(NETWORK_POLICY)
        if r.inputs["metadata"]["namespace"] == namespace
        and r.inputs["metadata"]["name"] == documents.COLLECTOR_INGRESS
    ]
    return policy


def test_collector_may_reach_the_metrics_port_from_the_vpc_only(notifying: Recording) -> None:
    spec = _collector_policy(notifying, "training")["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    [rule] = spec["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": cidr}} for cidr in VPC_CIDRS]
    assert rule["ports"] == [{"protocol": "TCP", "port": names.PORT_NAME}]


def test_collector_policy_selects_the_pods_the_workload_job_scrapes(
    notifying: Recording,
) -> None:
    selector = _collector_policy(notifying, "training")["spec"]["podSelector"]
    assert selects(selector, {TARGET_CLASS_LABEL: "spot-gpu", "app": "trainer"})
    assert not selects(selector, {"app": "trainer"})


def test_without_namespaces_no_network_policy(bare: Recording) -> None:
    assert not bare.of_type(NETWORK_POLICY)


# --- kube-state-metrics -------------------------------------------------------------------


def test_kube_state_metrics_exports_the_target_class_label_and_is_pinned(
    notifying: Recording,
) -> None:
    deployment = notifying.one(
        "kubernetes:apps/v1:Deployment", "monitoring-kube-state-metrics-deployment"
    ).inputs
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0"
    allowlist = next(a for a in container["args"] if a.startswith("--metric-labels-allowlist="))
    assert "pods=[spotproof.dev/target-class]" in allowlist.split("=", 1)[1].split(",")


def test_kube_state_metrics_runs_on_the_system_pool(notifying: Recording) -> None:
    spec = notifying.one(
        "kubernetes:apps/v1:Deployment", "monitoring-kube-state-metrics-deployment"
    ).inputs["spec"]["template"]["spec"]
    assert spec["nodeSelector"]["spotproof.dev/pool-class"] == "system"
    assert {
        "key": "CriticalAddonsOnly",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in spec["tolerations"]


def test_kube_state_metrics_may_list_exactly_the_resources_it_watches(
    notifying: Recording,
) -> None:
    role = notifying.one(
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "monitoring-kube-state-metrics-role"
    ).inputs
    granted = {r for rule in role["rules"] for r in rule["resources"]}
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"list", "watch"}
    flag = next(a for a in ksm.arguments() if a.startswith("--resources="))
    assert granted == set(flag.removeprefix("--resources=").split(","))
    assert "secrets" not in granted


# --- the component ------------------------------------------------------------------------


def test_every_resource_hangs_under_the_component(notifying: Recording) -> None:
    [component] = notifying.of_type("spotproof:eks:Monitoring")
    [exporter] = notifying.of_type("spotproof:kube:KubeStateMetrics")
    assert exporter.parent == component.urn
    for resource in notifying.resources:
        if resource.type.startswith("aws:") or resource.type == NETWORK_POLICY:
            assert resource.parent == component.urn, resource.name
        elif resource.type.startswith("kubernetes:"):
            assert resource.parent == exporter.urn, resource.name


def test_grafana_dashboard_is_output_as_its_json_model(notifying: Recording) -> None:
    assert json.loads(notifying.outputs["dashboard"]) == DASHBOARD


@pytest.mark.parametrize(
    ("change", "allowed"),
    [
        ({"scrape_interval_seconds": 15}, "allowed: 30 seconds or more"),
        ({"queue_age_threshold_minutes": 0}, "allowed: a whole number of minutes above 0"),
        ({"alert_topic_arns": ("oncall",)}, "allowed: arn:aws:sns:"),
        ({"alert_topic_arns": (f"{TOPICS[0]}.fifo",)}, "allowed: arn:aws:sns:"),
        (
            {"alert_topic_arns": (f"arn:aws:sns:us-east-1:{CLOUD.account}:oncall",)},
            f"allowed: an SNS topic in {REGION}",
        ),
        ({"vpc_cidrs": ()}, "allowed: one CIDR or more"),
    ],
    ids=["scrape-interval", "queue-age", "topic-arn", "fifo-topic", "other-region", "no-cidr"],
)
def test_bad_settings_are_refused_in_one_line(change: dict[str, Any], allowed: str) -> None:
    with pytest.raises(ValueError, match=re.escape(allowed)) as refused:
        record(_monitoring(**change), stack="research", project="ml-infra", cloud=CLOUD)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("seconds", [29, 30])
def test_the_component_takes_exactly_the_scrape_intervals_an_eks_stack_accepts(
    seconds: int,
) -> None:
    read = read_monitoring(Cloud.EKS, disposable=False)
    try:
        read("spotproof:monitoring", {"scrapeIntervalSeconds": seconds})
    except ValueError:
        stack_accepts = False
    else:
        stack_accepts = True
    try:
        documents.scrape_configuration(seconds, {"job_name": "kube-state-metrics"})
    except ValueError:
        component_accepts = False
    else:
        component_accepts = True
    assert component_accepts == stack_accepts == (seconds >= 30)


# --- in the stacks: HybridCluster with spotproof:monitoring --------------------------------

_MONITORED_DEV: list[PlanResult] = []
MONITORED_DEV_TOPIC = f"arn:aws:sns:us-west-2:{OFFLINE_ACCOUNT}:oncall"


@pytest.fixture
def monitored_dev(make_project: Callable[..., Path]) -> PlanResult:
    """eks-dev (a VPC of its own, batch work) with monitoring turned on and an alert topic;
    planned once for the module."""
    if not _MONITORED_DEV:
        config = stack_config("eks-dev")
        config["spotproof:monitoring"] = {
            "enabled": True,
            "notify": [MONITORED_DEV_TOPIC],
            "queueAgeMinutes": 45,
        }
        _MONITORED_DEV.append(run_plan("eks-test", make_project(config, stack="eks-test")))
    return _MONITORED_DEV[0]


def test_eks_prod_monitors_its_cluster_from_the_clusters_subnets(eks_prod: PlanResult) -> None:
    recording = eks_prod.recording
    [component] = recording.of_type("spotproof:eks:Monitoring")
    [cluster] = recording.of_type("spotproof:eks:HybridCluster")
    assert component.parent == cluster.urn
    subnets = recording.one("aws:eks/cluster:Cluster", "eks-prod").inputs["vpcConfig"]["subnetIds"]
    assert _only(recording, SCRAPER)["source"] == {
        "eks": {
            "clusterArn": f"arn:aws:eks:us-east-1:{OFFLINE_ACCOUNT}:cluster/eks-prod",
            "subnetIds": subnets,
            "securityGroupIds": ["sg-0offline"],
        }
    }


def test_eks_prod_evaluates_the_stacks_rules_at_its_scrape_interval(eks_prod: PlanResult) -> None:
    monitoring = stack_monitoring(eks_prod.spec)
    assert monitoring is not None
    assert yaml.safe_load(_only(eks_prod.recording, RULES)["data"]) == rule_file(
        monitoring.rule_groups
    )
    configuration = yaml.safe_load(_only(eks_prod.recording, SCRAPER)["scrapeConfiguration"])
    assert configuration["global"] == {"scrape_interval": "30s"}


def test_eks_prod_exports_where_to_query_and_its_dashboard(eks_prod: PlanResult) -> None:
    exported = eks_prod.recording.outputs["monitoring"]
    workspace_id = "ws-eks-prod-monitoring-workspace"
    assert exported["workspace_id"] == workspace_id
    assert exported["prometheus_endpoint"].endswith(f"/workspaces/{workspace_id}/")
    assert json.loads(exported["grafana_dashboard"]) == grafana_dashboard("spotproof eks-prod")
    assert exported["alert_topic_policies"] == {}


def test_eks_prod_lets_the_collector_reach_the_smoke_trainers_metrics(
    eks_prod: PlanResult,
) -> None:
    job = eks_prod.recording.one("kubernetes:batch/v1:Job", "eks-prod-smoke-job").inputs
    pod = job["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert names.PORT_NAME in {port.get("name") for port in container["ports"]}
    policy = _collector_policy(eks_prod.recording, job["metadata"]["namespace"])
    assert selects(policy["spec"]["podSelector"], pod["metadata"]["labels"])
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": OFFLINE_VPC_CIDR}}]


def test_collector_policy_waits_for_its_namespace(eks_prod: PlanResult) -> None:
    policy = eks_prod.recording.one(NETWORK_POLICY, "eks-prod-monitoring-scrape-spotproof")
    namespace = eks_prod.recording.one(
        "kubernetes:core/v1:Namespace", "eks-prod-baseline-namespace"
    )
    assert namespace.urn in policy.dependencies


def test_eks_prod_plan_passes_with_monitoring(eks_prod: PlanResult) -> None:
    assert [v.message for v in eks_prod.violations] == []


def test_disposable_eks_dev_has_no_monitoring(eks_dev: PlanResult) -> None:
    assert not eks_dev.recording.of_type("spotproof:eks:Monitoring")
    assert not [r for r in eks_dev.recording.resources if r.type.startswith("aws:amp/")]
    assert "monitoring" not in eks_dev.recording.outputs


def test_a_created_vpc_admits_the_collector_from_its_range(monitored_dev: PlanResult) -> None:
    namespace = monitored_dev.spec.batch.namespace
    [rule] = _collector_policy(monitored_dev.recording, namespace)["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.40.0.0/16"}}]


def test_queue_age_alarm_watches_the_stacks_work_queue(monitored_dev: PlanResult) -> None:
    queue = monitored_dev.recording.one("aws:sqs/queue:Queue", "eks-test-work-queue").inputs
    alarm = _only(monitored_dev.recording, ALARM)
    assert alarm["dimensions"] == {"QueueName": queue["name"]}
    assert alarm["threshold"] == 45 * 60
    assert alarm["alarmActions"] == [MONITORED_DEV_TOPIC]


def test_alerts_go_to_the_stacks_topics_and_their_grants_are_exported(
    monitored_dev: PlanResult,
) -> None:
    definition = _only(monitored_dev.recording, ALERT_MANAGER)["definition"]
    config = yaml.safe_load(yaml.safe_load(definition)["alertmanager_config"])
    [receiver] = config["receivers"]
    assert [c["topic_arn"] for c in receiver["sns_configs"]] == [MONITORED_DEV_TOPIC]
    policies = monitored_dev.recording.outputs["monitoring"]["alert_topic_policies"]
    assert set(policies) == {MONITORED_DEV_TOPIC}


def test_batch_rules_are_evaluated_where_there_is_batch_work(monitored_dev: PlanResult) -> None:
    groups = yaml.safe_load(_only(monitored_dev.recording, RULES)["data"])["groups"]
    assert "spotproof-batch" in {group["name"] for group in groups}


def test_monitored_dev_plan_passes(monitored_dev: PlanResult) -> None:
    assert [v.message for v in monitored_dev.violations] == []
