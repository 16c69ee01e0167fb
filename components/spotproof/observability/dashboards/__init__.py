"""One dashboard, defined once (:data:`PANELS`) and rendered for each cloud's viewer.

:func:`cloud_monitoring_dashboard` for GKE (Cloud Monitoring over Managed Service for
Prometheus), :func:`grafana_dashboard` for Amazon and Azure Managed Grafana and users' own
Grafana. The Grafana model is built with ``grafana-foundation-sdk`` (the ``iac`` extra), which
is imported only when that rendering is asked for: the panels and the Cloud Monitoring JSON
need nothing beyond the bare package.
"""

from __future__ import annotations

from typing import Any

from spotproof.observability.dashboards.cloud_monitoring import cloud_monitoring_dashboard
from spotproof.observability.dashboards.panels import PANELS, Panel, PanelKind, Query, Unit

__all__ = [
    "PANELS",
    "Panel",
    "PanelKind",
    "Query",
    "Unit",
    "cloud_monitoring_dashboard",
    "grafana_dashboard",
]


def grafana_dashboard(title: str) -> dict[str, Any]:
    """The Grafana JSON model (:func:`.grafana.grafana_dashboard`)."""
    from spotproof.observability.dashboards.grafana import (  # noqa: PLC0415
        grafana_dashboard as render,
    )

    return render(title)
