"""The pieces every spotproof rule is built from: an alert with its annotations, a counter's
events in a window, and the labels that keep clusters apart."""

from __future__ import annotations

from spotproof.observability.model import Rule

NAMESPACE = "cluster, namespace"
"""The labels a namespace's total keeps. ``cluster`` too: GKE evaluates alerts as Cloud
Monitoring alert policies, which read every cluster of the project (``gke.monitoring``),
and its and Azure's collectors label every series with its cluster; where no collector sets
it (an Amazon Managed Service for Prometheus workspace per stack) it is absent, and absent
labels group as one."""
POD = f"{NAMESPACE}, pod"
"""The labels that name one pod, wherever it runs."""
EVALUATION_INTERVAL = "1m"
"""Every group's; alerts measured in minutes need no faster evaluation, and managed
services bill rule evaluation by the samples it reads."""


def shown(*keys: str) -> str:
    """Labels as an annotation shows them: ``{{ $labels.namespace }}/{{ $labels.pod }}``."""
    return "/".join(f"{{{{ $labels.{key} }}}}" for key in keys)


def events(selector: str, window: str) -> str:
    """How much a counter counted within ``window``, per series, including a series that
    appeared within it already counting (``increase()`` misses that first value)."""
    return (
        f"((increase({selector}[{window}]) > 0)"
        f" or (max_over_time({selector}[{window}]) unless {selector} offset {window}))"
    )


def alert(
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    *,
    for_: str = "",
    **labels: str,
) -> Rule:
    return Rule(
        alert=name,
        expr=expr,
        for_=for_,
        labels={"severity": severity, **labels},
        annotations={"summary": summary, "description": description},
    )
