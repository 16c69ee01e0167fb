"""The dashboard as a Cloud Monitoring dashboard, for GKE's Managed Service for Prometheus.

The JSON is the ``Dashboard`` resource of the Cloud Monitoring Dashboards API v1
(https://cloud.google.com/monitoring/api/ref_v3/rest/v1/projects.dashboards), field names as
the protos define them (googleapis/googleapis, google/monitoring/dashboard/v1: dashboard.proto
@f1d0efe ``display_name``, ``mosaic_layout``; layouts.proto @a59c7af ``MosaicLayout.tiles``
with ``x_pos``, ``y_pos``, ``width``, ``height``, ``widget``; widget.proto @75aa1b3 ``title``,
``xy_chart``, ``scorecard``; xychart.proto @f1d0efe ``data_sets``, ``time_series_query``,
``plot_type``, ``y_axis``; scorecard.proto @d19f75d ``time_series_query``,
``spark_chart_view``; ``TimeSeriesQuery.prometheus_query`` is field 6 and ``unit_override``
field 5 of metrics.proto in google-cloud-monitoring-dashboard 2.46.0), in the lowerCamelCase
their JSON mapping uses. The mosaic has 48 columns (the API allows 1 to 48; the console's own
dashboards use 48), so each panel's place on Grafana's 24-column grid is doubled.

PromQL tiles query Managed Service for Prometheus directly, which holds every cluster of the
project, so each expression is the Grafana model's narrowed to one cluster
(:func:`~spotproof.observability.promql.in_cluster`). No ``legendTemplate`` is set: Cloud
Monitoring names each PromQL series by its labels, and the template's label paths for PromQL
results are not documented in the reference above.
"""

from __future__ import annotations

from typing import Any

from spotproof.observability.dashboards.panels import (
    GRID_COLUMNS,
    PANELS,
    Panel,
    PanelKind,
    Placement,
    Query,
    layout,
)
from spotproof.observability.promql import in_cluster

MOSAIC_COLUMNS = 48
_SCALE = MOSAIC_COLUMNS // GRID_COLUMNS


def cloud_monitoring_dashboard(title: str, *, cluster: str) -> dict[str, Any]:
    """The ``Dashboard`` body for ``projects.dashboards.create`` (``gcloud monitoring
    dashboards create --config-from-file``, or ``google_monitoring_dashboard``), showing
    the GKE cluster named ``cluster`` alone."""
    return {
        "displayName": title,
        "mosaicLayout": {
            "columns": MOSAIC_COLUMNS,
            "tiles": [_tile(panel, placement, cluster) for panel, placement in layout(PANELS)],
        },
    }


def _tile(panel: Panel, placement: Placement, cluster: str) -> dict[str, Any]:
    return {
        "xPos": placement.x * _SCALE,
        "yPos": placement.y * _SCALE,
        "width": placement.width * _SCALE,
        "height": placement.height * _SCALE,
        "widget": {"title": panel.title, **_content(panel, cluster)},
    }


def _content(panel: Panel, cluster: str) -> dict[str, Any]:
    if panel.kind is PanelKind.STAT:
        (query,) = panel.queries
        return {
            "scorecard": {
                "timeSeriesQuery": _query(query, panel, cluster),
                "sparkChartView": {"sparkChartType": "SPARK_LINE"},
            }
        }
    return {
        "xyChart": {
            "dataSets": [
                {"timeSeriesQuery": _query(query, panel, cluster), "plotType": "LINE"}
                for query in panel.queries
            ],
            "yAxis": {"scale": "LINEAR"},
        }
    }


def _query(query: Query, panel: Panel, cluster: str) -> dict[str, Any]:
    return {"prometheusQuery": in_cluster(query.expr, cluster), "unitOverride": panel.unit.ucum}
