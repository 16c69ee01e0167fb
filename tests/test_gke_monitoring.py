"""``spotproof:gke:Monitoring`` as recorded under Pulumi's mocks: what GMP scrapes, which
rules it evaluates, what becomes an alert policy on which channels, and the schema and
admission checks every rendered object passes; then the same in the real stacks' plans:
gke-prod monitored by its ``HybridCluster``, gke-dev (disposable) left as it was."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from functools import cache
from typing import Any

import kubernetes_validate
import pulumi
import pulumi_gcp as gcp
import pytest
import yaml

from spotproof.catalog import Cloud
from spotproof.fleet.errors import SpecError
from spotproof.gke.monitoring import Monitoring, MonitoringArgs, cluster_monitoring_config
from spotproof.gke.monitoring_documents import (
    WORKLOAD_METADATA,
    document_variables,
    kube_state_metrics_scrape,
    pod_monitoring,
    policy_query,
)
from spotproof.kube import kube_state_metrics as ksm
from spotproof.kube.addons import system_placement
from spotproof.observability.dashboards import PANELS, cloud_monitoring_dashboard
from spotproof.observability.model import Rule, RuleGroup, rule_file
from spotproof.observability.promql import POD, selectors
from spotproof.observability.queues import PUBSUB_OLDEST_UNACKED
from spotproof.observability.rules import TARGET_CLASS as KSM_TARGET_CLASS
from spotproof.observability.stack import StackMonitoring, stack_monitoring
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.schemas import gmp
from spotproof.policy.disruption import selects
from spotproof.runtime.metrics import names
from spotproof.scheduling import TARGET_CLASS_LABEL
from spotproof.testing import Recording, record
from tests.support import REPO, plan_of, stack_config

CHANNELS = ("projects/ml/notificationChannels/111", "projects/ml/notificationChannels/222")
NAMESPACES = ("spotproof", "batch")
PENDING_BY_CLASS = "class:spotproof_pending_pods:count"
PENDING = RuleGroup(
    "spotproof-pending",
    "1m",
    (
        Rule(
            record="class:spotproof_pending_pods:count",
            expr="count by (label_spotproof_dev_target_class) "
            '(kube_pod_status_phase{phase="Pending"} == 1)',
        ),
        Rule(
            alert="SpotPodsPendingTooLong",
            expr="class:spotproof_pending_pods:count"
            '{label_spotproof_dev_target_class="spot-gpu"} > 0',
            for_="15m",
            labels={"severity": "warning"},
            annotations={"summary": "Spot pods pending", "description": "No spot capacity."},
        ),
        Rule(
            alert="PodsPendingTooLong",
            expr=f'{PENDING_BY_CLASS}{{label_spotproof_dev_target_class="spot-gpu"}} > 0',
            labels={"severity": "warning", "target_class": "spot-gpu"},
        ),
        Rule(
            alert="PodsPendingTooLong",
            expr=f'{PENDING_BY_CLASS}{{label_spotproof_dev_target_class="flex-start"}} > 0',
            labels={"severity": "warning", "target_class": "flex-start"},
        ),
    ),
)
CHECKPOINTS = RuleGroup(
    "spotproof-checkpoints",
    "30s",
    (
        Rule(
            alert="NoCheckpointCommitted",
            expr=f"time() - max by (namespace, pod) ({names.LAST_COMMIT_TIME.name}) > 3600",
            labels={"severity": "critical"},
        ),
    ),
)
STEPS = RuleGroup(
    "spotproof-steps",
    "2m",
    (Rule(record="job:spotproof_steps_lost:rate1h", expr=f"rate({names.STEPS_LOST.name}[1h])"),),
)
DASHBOARD = {"displayName": "spotproof", "mosaicLayout": {"columns": 48, "tiles": []}}
CR = "kubernetes:monitoring.googleapis.com/v1:"
CLUSTER = "gcp:container/cluster:Cluster"


def _record(**changes: Any) -> Recording:
    def program() -> None:
        provider = pulumi.ProviderResource("kubernetes", "existing", {"kubeconfig": "{}"})
        args = {
            "project": "ml",
            "cluster_name": "research",
            "provider": provider,
            "namespaces": NAMESPACES,
            "rule_groups": (PENDING, CHECKPOINTS, STEPS),
            "notification_channels": CHANNELS,
            "scrape_interval_seconds": 30,
            "dashboard": DASHBOARD,
            **changes,
        }
        Monitoring("mon", MonitoringArgs(**args))

    return record(program, stack="research", project="ml-infra")


@cache
def _default() -> Recording:
    return _record()


def _crs(kind: str) -> list[Any]:
    return _default().of_type(f"{CR}{kind}")


def _policies() -> dict[str, dict[str, Any]]:
    policies = _default().of_type("gcp:monitoring/alertPolicy:AlertPolicy")
    return {p.inputs["conditions"][0]["displayName"]: p.inputs for p in policies}


def _as_object(resource: Any) -> dict[str, Any]:
    """A recorded Kubernetes resource as the object the API server receives."""
    return {"apiVersion": resource.inputs["apiVersion"], "kind": resource.inputs["kind"]} | {
        k: v for k, v in resource.inputs.items() if k not in ("apiVersion", "kind")
    }


# What GMP scrapes.


def test_each_workload_namespace_scrapes_target_class_pods_on_their_metrics_port() -> None:
    monitorings = {
        r.inputs["metadata"]["namespace"]: r.inputs["spec"] for r in _crs("PodMonitoring")
    }
    assert set(monitorings) == set(NAMESPACES)
    for spec in monitorings.values():
        assert spec["selector"] == {
            "matchExpressions": [{"key": TARGET_CLASS_LABEL, "operator": "Exists"}]
        }
        assert spec["endpoints"] == [
            {"port": "metrics", "path": names.METRICS_PATH, "interval": "30s"}
        ]


def test_workload_series_carry_their_pods_target_class() -> None:
    for monitoring in _crs("PodMonitoring"):
        assert monitoring.inputs["spec"]["targetLabels"]["fromPod"] == [
            {"from": TARGET_CLASS_LABEL, "to": "target_class"}
        ]


def test_workload_series_name_their_pod_container_and_node_whatever_gmp_defaults() -> None:
    for monitoring in _crs("PodMonitoring"):
        obj = _as_object(monitoring)
        assert obj["spec"]["targetLabels"]["metadata"] == list(WORKLOAD_METADATA)
        assert gmp.series_labels(obj) >= {
            "cluster",
            "namespace",
            "pod",
            "container",
            "node",
            "target_class",
            "instance",
        }


def test_a_scrape_that_leaves_its_pod_labels_to_defaulting_is_refused_by_the_plan() -> None:
    """What the PodMonitoring said before: ``fromPod`` alone. GMP v0.16.0-rc.0 to rc.2
    added no ``pod`` to it, and without ``targetLabels`` at all no version does."""
    old = pod_monitoring("spotproof", 30)
    del old["spec"]["targetLabels"]["metadata"]
    assert any(e.startswith("spec.targetLabels.metadata: not stated") for e in gmp.errors(old))
    del old["spec"]["targetLabels"]
    assert "pod" not in gmp.series_labels(old)
    assert any(e.startswith("spec.targetLabels.metadata: not stated") for e in gmp.errors(old))


def _grouping_labels(expr: str) -> set[str]:
    lists = re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr)
    return {label.strip() for found in lists for label in found.split(",") if label.strip()}


def test_every_label_the_rules_and_panels_group_or_join_by_is_on_gke_series() -> None:
    workload = gmp.series_labels(_as_object(_crs("PodMonitoring")[0]))
    ksm_scrape = gmp.series_labels(kube_state_metrics_scrape(30))
    own = {label for family in names.ALL for label in family.labels} | {"le"}
    kube_state_metrics = {"namespace", "pod", "uid", "phase", KSM_TARGET_CLASS, "job_name"}
    kube_state_metrics |= {"container"}  # kube-state-metrics v2.20.0: the Job and restart series
    recorded = {"target_class"}  # label_replace'd by the Pending recording rule
    pubsub = {"project_id", "subscription_id"}
    known = workload | ksm_scrape | own | kube_state_metrics | recorded | pubsub
    exprs = [r.expr for g in _prod_monitoring().rule_groups for r in g.rules]
    exprs += [e for panel in PANELS for e in panel.exprs]
    used = set().union(*map(_grouping_labels, exprs))
    legends = {label for panel in PANELS for q in panel.queries for label in q.legend_labels}
    assert "pod" in used and used | legends <= known
    assert {label.strip() for label in POD.split(",")} <= workload
    # kube-state-metrics' own namespace and pod reach the rules: its scrape sets neither.
    assert not {"namespace", "pod"} & ksm_scrape and "cluster" in ksm_scrape


def test_the_scrape_interval_is_the_one_given() -> None:
    (spec, *_) = (
        r.inputs["spec"] for r in _record(scrape_interval_seconds=60).of_type(f"{CR}PodMonitoring")
    )
    assert spec["endpoints"][0]["interval"] == "60s"


def test_each_workload_namespace_admits_gmps_collector_to_the_metrics_port_alone() -> None:
    policies = _default().of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert {p.inputs["metadata"]["namespace"] for p in policies} == set(NAMESPACES)
    for policy in policies:
        (rule,) = policy.inputs["spec"]["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": "metrics"}]
        assert rule["from"] == [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gmp-system"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "collector"}},
            }
        ]


# Rules and alerts.


def test_cluster_rules_carry_exactly_the_recording_rules_of_the_groups_given() -> None:
    (rules,) = _crs("ClusterRules")
    rendered = yaml.safe_load(yaml.safe_dump(rules.inputs["spec"]))
    assert rendered == rule_file([RuleGroup(PENDING.name, "1m", PENDING.rules[:1]), STEPS])


def test_no_cluster_rules_without_a_recording_rule() -> None:
    recording = _record(rule_groups=(CHECKPOINTS,))
    assert recording.of_type(f"{CR}ClusterRules") == []


def test_each_alerting_rule_becomes_one_policy_on_every_channel_given() -> None:
    policies = _policies()
    assert set(policies) == {
        "SpotPodsPendingTooLong",
        "PodsPendingTooLong (target_class=spot-gpu)",
        "PodsPendingTooLong (target_class=flex-start)",
        "NoCheckpointCommitted",
    }
    for policy in policies.values():
        assert policy["notificationChannels"] == list(CHANNELS)
        assert policy["project"] == "ml"


def test_every_rule_given_is_either_recorded_in_gmp_or_alerted_on_by_cloud_monitoring() -> None:
    (rules,) = _crs("ClusterRules")
    recorded = {r["record"] for g in rules.inputs["spec"]["groups"] for r in g["rules"]}
    alerted = [p["conditions"][0]["conditionPrometheusQueryLanguage"] for p in _policies().values()]
    given = [rule for g in (PENDING, CHECKPOINTS, STEPS) for rule in g.rules]
    assert recorded == {rule.record for rule in given if rule.record}
    assert sorted((c["alertRule"], c["query"]) for c in alerted) == sorted(
        (rule.alert, policy_query("research", rule)) for rule in given if rule.alert
    )


def test_every_policy_query_reads_the_stacks_own_cluster_alone() -> None:
    queries = [
        p["conditions"][0]["conditionPrometheusQueryLanguage"]["query"]
        for p in _policies().values()
    ]
    found = [(query, s) for query in queries for s in selectors(query)]
    assert len(found) >= len(queries)
    for query, selector in found:
        assert 'cluster="research"' in query[selector.start : selector.end], query


def test_the_recording_rules_are_left_for_gmp_to_narrow_to_the_cluster() -> None:
    """GMP adds the cluster's matcher to every selector of a ClusterRules itself
    (``rules_config.go``, ``scope``); one of its own would conflict with nothing but is noise."""
    (rules,) = _crs("ClusterRules")
    exprs = [r["expr"] for g in rules.inputs["spec"]["groups"] for r in g["rules"]]
    assert exprs and not any("cluster=" in expr for expr in exprs)


def test_a_policy_queries_the_rule_at_its_groups_interval_and_fires_after_its_for() -> None:
    condition = _policies()["SpotPodsPendingTooLong"]["conditions"][0]
    assert condition["conditionPrometheusQueryLanguage"] == {
        "query": "class:spotproof_pending_pods:count"
        '{label_spotproof_dev_target_class="spot-gpu", cluster="research"} > 0',
        "evaluationInterval": "60s",
        "duration": "900s",
        "ruleGroup": "spotproof-pending",
        "alertRule": "SpotPodsPendingTooLong",
        "labels": {"severity": "warning"},
        "disableMetricValidation": True,
    }


def test_every_promql_condition_creates_before_its_metrics_exist() -> None:
    """Cloud Monitoring refuses a validated condition whose metrics have no data yet, as
    the stack's have none before its workloads are scraped."""
    conditions = [
        c["conditionPrometheusQueryLanguage"] for p in _policies().values() for c in p["conditions"]
    ]
    assert len(conditions) == 4
    assert all(c["disableMetricValidation"] is True for c in conditions)


def test_a_policy_says_which_cluster_and_carries_the_rules_severity_and_annotations() -> None:
    pending, checkpoint = (
        _policies()["SpotPodsPendingTooLong"],
        _policies()["NoCheckpointCommitted"],
    )
    assert pending["displayName"] == "research: SpotPodsPendingTooLong"
    assert pending["documentation"] == {
        "subject": "research: Spot pods pending",
        "content": "No spot capacity.",
        "mimeType": "text/markdown",
    }
    assert (pending["severity"], checkpoint["severity"]) == ("WARNING", "CRITICAL")
    assert "duration" not in checkpoint["conditions"][0]["conditionPrometheusQueryLanguage"]


def test_rules_sharing_an_alert_name_become_policies_told_apart_by_their_labels() -> None:
    policies = _default().of_type("gcp:monitoring/alertPolicy:AlertPolicy")
    names_ = sorted(p.name for p in policies if "pods-pending-too-long" in p.name)
    assert names_ == [
        "mon-pods-pending-too-long-flex-start",
        "mon-pods-pending-too-long-spot-gpu",
        "mon-spot-pods-pending-too-long",
    ]
    spot = _policies()["PodsPendingTooLong (target_class=spot-gpu)"]
    assert spot["displayName"] == "research: PodsPendingTooLong (target_class=spot-gpu)"


def test_the_dashboard_is_created_from_the_json_given() -> None:
    (dashboard,) = _default().of_type("gcp:monitoring/dashboard:Dashboard")
    assert json.loads(dashboard.inputs["dashboardJson"]) == DASHBOARD
    assert dashboard.inputs["project"] == "ml"


def test_no_dashboard_when_none_is_given() -> None:
    assert _record(dashboard=None).of_type("gcp:monitoring/dashboard:Dashboard") == []


def test_every_resource_descends_from_the_component() -> None:
    recording = _default()
    (component,) = recording.of_type("spotproof:gke:Monitoring")
    parents = {r.urn: r.parent for r in recording.resources}

    def descends(urn: str | None) -> bool:
        while urn is not None and urn != component.urn:
            urn = parents.get(urn)
        return urn == component.urn

    others = [r for r in recording.resources if r.name not in ("mon", "existing")]
    assert others and all(descends(r.parent) for r in others)
    assert {r.type for r in others if r.parent == component.urn} >= {
        f"{CR}PodMonitoring",
        f"{CR}ClusterRules",
        "gcp:monitoring/alertPolicy:AlertPolicy",
        "gcp:monitoring/dashboard:Dashboard",
        "spotproof:kube:KubeStateMetrics",
    }


def test_kubernetes_objects_go_through_the_clusters_provider() -> None:
    kube = [r for r in _default().resources if r.type.startswith("kubernetes:")]
    assert kube and all("existing" in (r.provider or "") for r in kube)


# kube-state-metrics.


def test_the_cluster_runs_spotproofs_kube_state_metrics_on_its_system_pool() -> None:
    recording = _default()
    (component,) = recording.of_type("spotproof:kube:KubeStateMetrics")
    (deployment,) = recording.of_type("kubernetes:apps/v1:Deployment")
    pod = deployment.inputs["spec"]["template"]["spec"]
    placement = system_placement(Cloud.GKE)
    assert placement["nodeSelector"].items() <= pod["nodeSelector"].items()
    assert pod["tolerations"] == placement["tolerations"]
    (allowlist,) = (
        a for a in pod["containers"][0]["args"] if a.startswith("--metric-labels-allowlist=")
    )
    assert f"pods=[{TARGET_CLASS_LABEL}]" in allowlist
    assert component.parent == recording.of_type("spotproof:gke:Monitoring")[0].urn


def test_kube_state_metrics_series_keep_their_own_namespace_and_pod_labels() -> None:
    (scrape,) = _crs("ClusterPodMonitoring")
    assert scrape.inputs["spec"] == {
        "selector": {"matchLabels": ksm.LABELS},
        "endpoints": [{"port": ksm.METRICS_PORT[0], "interval": "30s"}],
        "targetLabels": {"metadata": []},
    }


def test_kube_state_metrics_waits_for_what_it_is_told_to() -> None:
    def program() -> None:
        provider = pulumi.ProviderResource("kubernetes", "existing", {"kubeconfig": "{}"})
        nodes = pulumi.CustomResource("test:index:SystemPool", "system", {})
        Monitoring(
            "mon",
            MonitoringArgs(
                project="ml",
                cluster_name="research",
                provider=provider,
                namespaces=NAMESPACES,
                ready=[nodes],
            ),
        )

    recording = record(program, stack="research", project="ml-infra")
    (deployment,) = recording.of_type("kubernetes:apps/v1:Deployment")
    (pool,) = recording.of_type("test:index:SystemPool")
    assert pool.urn in (deployment.dependencies or ())


# The cluster.


def test_the_cluster_runs_managed_collection_and_system_metrics_without_gkes_pod_package() -> None:
    config = cluster_monitoring_config()
    assert config == {
        "enable_components": ["SYSTEM_COMPONENTS"],
        "managed_prometheus": {"enabled": True},
    }
    typed = gcp.container.ClusterMonitoringConfigArgs(
        enable_components=config["enable_components"],
        managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(
            **config["managed_prometheus"]
        ),
    )
    assert typed.managed_prometheus.enabled is True


def test_the_clusters_monitoring_config_reaches_the_cluster_resource() -> None:
    def program() -> None:
        gcp.container.Cluster(
            "c",
            location="us-central1",
            initial_node_count=1,
            monitoring_config=cluster_monitoring_config(["STORAGE"]),
        )

    (cluster,) = record(program, stack="s", project="p").of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["monitoringConfig"] == {
        "enableComponents": ["SYSTEM_COMPONENTS", "STORAGE"],
        "managedPrometheus": {"enabled": True},
    }


def test_gkes_pod_package_is_refused_in_one_line() -> None:
    with pytest.raises(SpecError, match=r"^cluster_monitoring_config\.extra_components = 'POD': "):
        cluster_monitoring_config(["POD"])


# Bad input.


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"scrape_interval_seconds": 0}, "MonitoringArgs.scrape_interval_seconds = 0"),
        ({"namespaces": ("a", "a")}, "MonitoringArgs.namespaces = ['a', 'a']"),
        ({"namespaces": ()}, "MonitoringArgs.namespaces = []"),
        (
            {"rule_groups": (RuleGroup("g", "1m", (Rule(alert="A", expr='up{cluster="x"}'),)),)},
            "MonitoringArgs.rule_groups[g].A.expr = 'up{cluster=\"x\"}': cannot be narrowed",
        ),
        (
            {"rule_groups": (RuleGroup("g", "45s", CHECKPOINTS.rules),)},
            "MonitoringArgs.rule_groups[g].interval = '45s'",
        ),
        (
            {"rule_groups": (CHECKPOINTS, CHECKPOINTS)},
            "MonitoringArgs.rule_groups = ['no-checkpoint-committed']",
        ),
    ],
)
def test_bad_arguments_are_refused_in_one_line_naming_the_argument(
    changes: dict[str, Any], key: str
) -> None:
    args = {"project": "ml", "cluster_name": "c", "provider": None, "namespaces": ["a"]}
    with pytest.raises(SpecError) as refusal:
        MonitoringArgs(**(args | changes))
    assert str(refusal.value).startswith(key) and "\n" not in str(refusal.value)


# Schemas.


def _gmp_objects() -> list[dict[str, Any]]:
    return [_as_object(r) for r in _default().resources if r.type.startswith(CR)]


def test_every_gmp_object_is_one_its_v1_crd_admits() -> None:
    objects = _gmp_objects()
    assert {o["kind"] for o in objects} == {"PodMonitoring", "ClusterPodMonitoring", "ClusterRules"}
    for obj in objects:
        assert gmp.is_gmp(obj)
        assert gmp.errors(obj) == []


def test_the_schema_check_catches_a_field_the_crd_does_not_have() -> None:
    (obj, *_) = (o for o in _gmp_objects() if o["kind"] == "PodMonitoring")
    obj["spec"]["endpoints"][0]["honorLabels"] = True
    assert any("honorLabels" in error for error in gmp.errors(obj))


def test_every_core_object_passes_its_kubernetes_schema() -> None:
    core = [
        _as_object(r)
        for r in _default().resources
        if r.type.startswith("kubernetes:") and not r.type.startswith(CR)
    ]
    assert {o["kind"] for o in core} >= {"Deployment", "ClusterRoleBinding", "NetworkPolicy"}
    for obj in core:
        kubernetes_validate.validate(obj, "1.33", strict=True)


# Alert documentation: Prometheus templates as Cloud Monitoring variables.


def test_alert_documentation_fills_in_labels_and_the_value_as_cloud_monitorings_variables() -> None:
    assert document_variables(
        "Trainer {{ $labels.namespace }}/{{$labels.pod}} idle for {{ $value | humanizeDuration }}"
    ) == (
        "Trainer ${metric_or_resource.label.namespace}/${metric_or_resource.label.pod} "
        "idle for ${metric.label.value} s"
    )
    assert document_variables('{{ $value | printf "%.3g" }} of {{ humanize $value }}') == (
        "${metric.label.value} of ${metric.label.value}"
    )
    assert document_variables("{{ $labels }}: no template here") == (
        "${metric_or_resource.labels}: no template here"
    )


def test_a_template_cloud_monitoring_cannot_fill_in_is_refused_in_one_line() -> None:
    rule = Rule(alert="A", expr="up == 0", annotations={"summary": "see {{ $externalURL }}"})
    with pytest.raises(SpecError) as refusal:
        MonitoringArgs(
            project="ml",
            cluster_name="c",
            provider=None,  # type: ignore[arg-type]
            namespaces=["a"],
            rule_groups=(RuleGroup("g", "1m", (rule,)),),
        )
    message = str(refusal.value)
    assert message.startswith(
        "MonitoringArgs.rule_groups[g].A.annotations.summary = '{{ $externalURL }}': "
    )
    assert "allowed:" in message and "\n" not in message


def test_no_alert_policy_shows_a_prometheus_template_to_whoever_is_notified() -> None:
    policies = _prod().recording.of_type(POLICY)
    templated = [r for g in _prod_monitoring().rule_groups for r in g.alerts]
    assert any("{{" in text for r in templated for text in r.annotations.values())
    documents = [p.inputs["documentation"] for p in policies]
    assert documents and not any("{{" in d["subject"] + d["content"] for d in documents)


# The real stacks: gke-prod monitored by its HybridCluster, gke-dev left as it was.

POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


@cache
def _prod() -> PlanResult:
    return plan_of("gke-prod")


@cache
def _prod_monitoring() -> StackMonitoring:
    monitoring = stack_monitoring(_prod().spec)
    assert monitoring is not None
    return monitoring


def test_gke_prod_runs_managed_prometheus_and_gkes_system_metrics_only() -> None:
    cluster = _prod().recording.one("gcp:container/cluster:Cluster", "gke-prod").inputs
    assert cluster["monitoringConfig"] == {
        "enableComponents": ["SYSTEM_COMPONENTS"],
        "managedPrometheus": {"enabled": True},
    }


def test_gke_dev_is_disposable_so_its_cluster_and_outputs_stay_as_they_were() -> None:
    dev = plan_of("gke-dev")
    assert stack_monitoring(dev.spec) is None
    assert "monitoringConfig" not in dev.recording.one(CLUSTER, "gke-dev").inputs
    assert dev.recording.of_type("spotproof:gke:Monitoring") == []
    assert not [r for r in dev.recording.resources if r.type.startswith(CR)]
    assert "monitoring" not in dev.recording.outputs


def test_gke_prod_has_one_alert_policy_per_alerting_rule_of_its_stack() -> None:
    policies = _prod().recording.of_type(POLICY)
    conditions = sorted(
        (
            c["conditionPrometheusQueryLanguage"]["alertRule"],
            c["conditionPrometheusQueryLanguage"]["query"],
        )
        for p in policies
        for c in p.inputs["conditions"]
    )
    rules = [r for g in _prod_monitoring().rule_groups for r in g.alerts]
    assert conditions == sorted((r.alert, policy_query("gke-prod", r)) for r in rules)
    assert all(p.inputs["project"] == "spotproof-prod" for p in policies)
    assert all(p.inputs["displayName"].startswith("gke-prod: ") for p in policies)


def test_gke_prod_records_its_stacks_recording_rules_in_gmp() -> None:
    rules = _prod().recording.one(f"{CR}ClusterRules", "gke-prod-monitoring-clusterrules-spotproof")
    recorded = [r["record"] for g in rules.inputs["spec"]["groups"] for r in g["rules"]]
    stack = [r.record for g in _prod_monitoring().rule_groups for r in g.rules if r.record]
    assert recorded == stack


def test_gke_prod_scrapes_its_workload_namespace_at_the_stacks_interval() -> None:
    (scrape,) = _prod().recording.of_type(f"{CR}PodMonitoring")
    interval = _prod().spec.monitoring.scrape_interval_seconds
    assert scrape.inputs["metadata"]["namespace"] == "spotproof"
    assert scrape.inputs["spec"]["endpoints"][0]["interval"] == f"{interval}s"


def test_gke_prods_dashboard_is_the_cloud_monitoring_rendering_of_the_shared_one() -> None:
    dashboard = _prod().recording.one(
        "gcp:monitoring/dashboard:Dashboard", "gke-prod-monitoring-dashboard"
    )
    assert json.loads(dashboard.inputs["dashboardJson"]) == cloud_monitoring_dashboard(
        "spotproof gke-prod", cluster="gke-prod"
    )


def test_gke_prod_exports_where_its_alert_policies_rules_and_dashboard_are() -> None:
    exported = _prod().recording.outputs["monitoring"]
    rules = [r for g in _prod_monitoring().rule_groups for r in g.alerts]
    assert len(exported["alert_policies"]) == len(rules)
    assert all(
        name.startswith("projects/spotproof-prod/alertPolicies/")
        for name in exported["alert_policies"].values()
    )
    assert exported["dashboard"].startswith("projects/spotproof-prod/dashboards/")
    assert (exported["cluster_rules"], exported["namespaces"]) == ("spotproof", ["spotproof"])


def test_gmp_objects_wait_for_their_namespace_and_kube_state_metrics_for_the_system_pool() -> None:
    recording = _prod().recording
    namespace = recording.one("kubernetes:core/v1:Namespace", "gke-prod-baseline-namespace")
    for resource in [*recording.of_type(f"{CR}PodMonitoring"), *recording.of_type(NETWORK_POLICY)]:
        if resource.name.startswith("gke-prod-monitoring-"):
            assert namespace.urn in (resource.dependencies or ()), resource.name
    system = recording.one("gcp:container/nodePool:NodePool", "gke-prod-system")
    deployment = recording.one(
        "kubernetes:apps/v1:Deployment", "gke-prod-monitoring-kube-state-metrics-deployment"
    )
    assert system.urn in (deployment.dependencies or ())


def _admits(
    policies: list[Mapping[str, Any]],
    pod: Mapping[str, str],
    source_namespace: Mapping[str, str],
    source_pod: Mapping[str, str],
    port: str,
) -> bool:
    """Whether ``policies`` (the pod's namespace's) let a connection from ``source_pod`` in
    ``source_namespace`` reach ``pod``'s named ``port``: isolated for ingress by any policy
    that selects it, then admitted by any rule of those (policies add up)."""
    selecting = [
        p
        for p in policies
        if selects(p.get("podSelector"), pod) and "Ingress" in p.get("policyTypes", [])
    ]
    for policy in selecting:
        for rule in policy.get("ingress") or []:
            peers = rule.get("from")
            peer_ok = not peers or any(
                "namespaceSelector" in peer
                and selects(peer["namespaceSelector"], source_namespace)
                and selects(peer.get("podSelector"), source_pod)
                for peer in peers
            )
            ports = rule.get("ports")
            if peer_ok and (not ports or any(p.get("port") == port for p in ports)):
                return True
    return not selecting


def test_gmps_collector_reaches_the_smoke_jobs_metrics_port_through_its_namespaces_isolation() -> (
    None
):
    recording = _prod().recording
    job = recording.one("kubernetes:batch/v1:Job", "gke-prod-smoke-job").inputs
    template = job["spec"]["template"]
    pod = template["metadata"]["labels"]
    container_ports = [p["name"] for c in template["spec"]["containers"] for p in c["ports"]]
    assert "metrics" in container_ports
    policies = [
        r.inputs["spec"]
        for r in recording.of_type(NETWORK_POLICY)
        if r.inputs["metadata"]["namespace"] == job["metadata"]["namespace"]
    ]
    assert any(p == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]} for p in policies)
    collector_ns = {"kubernetes.io/metadata.name": "gmp-system"}
    collector = {"app.kubernetes.io/name": "collector"}
    other_ns = {"kubernetes.io/metadata.name": "default"}
    assert _admits(policies, pod, collector_ns, collector, "metrics")
    assert not _admits(policies, pod, collector_ns, collector, "http")
    assert not _admits(policies, pod, other_ns, collector, "metrics")
    assert not _admits(policies, pod, collector_ns, {"app": "other"}, "metrics")


@pytest.fixture(scope="module")
def watched_dev(tmp_path_factory: pytest.TempPathFactory) -> PlanResult:
    """gke-dev (which has batch work) with monitoring on and a notification channel."""
    root = tmp_path_factory.mktemp("watched")
    (root / "stacks").mkdir()
    (root / "infra").mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copy(REPO / "infra" / "__main__.py", root / "infra" / "__main__.py")
    config = stack_config("gke-dev")
    config["spotproof:monitoring"] = {"enabled": True, "notify": [WATCHED_CHANNEL]}
    (root / "stacks" / "Pulumi.gke-dev.yaml").write_text(yaml.safe_dump({"config": config}))
    return run_plan("gke-dev", root)


WATCHED_CHANNEL = "projects/spotproof-dev/notificationChannels/4242"


def test_every_alert_policy_notifies_the_stacks_channels(watched_dev: PlanResult) -> None:
    policies = watched_dev.recording.of_type(POLICY)
    assert policies
    assert all(p.inputs["notificationChannels"] == [WATCHED_CHANNEL] for p in policies)


def test_the_batch_queue_alert_reads_the_stacks_own_subscription(watched_dev: PlanResult) -> None:
    subscription = watched_dev.recording.one(
        "gcp:pubsub/subscription:Subscription", "gke-dev-work-subscription"
    ).inputs
    (policy,) = (
        p
        for p in watched_dev.recording.of_type(POLICY)
        if p.name == "gke-dev-monitoring-spotproof-batch-queue-messages-too-old"
    )
    query = policy.inputs["conditions"][0]["conditionPrometheusQueryLanguage"]["query"]
    assert f'subscription_id="{subscription["name"]}"' in query
    assert f'project_id="{subscription["project"]}"' in query
    # Pub/Sub's series have no cluster label: a cluster matcher would match none of them.
    assert PUBSUB_OLDEST_UNACKED in query and "cluster=" not in query


def test_every_other_alert_of_a_batch_stack_reads_its_cluster_alone(
    watched_dev: PlanResult,
) -> None:
    for policy in watched_dev.recording.of_type(POLICY):
        query = policy.inputs["conditions"][0]["conditionPrometheusQueryLanguage"]["query"]
        for selector in selectors(query):
            if selector.name != PUBSUB_OLDEST_UNACKED:
                assert 'cluster="gke-dev"' in query[selector.start : selector.end], query


def test_a_batch_namespace_of_the_trainers_own_is_scraped_once(watched_dev: PlanResult) -> None:
    scrapes = watched_dev.recording.of_type(f"{CR}PodMonitoring")
    assert [s.inputs["metadata"]["namespace"] for s in scrapes] == ["spotproof"]
    assert watched_dev.spec.batch is not None and watched_dev.spec.batch.namespace == "spotproof"
