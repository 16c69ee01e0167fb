"""The dashboards: one list of panels, drawn as a Grafana JSON model and a Cloud Monitoring
dashboard, every query checked by a real Prometheus (Debian's package)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import prometheus as prometheus_models
from grafana_foundation_sdk.models.dashboard import Dashboard

from spotproof.observability.dashboards import (
    PANELS,
    Panel,
    PanelKind,
    Query,
    Unit,
    cloud_monitoring_dashboard,
    grafana_dashboard,
)
from spotproof.observability.dashboards.cloud_monitoring import MOSAIC_COLUMNS
from spotproof.observability.dashboards.grafana import grafana_legend
from spotproof.observability.dashboards.panels import TARGET_CLASS
from spotproof.observability.promql import in_cluster, selectors
from spotproof.runtime.metrics import names
from tests.prometheus_server import Prometheus, running_prometheus

pytestmark = pytest.mark.processes

TITLE = "spotproof: spot at a glance"
CLUSTER = "research"
"""The GKE cluster the Cloud Monitoring dashboard shows."""
QUERIES = [
    pytest.param(expr, id=f"{panel.title}/{index}")
    for panel in PANELS
    for index, expr in enumerate(panel.exprs)
]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """One empty Prometheus, scraping nothing, for every query of the module."""
    with running_prometheus(tmp_path_factory.mktemp("prometheus")) as server:
        yield server


@pytest.fixture(scope="module")
def grafana() -> dict[str, Any]:
    return grafana_dashboard(TITLE)


@pytest.fixture(scope="module")
def cloud_monitoring() -> dict[str, Any]:
    return cloud_monitoring_dashboard(TITLE, cluster=CLUSTER)


def grafana_queries(model: dict[str, Any]) -> dict[str, list[str]]:
    return {
        panel["title"]: [target["expr"] for target in panel["targets"]] for panel in model["panels"]
    }


def cloud_monitoring_queries(dashboard: dict[str, Any]) -> dict[str, list[str]]:
    queries = {}
    for tile in dashboard["mosaicLayout"]["tiles"]:
        widget = tile["widget"]
        if "scorecard" in widget:
            data_sets = [widget["scorecard"]]
        else:
            data_sets = widget["xyChart"]["dataSets"]
        queries[widget["title"]] = [
            data_set["timeSeriesQuery"]["prometheusQuery"] for data_set in data_sets
        ]
    return queries


# One source, two renderings.


def test_every_panel_is_in_the_grafana_model_with_its_queries(grafana: dict[str, Any]) -> None:
    assert grafana_queries(grafana) == {panel.title: list(panel.exprs) for panel in PANELS}


def test_every_panel_is_in_the_cloud_monitoring_dashboard_with_its_queries(
    cloud_monitoring: dict[str, Any],
) -> None:
    assert cloud_monitoring_queries(cloud_monitoring) == {
        panel.title: [in_cluster(expr, CLUSTER) for expr in panel.exprs] for panel in PANELS
    }


def test_every_cloud_monitoring_query_reads_the_stacks_cluster_alone(
    cloud_monitoring: dict[str, Any],
) -> None:
    """Managed Service for Prometheus answers for every cluster of the project."""
    queries = [q for qs in cloud_monitoring_queries(cloud_monitoring).values() for q in qs]
    found = [(query, s) for query in queries for s in selectors(query)]
    assert len(found) > len(queries)
    for query, selector in found:
        assert f'cluster="{CLUSTER}"' in query[selector.start : selector.end], query


def test_the_panels_the_issue_asks_for_are_there() -> None:
    shown = " ".join(expr for panel in PANELS for expr in panel.exprs)
    for series in (
        names.STOP_SIGNALS.name,
        names.STEPS_LOST.name,
        "kube_pod_status_phase",
        names.LAST_COMMIT_TIME.name,
        f"{names.SAVE_SECONDS.name}_bucket",
        f"{names.RESTORE_SECONDS.name}_bucket",
        names.FINAL_SAVES.name,
        f"{names.STALL_SECONDS.name}_bucket",
        names.ITEMS_DONE.name,
        names.ITEMS_IN_FLIGHT.name,
        names.ITEMS_DEAD_LETTERED.name,
    ):
        assert series in shown


def test_every_spotproof_series_a_query_reads_is_one_the_pods_serve() -> None:
    served = {family.name for family in names.ALL} | {
        f"{family.name}_{suffix}"
        for family in names.ALL
        if family.kind is names.Kind.HISTOGRAM
        for suffix in ("bucket", "sum", "count")
    }
    read = {
        series
        for panel in PANELS
        for expr in panel.exprs
        for series in re.findall(r"\bspotproof_\w+", expr)
    }
    assert read and read <= served


def test_pending_pods_are_classed_by_the_label_kube_state_metrics_gives_the_pod_label() -> None:
    assert TARGET_CLASS == "label_spotproof_dev_target_class"


# The Grafana model.


def test_the_grafana_model_loads_back_through_the_sdks_own_models(
    grafana: dict[str, Any],
) -> None:
    register_default_plugins()
    loaded = Dashboard.from_json(grafana)
    assert loaded.to_json()["title"] == TITLE
    targets = [target for panel in loaded.panels or [] for target in panel.targets or []]
    assert len(targets) == sum(len(panel.queries) for panel in PANELS)
    assert all(isinstance(target, prometheus_models.Dataquery) for target in targets)
    assert [target.expr for target in targets] == [e for p in PANELS for e in p.exprs]


def test_every_grafana_panel_queries_the_prometheus_the_viewer_picks(
    grafana: dict[str, Any],
) -> None:
    (variable,) = grafana["templating"]["list"]
    assert (variable["type"], variable["name"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    for panel in grafana["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_grafana_panels_carry_their_kind_and_unit(grafana: dict[str, Any]) -> None:
    drawn = {panel["title"]: panel for panel in grafana["panels"]}
    for panel in PANELS:
        assert drawn[panel.title]["type"] == panel.kind.value
        assert drawn[panel.title]["fieldConfig"]["defaults"]["unit"] == panel.unit.grafana


def test_a_legend_names_labels_in_grafanas_template_syntax(grafana: dict[str, Any]) -> None:
    assert grafana_legend("save {kind}") == "save {{kind}}"
    by_expr = {t["expr"]: t for panel in grafana["panels"] for t in panel["targets"]}
    outcome = next(q for p in PANELS for q in p.queries if q.legend == "{outcome}")
    assert by_expr[outcome.expr]["legendFormat"] == "{{outcome}}"


def test_grafana_panels_do_not_overlap(grafana: dict[str, Any]) -> None:
    cells = [
        (x, y)
        for panel in grafana["panels"]
        for pos in [panel["gridPos"]]
        for x in range(pos["x"], pos["x"] + pos["w"])
        for y in range(pos["y"], pos["y"] + pos["h"])
    ]
    assert len(cells) == len(set(cells))
    assert max(x for x, _ in cells) < 24


def test_the_grafana_uid_comes_from_the_title_so_a_reimport_replaces_the_dashboard(
    grafana: dict[str, Any],
) -> None:
    assert grafana["uid"] == "spotproof-spot-at-a-glance"


# The Cloud Monitoring dashboard.


def test_stat_panels_are_scorecards_and_time_series_are_xy_charts(
    cloud_monitoring: dict[str, Any],
) -> None:
    widgets = {t["widget"]["title"]: t["widget"] for t in cloud_monitoring["mosaicLayout"]["tiles"]}
    for panel in PANELS:
        expected = "scorecard" if panel.kind is PanelKind.STAT else "xyChart"
        assert expected in widgets[panel.title]


def test_cloud_monitoring_tiles_fit_the_mosaic_without_overlapping(
    cloud_monitoring: dict[str, Any],
) -> None:
    layout = cloud_monitoring["mosaicLayout"]
    assert layout["columns"] == MOSAIC_COLUMNS == 48
    cells = [
        (x, y)
        for tile in layout["tiles"]
        for x in range(tile["xPos"], tile["xPos"] + tile["width"])
        for y in range(tile["yPos"], tile["yPos"] + tile["height"])
    ]
    assert len(cells) == len(set(cells))
    assert max(x for x, _ in cells) < MOSAIC_COLUMNS


def test_cloud_monitoring_queries_carry_the_panels_unit(cloud_monitoring: dict[str, Any]) -> None:
    units = {
        t["widget"]["title"]: {
            d["timeSeriesQuery"]["unitOverride"]
            for d in t["widget"].get("xyChart", {}).get("dataSets", [t["widget"].get("scorecard")])
        }
        for t in cloud_monitoring["mosaicLayout"]["tiles"]
    }
    assert units == {panel.title: {panel.unit.ucum} for panel in PANELS}


# The panel list itself.


def test_a_stat_panel_shows_exactly_one_query() -> None:
    with pytest.raises(ValueError, match="shows one query"):
        Panel("two", "", PanelKind.STAT, Unit.COUNT, (Query("up"), Query("up")))


# Every query, asked of a real Prometheus.


@pytest.mark.parametrize("expr", QUERIES)
def test_every_query_is_promql_prometheus_accepts(prometheus: Prometheus, expr: str) -> None:
    answer = prometheus.query(expr)
    assert answer.ok, f"{expr}: {answer.error_type} {answer.error}"


@pytest.mark.parametrize("expr", QUERIES)
def test_every_query_narrowed_to_a_cluster_is_promql_prometheus_accepts(
    prometheus: Prometheus, expr: str
) -> None:
    scoped = in_cluster(expr, CLUSTER)
    answer = prometheus.query(scoped)
    assert answer.ok, f"{scoped}: {answer.error_type} {answer.error}"


def test_prometheus_refuses_a_query_that_does_not_parse(prometheus: Prometheus) -> None:
    answer = prometheus.query("sum(rate(spotproof_stop_signals_total[5m])")
    assert (answer.http_status, answer.error_type) == (400, "bad_data")


# The Pending panels, against kube-state-metrics series a real Prometheus scraped.

KSM_CREATED = 1_700_000_000
KSM_EXPOSITION = f"""\
kube_pod_status_phase{{namespace="train",pod="a",uid="1",phase="Pending"}} 1
kube_pod_status_phase{{namespace="train",pod="a",uid="1",phase="Running"}} 0
kube_pod_status_phase{{namespace="train",pod="b",uid="2",phase="Pending"}} 1
kube_pod_status_phase{{namespace="train",pod="c",uid="3",phase="Pending"}} 0
kube_pod_status_phase{{namespace="train",pod="c",uid="3",phase="Running"}} 1
kube_pod_status_phase{{namespace="train",pod="d",uid="4",phase="Pending"}} 1
kube_pod_status_phase{{namespace="kube-system",pod="e",uid="5",phase="Pending"}} 1
kube_pod_labels{{namespace="train",pod="a",uid="1",{TARGET_CLASS}="spot"}} 1
kube_pod_labels{{namespace="train",pod="b",uid="2",{TARGET_CLASS}="spot"}} 1
kube_pod_labels{{namespace="train",pod="c",uid="3",{TARGET_CLASS}="spot"}} 1
kube_pod_labels{{namespace="train",pod="d",uid="4",{TARGET_CLASS}="flex-start"}} 1
kube_pod_labels{{namespace="kube-system",pod="e",uid="5"}} 1
kube_pod_created{{namespace="train",pod="a",uid="1"}} {KSM_CREATED}
kube_pod_created{{namespace="train",pod="b",uid="2"}} {KSM_CREATED + 600}
kube_pod_created{{namespace="train",pod="c",uid="3"}} {KSM_CREATED - 9999}
kube_pod_created{{namespace="train",pod="d",uid="4"}} {KSM_CREATED + 60}
kube_pod_created{{namespace="kube-system",pod="e",uid="5"}} {KSM_CREATED - 9999}
"""
"""Pods a and b Pending for spot, c Running on spot (created long before), d Pending for
flex-start, e Pending without a target class (not ours)."""


def _exposition(body: str) -> type[BaseHTTPRequestHandler]:
    """A handler serving ``body`` as a Prometheus text exposition on every path."""

    class Exposition(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Exposition


@contextmanager
def _scraping(folder: Path, body: str, ready: str) -> Iterator[Prometheus]:
    """A Prometheus scraping a local exporter of ``body`` every second, once ``ready``
    returns a series."""
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), _exposition(body))
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{exporter.server_address[1]}"
    try:
        with running_prometheus(folder, targets=[target], scrape_interval="1s") as server:
            deadline = time.monotonic() + 30
            while not server.query(ready).result:
                assert time.monotonic() < deadline, server.active_targets()
                time.sleep(0.2)
            yield server
    finally:
        exporter.shutdown()
        exporter.server_close()


@pytest.fixture(scope="module")
def scraped_ksm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A Prometheus that has scraped the exposition above at least once."""
    with _scraping(tmp_path_factory.mktemp("ksm"), KSM_EXPOSITION, "kube_pod_created") as server:
        yield server


def _panel(title: str) -> Panel:
    return next(panel for panel in PANELS if panel.title == title)


def _by_class(answer_result: list[dict[str, Any]]) -> dict[str, float]:
    return {s["metric"][TARGET_CLASS]: float(s["value"][1]) for s in answer_result}


def test_pending_pods_are_counted_per_target_class(scraped_ksm: Prometheus) -> None:
    (expr,) = _panel("Pods Pending by target class").exprs
    assert _by_class(scraped_ksm.query(expr).result) == {"spot": 2, "flex-start": 1}


def test_the_longest_pending_wait_is_the_oldest_pending_pod_of_each_class(
    scraped_ksm: Prometheus,
) -> None:
    (expr,) = _panel("Longest Pending wait by target class").exprs
    answer = scraped_ksm.query(expr)
    now = float(answer.result[0]["value"][0])
    # Pod c was created earlier but runs; pod e waits longest but is not ours.
    assert _by_class(answer.result) == pytest.approx(
        {"spot": now - KSM_CREATED, "flex-start": now - (KSM_CREATED + 60)}
    )


# Counted events, against a pod whose counters were already counting at their first scrape.

FIRST_SCRAPE_EXPOSITION = f"""\
{names.STOP_SIGNALS.name}{{pod="trainer-1"}} 1
{names.RESUMES.name}{{pod="trainer-1",checkpoint="periodic"}} 1
{names.STEPS_LOST.name}{{pod="trainer-1"}} 120
{names.FINAL_SAVES.name}{{pod="trainer-1",outcome="committed"}} 1
{names.ITEMS_DEAD_LETTERED.name}{{pod="worker-1"}} 1
"""
"""A trainer that resumed from a periodic checkpoint, lost 120 steps, was reclaimed and
committed its final save, and a worker that dead-lettered an item, all before the first
scrape: a short-lived pod's whole life. ``increase()`` sees no increase in any of them."""


@pytest.fixture(scope="module")
def scraped_first_counts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Scraped at least twice, so that a bare ``increase()`` would answer 0, not nothing."""
    ready = f"count_over_time({names.ITEMS_DEAD_LETTERED.name}[1m]) >= 2"
    with _scraping(
        tmp_path_factory.mktemp("first-counts"), FIRST_SCRAPE_EXPOSITION, ready
    ) as server:
        yield server


@pytest.mark.parametrize(
    ("title", "index", "shown"),
    [
        ("Interruptions", 0, {(): 1}),
        ("Interruptions", 1, {(): 1}),
        ("Steps lost", 0, {(): 120}),
        ("Final saves by outcome", 0, {("committed",): 1}),
        ("Dead letters (last 24 h)", 0, {(): 1}),
    ],
    ids=["stop-signals", "ended-without-final-save", "steps-lost", "final-saves", "dead-letters"],
)
def test_counts_made_before_a_pods_first_scrape_show_in_the_panel(
    scraped_first_counts: Prometheus, title: str, index: int, shown: dict[tuple, float]
) -> None:
    expr = _panel(title).exprs[index]
    result = scraped_first_counts.query(expr).result
    assert {tuple(s["metric"].values()): float(s["value"][1]) for s in result} == shown


def test_a_count_panel_reads_0_when_nothing_happened(prometheus: Prometheus) -> None:
    (expr,) = _panel("Steps lost").exprs
    [series] = prometheus.query(expr).result
    assert float(series["value"][1]) == 0
