"""Narrowing a query to one GKE cluster (``observability.promql.in_cluster``): what it does to
PromQL, which series it covers, and, with a real Prometheus (Debian's package) holding
another cluster's series shaped to fire every GKE alert, that the alert policies' queries
stay silent while the same queries narrowed to that other cluster fire."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from functools import cache

import pytest

from spotproof.catalog import Cloud
from spotproof.fleet.monitoring import Monitoring
from spotproof.gke.monitoring_documents import PROJECT_WIDE, policy_query
from spotproof.observability.dashboards import PANELS
from spotproof.observability.health import STEP_AGE
from spotproof.observability.model import Rule, RuleGroup
from spotproof.observability.promql import in_cluster, selectors
from spotproof.observability.queues import PUBSUB_OLDEST_UNACKED
from spotproof.observability.rules import (
    CHECKPOINT_AGE,
    INTERRUPTIONS,
    KSM_REQUIREMENT,
    PENDING_AGE,
    POD_HOURS,
    TRAINER_UP,
    rule_groups,
)
from spotproof.runtime.metrics import names
from tests.prometheus_server import Prometheus, running_prometheus

THIS, OTHER = "research", "other"
"""Two GKE clusters of one project: the stack's, and another stack's."""
SUBSCRIPTION = "projects/ml/subscriptions/ours"


@cache
def _groups() -> tuple[RuleGroup, ...]:
    return rule_groups(
        Monitoring(),
        cloud=Cloud.GKE,
        assumed_reclaims_per_node_hour=0.05,
        batch_queue=SUBSCRIPTION,
    )


def _alerts() -> list[Rule]:
    return [rule for group in _groups() for rule in group.alerts]


# What it does to PromQL.


def test_a_bare_selector_gets_the_clusters_matcher() -> None:
    assert in_cluster("up", THIS) == 'up{cluster="research"}'


def test_a_selector_with_matchers_gets_it_after_them() -> None:
    assert in_cluster('rate(x_total{a="b", c=~"d|e",}[5m])', THIS) == (
        'rate(x_total{a="b", c=~"d|e", cluster="research"}[5m])'
    )


def test_every_selector_gets_it_and_nothing_else_does() -> None:
    expr = (
        "sum by (cluster, le) (rate(h_bucket[10m])) / on (pod) group_left (kind) y offset 1h"
        ' and label_replace(z{w!="("}, "dst", "$1", "src", "(.+)") > bool 3'
    )
    assert in_cluster(expr, THIS) == (
        'sum by (cluster, le) (rate(h_bucket{cluster="research"}[10m]))'
        ' / on (pod) group_left (kind) y{cluster="research"} offset 1h'
        ' and label_replace(z{w!="(", cluster="research"}, "dst", "$1", "src", "(.+)") > bool 3'
    )


def test_an_aggregation_written_before_its_grouping_is_not_a_selector() -> None:
    assert [s.name for s in selectors("sum without (pod) (a) + count by (x) (b)")] == ["a", "b"]


def test_a_project_wide_metric_is_left_to_its_own_labels() -> None:
    expr = f'{PUBSUB_OLDEST_UNACKED}{{subscription_id="s"}} > 60 and on () up'
    assert in_cluster(expr, THIS, project_wide={PUBSUB_OLDEST_UNACKED}) == (
        f'{PUBSUB_OLDEST_UNACKED}{{subscription_id="s"}} > 60 and on () up{{cluster="research"}}'
    )


def test_a_selector_already_of_the_cluster_is_kept_and_of_another_refused() -> None:
    assert in_cluster('up{cluster="research"}', THIS) == 'up{cluster="research"}'
    with pytest.raises(ValueError, match='selects cluster="other"'):
        in_cluster('up{cluster="other"}', THIS)
    with pytest.raises(ValueError, match="selects cluster=~"):
        in_cluster('up{cluster=~"research"}', THIS)


def test_text_that_is_not_promql_is_refused() -> None:
    with pytest.raises(ValueError, match="never closed"):
        in_cluster('up{job="a"', THIS)


# Which series: every selector of the GKE rules and panels names one the stack knows.


def test_every_series_the_gke_alerts_and_panels_read_is_one_spotproof_knows() -> None:
    served = {family.name for family in names.ALL} | {
        f"{family.name}_{suffix}"
        for family in names.ALL
        if family.kind is names.Kind.HISTOGRAM
        for suffix in ("bucket", "sum", "count")
    }
    recorded = {rule.record for group in _groups() for rule in group.rules if rule.record}
    known = served | set(KSM_REQUIREMENT.metrics) | recorded | PROJECT_WIDE | {"up"}
    exprs = [rule.expr for group in _groups() for rule in group.rules]
    exprs += [expr for panel in PANELS for expr in panel.exprs]
    read = {selector.name for expr in exprs for selector in selectors(expr)}
    assert read == known & read and read >= recorded | {PUBSUB_OLDEST_UNACKED}


def test_only_pubsubs_metric_is_read_project_wide() -> None:
    assert {PUBSUB_OLDEST_UNACKED} == PROJECT_WIDE
    (queue_age,) = (rule for rule in _alerts() if PUBSUB_OLDEST_UNACKED in rule.expr)
    assert policy_query(THIS, queue_age) == queue_age.expr
    assert 'subscription_id="ours"' in queue_age.expr and 'project_id="ml"' in queue_age.expr


# Another cluster's series, shaped to fire every GKE alert, in a real Prometheus.

HISTORY_MINUTES = 180
"""Every window and offset the alerts read (1 h, the queue age's 30 min) fits in it."""
NAMESPACE = f'cluster="{OTHER}",namespace="train"'
POD = f'{NAMESPACE},pod="p-0"'


def _openmetrics(end: int) -> str:
    """The other cluster's series, one sample a minute for ``HISTORY_MINUTES`` up to ``end``
    (Unix seconds): what its collector and its ClusterRules (which set ``cluster`` on what
    they record) would have written. Pub/Sub's has no cluster: another subscription's."""
    recent = end - 1800
    pending = f'{POD},uid="u-0",target_class='
    constant = {
        f'{PENDING_AGE}{{{pending}"spot-gpu"}}': 99_999,
        f'{PENDING_AGE}{{{pending}"on-demand-gpu"}}': 99_999,
        f'{PENDING_AGE}{{{pending}"flex-start"}}': 999_999,
        f"{CHECKPOINT_AGE}{{{POD}}}": 99_999,
        f"{TRAINER_UP}{{{POD}}}": 99_999,
        f"{names.INTERVAL_SECONDS.name}{{{POD}}}": 10,
        f"{names.INTERVAL_STEPS.name}{{{POD}}}": 1,
        f"{INTERRUPTIONS}{{{NAMESPACE}}}": 100,
        f"{POD_HOURS}{{{NAMESPACE}}}": 1,
        f"{names.ITEMS_IN_FLIGHT.name}{{{POD}}}": 1,
        f"{names.ITEMS_DONE.name}{{{POD}}}": 0,
        f"{names.ITEMS_ALREADY_DONE.name}{{{POD}}}": 0,
        f'up{{{POD},target_class="spot-gpu"}}': 0,
        f"{STEP_AGE}{{{POD}}}": 99_999,
        f'kube_job_failed{{{NAMESPACE},job_name="j",condition="true"}}': 1,
        f'kube_job_status_failed{{{NAMESPACE},job_name="j"}}': 9,
    }
    counting = {  # 0 until half an hour ago, then counted
        f'{names.FINAL_SAVES.name}{{{POD},outcome="late"}}': 1,
        f'{names.RESUMES.name}{{{POD},checkpoint="periodic"}}': 1,
        f"{names.STEPS_LOST.name}{{{POD}}}": 1000,
        f"{names.ITEMS_DEAD_LETTERED.name}{{{POD}}}": 3,
        f'kube_pod_container_status_restarts_total{{{POD},container="c"}}': 9,
    }
    lines = []
    for series, value in [*constant.items(), *counting.items()]:
        for at in range(end - 60 * HISTORY_MINUTES, end + 1, 60):
            shown = value if series in constant or at >= recent else 0
            lines.append(f"{series} {shown} {at}")
    pubsub = 'monitored_resource="pubsub_subscription",project_id="ml",subscription_id="theirs"'
    lines += [
        f"{PUBSUB_OLDEST_UNACKED}{{{pubsub}}} 99999 {at}"
        for at in range(end - 60 * HISTORY_MINUTES, end + 1, 60)
    ]
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def other_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, int]]:
    """A Prometheus whose TSDB holds the other cluster's history (``promtool tsdb
    create-blocks-from openmetrics``), and the time of its last sample."""
    folder = tmp_path_factory.mktemp("two-clusters")
    end = int(time.time()) // 60 * 60 - 120
    source = folder / "series.om"
    source.write_text(_openmetrics(end))
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", source, folder / "data"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with running_prometheus(folder) as server:
        yield server, end


def _answer(server: Prometheus, expr: str, at: int) -> list[dict[str, object]]:
    return server.query(expr, at=at).result


CLUSTER_ALERTS = [
    pytest.param(rule, id=f"{rule.alert}-{rule.labels.get('target_class', '')}".rstrip("-"))
    for rule in _alerts()
    if PUBSUB_OLDEST_UNACKED not in rule.expr
]


@pytest.mark.parametrize("rule", CLUSTER_ALERTS)
def test_another_clusters_series_fire_nothing_in_this_stacks_alert_policy(
    other_cluster: tuple[Prometheus, int], rule: Rule
) -> None:
    server, end = other_cluster
    assert _answer(server, in_cluster(rule.expr, OTHER), end), "the data fires it over there"
    assert _answer(server, policy_query(THIS, rule), end) == []


def test_another_subscriptions_age_fires_nothing_in_this_stacks_queue_alert(
    other_cluster: tuple[Prometheus, int],
) -> None:
    server, end = other_cluster
    (rule,) = (rule for rule in _alerts() if PUBSUB_OLDEST_UNACKED in rule.expr)
    theirs = rule.expr.replace('subscription_id="ours"', 'subscription_id="theirs"')
    assert _answer(server, theirs, end), "the data fires it for its own subscription"
    assert _answer(server, policy_query(THIS, rule), end) == []


def test_the_prometheus_holds_no_series_of_this_stacks_cluster(
    other_cluster: tuple[Prometheus, int],
) -> None:
    server, end = other_cluster
    clusters = _answer(server, "count by (cluster) ({__name__=~'.+'})", end)
    assert sorted(str(series["metric"]) for series in clusters) == [
        "{'cluster': 'other'}",
        "{}",  # Pub/Sub's
    ]
