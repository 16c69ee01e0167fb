"""The dashboard as a Grafana JSON model, built with Grafana's own ``grafana-foundation-sdk``.

For Amazon Managed Grafana, Azure Managed Grafana and users' own Grafana. The SDK's builders
and models are generated from Grafana's schemas for one Grafana version per build
(https://github.com/grafana/grafana-foundation-sdk, README's version table); the build pinned
in ``constraints.txt`` targets Grafana 10.4, the oldest version either managed service still
offers (Amazon Managed Grafana: 10.4, 12 and 13; Azure Managed Grafana: 12 and 13 since
hashicorp/terraform-provider-azurerm#32777). Grafana migrates a dashboard of an older schema
forward when it loads it, never backward, so a model for 10.4 imports into all of them.

Every panel queries the data source the viewer picks in the ``datasource`` variable (any
Prometheus-type one: Amazon Managed Service for Prometheus, Azure Monitor managed
Prometheus, a plain Prometheus), so the model carries no data source uid of its own.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos

from spotproof.observability.dashboards.panels import (
    PANELS,
    Panel,
    PanelKind,
    Placement,
    Query,
    layout,
)

DATASOURCE_VARIABLE = "datasource"
DATASOURCE_TYPE = "prometheus"
"""Grafana's core Prometheus data source plugin id: what the managed services' Prometheus
data sources are (Amazon's with SigV4, Azure's with Entra ID)."""
DATASOURCE = DataSourceRef(type_val=DATASOURCE_TYPE, uid=f"${{{DATASOURCE_VARIABLE}}}")
TAGS = ["spotproof"]
_UID_LENGTH = 40
"""Grafana's limit on a dashboard uid."""


def grafana_dashboard(title: str) -> dict[str, Any]:
    """The JSON model of the dashboard, ready for Grafana's import or provisioning."""
    builder = (
        dashboard_builders.Dashboard(title)
        .uid(_uid(title))
        .tags(TAGS)
        .time("now-6h", "now")
        .refresh("1m")
        .with_variable(
            dashboard_builders.DatasourceVariable(DATASOURCE_VARIABLE)
            .label("Prometheus")
            .type(DATASOURCE_TYPE)
        )
    )
    for panel_id, (panel, placement) in enumerate(layout(PANELS), start=1):
        builder = builder.with_panel(_panel(panel, placement).id(panel_id))
    encoded: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return encoded


def _panel(panel: Panel, placement: Placement) -> timeseries.Panel | stat.Panel:
    built: timeseries.Panel | stat.Panel
    if panel.kind is PanelKind.STAT:
        built = stat.Panel().graph_mode(common.BigValueGraphMode.AREA)
    else:
        built = timeseries.Panel().legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
        )
    built = (
        built.title(panel.title)
        .description(panel.description)
        .unit(panel.unit.grafana)
        .datasource(DATASOURCE)
        .grid_pos(GridPos(h=placement.height, w=placement.width, x=placement.x, y=placement.y))
    )
    for index, query in enumerate(panel.queries):
        built = built.with_target(_target(query, ref_id=chr(ord("A") + index)))
    return built


def _target(query: Query, ref_id: str) -> prometheus.Dataquery:
    target = prometheus.Dataquery().expr(query.expr).ref_id(ref_id).range()
    if query.legend:
        target = target.legend_format(grafana_legend(query.legend))
    return target


def grafana_legend(legend: str) -> str:
    """``p95 {kind}`` as Grafana's legend template: ``p95 {{kind}}``."""
    return re.sub(r"\{(\w+)\}", r"{{\1}}", legend)


def _uid(title: str) -> str:
    """A stable uid from the title, so that importing the model again replaces the
    dashboard instead of adding a copy."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return slug[:_UID_LENGTH].rstrip("-") or "spotproof"
