"""``spotproof:aks:Monitoring`` under Pulumi mocks: what Azure Monitor managed Prometheus is
given (the workspace, the collection rule and its association, the rule groups, the
PodMonitor and the policies that let the add-on scrape) and what the cluster must set to run
the add-on; then the AKS stacks' real plans: aks-prod monitored, aks-dev not."""

from __future__ import annotations

import json
import re
from functools import cache

import pulumi
import pulumi_azure_native as azure
import pulumi_kubernetes as k8s
import pytest
import yaml

from spotproof import plan as _spotproof
from spotproof.aks.monitoring import Monitoring, MonitoringArgs
from spotproof.aks.monitoring_documents import (
    azure_rule,
    cluster_monitor_profile,
    group_interval,
    iso8601_duration,
    pod_monitor,
    severity,
)
from spotproof.catalog import Cloud
from spotproof.fleet.monitoring import Monitoring as MonitoringSettings
from spotproof.observability.model import Rule, RuleGroup
from spotproof.observability.rules import rule_groups
from spotproof.observability.stack import stack_monitoring
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.schemas import ama_metrics
from spotproof.runtime.metrics import names
from spotproof.scheduling import TARGET_CLASS_LABEL
from spotproof.testing import Recording, Resource, record
from tests.support import REPO, stack_config

CLUSTER_ID = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/research/providers/"
    "Microsoft.ContainerService/managedClusters/research"
)
ACTION_GROUPS = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/ops/providers/"
    "microsoft.insights/actionGroups/oncall",
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/ops/providers/"
    "microsoft.insights/actionGroups/chat",
)
STALL = Rule(
    alert="CheckpointStalled",
    expr="time() - spotproof_last_commit_timestamp_seconds > 3 * spotproof_interval_seconds",
    for_="10m",
    labels={"severity": "warning"},
    annotations={"summary": "No checkpoint committed for three intervals"},
)
RECLAIMS = Rule(
    record="namespace:spotproof_preemptions:rate1h",
    expr="sum by (namespace) (rate(spotproof_stop_signals_total[1h]))",
)
LOST = Rule(alert="StepsLost", expr="increase(spotproof_steps_lost_total[1h]) > 100")
GROUPS = (
    RuleGroup("checkpoints", "1m", (RECLAIMS, STALL)),
    RuleGroup("batch", "5m", (LOST,)),
)
DASHBOARD = {"title": "spotproof", "panels": [{"title": "Reclaims"}]}
NAMESPACES = ("training", "batch")
RULE_GROUP = "azure-native:alertsmanagement:PrometheusRuleGroup"
COLLECTION_RULE = "azure-native:monitor:DataCollectionRule"
POD_MONITOR = "kubernetes:azmonitoring.coreos.com/v1:PodMonitor"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE = "kubernetes:core/v1:Namespace"


def _monitoring(action_group_ids: tuple[str, ...] = ACTION_GROUPS) -> Recording:
    def program() -> None:
        kubernetes = pulumi.ProviderResource("kubernetes", "research", {"kubeconfig": "{}"})
        namespaces = [
            k8s.core.v1.Namespace(
                ns, metadata={"name": ns}, opts=pulumi.ResourceOptions(provider=kubernetes)
            )
            for ns in NAMESPACES
        ]
        monitoring = Monitoring(
            "mon",
            MonitoringArgs(
                resource_group_name="research",
                location="eastus2",
                cluster_id=pulumi.Output.from_input(CLUSTER_ID),
                cluster_name=pulumi.Output.from_input("research"),
                provider=kubernetes,
                rule_groups=GROUPS,
                namespaces=NAMESPACES,
                action_group_ids=action_group_ids,
                grafana_dashboard=DASHBOARD,
                ready=namespaces,
                name_prefix="research",
            ),
        )
        pulumi.export("workspace", monitoring.workspace_id)
        pulumi.export("dashboard", monitoring.grafana_dashboard_json)

    return record(program, stack="research", project="platform")


@cache
def _recording() -> Recording:
    return _monitoring()


def _rules(group: str, recording: Recording | None = None) -> list[dict]:
    recording = recording or _recording()
    return recording.one(RULE_GROUP, f"mon-{group}").inputs["rules"]


def _one(type_: str) -> Resource:
    [resource] = _recording().of_type(type_)
    return resource


def test_each_rule_group_is_one_azure_rule_group_on_the_workspace_for_the_cluster() -> None:
    recording = _recording()
    groups = {g.inputs["ruleGroupName"]: g.inputs for g in recording.of_type(RULE_GROUP)}
    assert sorted(groups) == ["research-batch", "research-checkpoints"]
    for group in groups.values():
        assert group["scopes"] == [recording.outputs["workspace"]]
        assert group["clusterName"] == "research"
        assert group["location"] == "eastus2"
    assert groups["research-checkpoints"]["interval"] == "PT1M"
    assert groups["research-batch"]["interval"] == "PT5M"


def test_rules_keep_their_order_and_prometheus_expressions() -> None:
    rules = _rules("checkpoints")
    assert [r.get("record") or r.get("alert") for r in rules] == [RECLAIMS.record, STALL.alert]
    assert [r["expression"] for r in rules] == [RECLAIMS.expr, STALL.expr]


def test_an_alert_waits_in_iso8601_and_notifies_every_action_group() -> None:
    alert = _rules("checkpoints")[1]
    assert alert["for"] == "PT10M"
    assert alert["severity"] == 2
    assert alert["labels"] == {"severity": "warning"}
    assert alert["annotations"] == dict(STALL.annotations)
    assert alert["actions"] == [{"actionGroupId": each} for each in ACTION_GROUPS]


def test_an_alert_without_a_severity_label_gets_azures_default() -> None:
    [alert] = _rules("batch")
    assert alert["severity"] == 3
    assert "for" not in alert


def test_a_recording_rule_carries_no_alert_fields() -> None:
    recording_rule = _rules("checkpoints")[0]
    assert recording_rule == {"record": RECLAIMS.record, "expression": RECLAIMS.expr}


def test_without_action_groups_alerts_have_no_actions() -> None:
    [alert] = _rules("batch", _monitoring(action_group_ids=()))
    assert "actions" not in alert


@pytest.mark.parametrize(
    ("prometheus", "iso"),
    [
        ("1m", "PT1M"),
        ("90s", "PT1M30S"),
        ("1h30m", "PT1H30M"),
        ("2h", "PT2H"),
        ("2d", "P2D"),
        ("1d12h", "P1DT12H"),
        ("1w", "P7D"),
        ("1500ms", None),
        ("0s", "PT0S"),
    ],
)
def test_prometheus_durations_become_iso8601(prometheus: str, iso: str | None) -> None:
    if iso is None:
        with pytest.raises(ValueError, match="allowed: whole seconds"):
            iso8601_duration(prometheus)
    else:
        assert iso8601_duration(prometheus) == iso


@pytest.mark.parametrize("duration", ["", "10", "1m1h", "5 m", "PT1M"])
def test_a_duration_prometheus_would_refuse_is_refused_in_one_line(duration: str) -> None:
    with pytest.raises(ValueError, match="allowed: units") as refused:
        iso8601_duration(duration)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("interval", ["30s", "16m", "1h"])
def test_a_group_interval_azure_does_not_evaluate_is_refused(interval: str) -> None:
    with pytest.raises(ValueError, match=f"rule group 'fast': interval {interval} .*1m to 15m"):
        group_interval(RuleGroup("fast", interval, (LOST,)))


def test_a_severity_label_azure_has_no_level_for_is_refused() -> None:
    odd = Rule(alert="Odd", expr="up == 0", labels={"severity": "urgent"})
    with pytest.raises(ValueError, match=r"alert Odd: severity label 'urgent'.*allowed: critical"):
        azure_rule(odd, ACTION_GROUPS)


def test_the_collection_rule_sends_the_prometheus_stream_to_the_workspace() -> None:
    rule = _one(COLLECTION_RULE)
    endpoint = _one("azure-native:monitor:DataCollectionEndpoint")
    inputs = rule.inputs
    assert inputs["kind"] == endpoint.inputs["kind"] == "Linux"
    [source] = inputs["dataSources"]["prometheusForwarder"]
    assert source["streams"] == ["Microsoft-PrometheusMetrics"]
    [destination] = inputs["destinations"]["monitoringAccounts"]
    assert destination["accountResourceId"] == _recording().outputs["workspace"]
    assert inputs["dataFlows"] == [
        {"streams": ["Microsoft-PrometheusMetrics"], "destinations": [destination["name"]]}
    ]
    assert endpoint.urn in rule.dependencies


def test_the_collection_rule_is_associated_with_the_cluster() -> None:
    association = _one("azure-native:monitor:DataCollectionRuleAssociation")
    assert association.inputs["resourceUri"] == CLUSTER_ID
    assert _one(COLLECTION_RULE).urn in association.dependencies


def test_the_cluster_profile_enables_the_add_on_and_allowlists_the_target_class() -> None:
    def program() -> None:
        azure.containerservice.ManagedCluster(
            "research",
            resource_group_name="research",
            azure_monitor_profile=cluster_monitor_profile(),
        )

    [cluster] = record(program, stack="research", project="platform").resources
    assert cluster.inputs["azureMonitorProfile"] == {
        "metrics": {
            "enabled": True,
            "kubeStateMetrics": {"metricLabelsAllowlist": f"pods=[{TARGET_CLASS_LABEL}]"},
        }
    }


def test_the_pod_monitor_scrapes_the_metrics_port_of_every_labelled_pod() -> None:
    monitor = _one(POD_MONITOR)
    spec = monitor.inputs["spec"]
    assert spec["selector"] == {
        "matchExpressions": [{"key": TARGET_CLASS_LABEL, "operator": "Exists"}]
    }
    assert spec["namespaceSelector"] == {"matchNames": ["batch", "training"]}
    assert monitor.inputs["metadata"]["namespace"] == "kube-system"
    [endpoint] = spec["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == (
        "metrics",
        names.METRICS_PATH,
        "30s",
    )
    assert (monitor.provider or "").startswith(
        "urn:pulumi:research::platform::pulumi:providers:kubernetes::research::"
    )


def test_the_pod_monitor_waits_for_the_association() -> None:
    association = _one("azure-native:monitor:DataCollectionRuleAssociation")
    assert association.urn in _one(POD_MONITOR).dependencies


def _relabel(target: dict[str, str], relabelings: list[dict]) -> dict[str, str]:
    """Prometheus's ``replace`` relabeling as prometheus-operator writes a PodMonitor's
    (``sourceLabels`` joined by ``;``, ``regex`` default ``(.*)`` anchored, ``replacement``
    default ``$1``), then the ``__`` labels dropped
    (https://prometheus.io/docs/prometheus/latest/configuration/configuration/#relabel_config)."""
    labels = dict(target)
    for relabeling in relabelings:
        assert relabeling.get("action", "replace") == "replace"
        value = ";".join(labels.get(name, "") for name in relabeling["sourceLabels"])
        match = re.fullmatch(relabeling.get("regex", "(.*)"), value)
        if match:
            replacement = relabeling.get("replacement", "$1").replace("$", "\\")
            labels[relabeling["targetLabel"]] = match.expand(replacement)
    return {key: value for key, value in labels.items() if not key.startswith("__")}


def test_workload_series_carry_their_pods_target_class() -> None:
    """As on EKS and GKE: the rules and dashboards split workload series by ``target_class``."""
    [endpoint] = _one(POD_MONITOR).inputs["spec"]["podMetricsEndpoints"]
    discovered = {
        "__meta_kubernetes_pod_label_spotproof_dev_target_class": "spot-gpu",
        "__meta_kubernetes_pod_labelpresent_spotproof_dev_target_class": "true",
        "namespace": "training",
        "pod": "trainer-0",
    }
    assert _relabel(discovered, endpoint["relabelings"]) == {
        "namespace": "training",
        "pod": "trainer-0",
        "target_class": "spot-gpu",
    }


def test_the_pod_monitor_is_one_the_add_ons_crd_accepts() -> None:
    assert ama_metrics.errors(pod_monitor("pods", 30, ["training"])) == []


@pytest.mark.parametrize(
    ("relabeling", "refused"),
    [
        ({"source_labels": ["a"], "targetLabel": "b"}, "relabelings[0].source_labels: unknown"),
        ({"sourceLabels": [TARGET_CLASS_LABEL], "targetLabel": "b"}, "sourceLabels: expected"),
        ({"sourceLabels": ["a"], "action": "REPLACE"}, "action: 'REPLACE'; allowed:"),
    ],
    ids=["snake-case-field", "unsanitised-source", "action-case"],
)
def test_a_relabeling_the_crd_refuses_is_named(relabeling: dict, refused: str) -> None:
    monitor = pod_monitor("pods", 30, ["training"])
    monitor["spec"]["podMetricsEndpoints"][0]["relabelings"] = [relabeling]
    [error] = ama_metrics.errors(monitor)
    assert error.startswith("spec.podMetricsEndpoints[0].relabelings[0].")
    assert refused in error


@pytest.mark.parametrize("seconds", [0, 3601])
def test_a_scrape_interval_out_of_range_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match=rf"scrape interval {seconds}s: allowed: 1 to 3600"):
        pod_monitor("pods", seconds, ["training"])


def test_every_resource_is_a_child_of_the_component() -> None:
    recording = _recording()
    [component] = recording.of_type("spotproof:aks:Monitoring")
    others = [
        r
        for r in recording.resources
        if r.custom and r.type not in ("pulumi:providers:kubernetes", NAMESPACE)
    ]
    # workspace, endpoint, rule, association, 2 groups, PodMonitor, 2 scrape policies
    assert len(others) == 9
    assert {r.parent for r in others} == {component.urn}


def test_the_dashboard_model_is_exported_as_json_for_import() -> None:
    assert json.loads(_recording().outputs["dashboard"]) == DASHBOARD


# --- the add-on's collectors reach the pods, and only them -------------------------------

AMA_METRICS = {"rsName": "ama-metrics", "kubernetes.azure.com/managedby": "aks"}
"""The labels of the collectors PodMonitor targets go to (Azure/prometheus-collector@39583fd
``otelcollector/configuration-reader-builder/main.go``, ``CollectorSelector``)."""


def _scrape_policy(namespace: str) -> Resource:
    return _recording().one(NETWORK_POLICY, f"mon-scrape-{namespace}")


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_each_workload_namespace_lets_the_add_ons_collectors_reach_the_metrics_port_only(
    namespace: str,
) -> None:
    policy = _scrape_policy(namespace).inputs
    assert policy["metadata"]["namespace"] == namespace
    assert policy["spec"] == {
        "podSelector": {"matchExpressions": [{"key": TARGET_CLASS_LABEL, "operator": "Exists"}]},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                        },
                        "podSelector": {"matchLabels": AMA_METRICS},
                    }
                ],
                "ports": [{"protocol": "TCP", "port": names.PORT_NAME}],
            }
        ],
    }


def test_the_scrape_policies_wait_for_their_namespaces() -> None:
    for namespace in NAMESPACES:
        made = _recording().one(NAMESPACE, namespace)
        assert made.urn in (_scrape_policy(namespace).dependencies or ())


@pytest.mark.parametrize("namespaces", [[], ["training", "training"]])
def test_scraped_namespaces_must_be_named_once_each(namespaces: list[str]) -> None:
    with pytest.raises(ValueError, match="allowed: at least one, each once") as refused:
        pod_monitor("pods", 30, namespaces)
    assert "\n" not in str(refused.value)


# --- severities: what the shared rules say, as Azure's levels ----------------------------


def test_every_severity_the_shared_rules_use_has_its_azure_level() -> None:
    groups = rule_groups(
        MonitoringSettings(),
        cloud=Cloud.AKS,
        assumed_reclaims_per_node_hour=0.05,
        batch_queue="work",
    )
    alerts = [rule for group in groups for rule in group.rules if rule.alert]
    levels = {rule.labels["severity"]: severity(rule) for rule in alerts}
    assert levels == {"critical": 0, "warning": 2, "info": 3}


# --- the AKS stacks ------------------------------------------------------------------------

CLUSTER = "azure-native:containerservice:ManagedCluster"
ARM_GROUP = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/aks-prod"


def test_a_monitored_stack_runs_the_add_on_on_its_cluster(aks_prod: PlanResult) -> None:
    cluster = aks_prod.recording.one(CLUSTER, "aks-prod").inputs
    assert cluster["azureMonitorProfile"] == {
        "metrics": {
            "enabled": True,
            "kubeStateMetrics": {"metricLabelsAllowlist": f"pods=[{TARGET_CLASS_LABEL}]"},
        }
    }


def test_a_disposable_stack_is_not_monitored(aks_dev: PlanResult) -> None:
    assert "azureMonitorProfile" not in aks_dev.recording.one(CLUSTER, "aks-dev").inputs
    assert not aks_dev.recording.of_type("spotproof:aks:Monitoring")
    assert not aks_dev.recording.of_type(POD_MONITOR)
    assert "monitoring" not in aks_dev.recording.outputs


def test_the_stacks_rules_are_evaluated_for_its_cluster(aks_prod: PlanResult) -> None:
    monitoring = stack_monitoring(aks_prod.spec)  # type: ignore[arg-type]
    assert monitoring is not None
    groups = {g.name: g.inputs for g in aks_prod.recording.of_type(RULE_GROUP)}
    assert sorted(groups) == sorted(f"aks-prod-monitoring-{g.name}" for g in monitoring.rule_groups)
    workspace = aks_prod.recording.outputs["monitoring"]["workspace_id"]
    assert workspace == f"{ARM_GROUP}/providers/Microsoft.Monitor/accounts/aks-prod"
    for group in groups.values():
        assert (group["scopes"], group["clusterName"]) == ([workspace], "aks-prod")
    association = aks_prod.recording.one(
        "azure-native:monitor:DataCollectionRuleAssociation", "aks-prod-monitoring-association"
    )
    assert association.inputs["resourceUri"] == (
        f"{ARM_GROUP}/providers/Microsoft.ContainerService/managedClusters/aks-prod"
    )


def test_the_stacks_workload_namespaces_are_scraped_and_let_the_collectors_in(
    aks_prod: PlanResult,
) -> None:
    monitoring = stack_monitoring(aks_prod.spec)  # type: ignore[arg-type]
    assert monitoring is not None and monitoring.namespaces == ("spotproof",)
    [monitor] = aks_prod.recording.of_type(POD_MONITOR)
    assert monitor.inputs["spec"]["namespaceSelector"] == {"matchNames": ["spotproof"]}
    assert monitor.inputs["spec"]["podMetricsEndpoints"][0]["interval"] == "15s"
    [policy] = [
        p for p in aks_prod.recording.of_type(NETWORK_POLICY) if p.name.startswith("aks-prod-mon")
    ]
    assert policy.inputs["metadata"]["namespace"] == "spotproof"
    namespace = aks_prod.recording.one(NAMESPACE, "aks-prod-baseline-namespace")
    assert namespace.urn in (policy.dependencies or ())


def test_the_stack_says_where_its_metrics_and_dashboard_are(aks_prod: PlanResult) -> None:
    outputs = aks_prod.recording.outputs["monitoring"]
    assert outputs["query_endpoint"].endswith(".westeurope.prometheus.monitor.azure.com")
    dashboard = json.loads(outputs["grafana_dashboard_json"])
    assert dashboard["title"] == "spotproof aks-prod"
    assert dashboard["panels"]


@pytest.fixture(scope="module")
def monitored_dev(tmp_path_factory: pytest.TempPathFactory) -> PlanResult:
    """aks-dev (batch work, a disposable stack) with monitoring turned on and one action
    group, planned as a project of its own (as ``make_project`` lays one out)."""
    config = stack_config("aks-dev")
    config["spotproof:monitoring"] = {"enabled": True, "notify": [ACTION_GROUPS[0]]}
    root = tmp_path_factory.mktemp("aks-monitored")
    (root / "stacks").mkdir()
    (root / "infra").mkdir()
    (root / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (root / "infra" / "__main__.py").write_text((REPO / "infra" / "__main__.py").read_text())
    (root / "stacks" / "Pulumi.aks-test.yaml").write_text(yaml.safe_dump({"config": config}))
    return run_plan("aks-test", root)


def test_a_monitored_stack_with_batch_work_notifies_its_action_groups_of_batch_alerts(
    monitored_dev: PlanResult,
) -> None:
    groups = monitored_dev.recording.of_type(RULE_GROUP)
    [batch] = [g.inputs for g in groups if g.inputs["ruleGroupName"] == "aks-test-spotproof-batch"]
    alerts = [rule for rule in batch["rules"] if "alert" in rule]
    assert alerts
    for alert in alerts:
        assert alert["actions"] == [{"actionGroupId": ACTION_GROUPS[0]}]


def test_a_monitored_stack_with_batch_work_passes_the_plans_checks(
    monitored_dev: PlanResult,
) -> None:
    result = _spotproof.check(monitored_dev.spec, monitored_dev.recording)
    assert [f"{v.policy}: {v.message}" for v in result.violations] == []
