"""The dashboard's panels, written once: what each shows and the PromQL that shows it.

Both renderings (:mod:`.grafana` for Amazon and Azure Managed Grafana and users' own
Grafana, :mod:`.cloud_monitoring` for GKE) read :data:`PANELS` and nothing else, so the
two dashboards cannot show different things; docs/monitoring.md's picture iterates the same list.

Every metric is spelled through its :class:`~spotproof.runtime.metrics.names.Family`.
Counts of events use the rules' ``events()``, not a bare ``increase()``: a counter first
scraped already counting (a resumed trainer's restore, a short-lived pod's final save)
shows no increase, yet it counted. The queries carry fixed windows (``[10m]`` for rates,
``[1h]`` for counts of rare events) rather than a Grafana variable such as
``$__rate_interval``: Cloud Monitoring does not know Grafana's variables, and a plain
Prometheus must be able to run each query as written (``tests/test_dashboards.py`` asks a
real one).

Pending pods are seen through kube-state-metrics, which names a pod label
``spotproof.dev/target-class`` as ``label_spotproof_dev_target_class`` on
``kube_pod_labels`` (once the label is allowlisted): a Pending pod has no node yet, so the
class it waits for is the only place to say where it is going.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum, StrEnum

from spotproof.observability.promql import events, label_name
from spotproof.runtime.metrics import names
from spotproof.scheduling import TARGET_CLASS_LABEL

RATE_WINDOW = "10m"
"""The window of a rate: long enough to span several scrapes at any managed collector's
default interval (GMP 30 s, Amazon's collector 30 s, Azure's 30 s)."""
EVENT_WINDOW = "1h"
"""The window of a count of rare events (reclaims, restores, final saves): per hour."""
SUMMARY_WINDOW = "24h"
"""The window of a stat panel's count: the last day."""
QUANTILE = 0.95


class PanelKind(StrEnum):
    TIME_SERIES = "timeseries"
    STAT = "stat"
    """The latest value of one query."""


class Unit(Enum):
    """A panel's unit, as each renderer spells it: Grafana's unit id, and the UCUM unit
    Cloud Monitoring's ``unitOverride`` takes (the ``unit`` of a MetricDescriptor)."""

    COUNT = ("short", "1")
    SECONDS = ("s", "s")
    PER_SECOND = ("cps", "1/s")

    def __init__(self, grafana: str, ucum: str) -> None:
        self.grafana = grafana
        self.ucum = ucum


@dataclass(frozen=True)
class Query:
    expr: str
    """PromQL, as both renderings send it."""
    legend: str = ""
    """How a series is named, with ``{label}`` standing for a label's value (``p95 {kind}``).
    Each renderer translates the placeholders into its own template syntax."""

    @property
    def legend_labels(self) -> tuple[str, ...]:
        return tuple(field for _, field, _, _ in string.Formatter().parse(self.legend) if field)


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    kind: PanelKind
    unit: Unit
    queries: tuple[Query, ...]

    def __post_init__(self) -> None:
        if not self.queries:
            raise ValueError(f"panel {self.title!r} has no query")
        if self.kind is PanelKind.STAT and len(self.queries) != 1:
            raise ValueError(f"stat panel {self.title!r} shows one query, not {len(self.queries)}")

    @property
    def exprs(self) -> tuple[str, ...]:
        return tuple(query.expr for query in self.queries)


@dataclass(frozen=True)
class Placement:
    """Where a panel sits on a 24-column grid (Grafana's own; Cloud Monitoring's 48-column
    mosaic doubles it)."""

    x: int
    y: int
    width: int
    height: int


GRID_COLUMNS = 24
_SIZES = {PanelKind.TIME_SERIES: (12, 8), PanelKind.STAT: (6, 4)}


def _bucket(family: names.Family) -> str:
    if family.kind is not names.Kind.HISTOGRAM:
        raise ValueError(f"{family.name} is a {family.kind}, not a histogram")
    return f"{family.name}_bucket"


def _quantile(family: names.Family, by: tuple[str, ...] = (), window: str = RATE_WINDOW) -> str:
    grouping = ", ".join(("le", *by))
    return (
        f"histogram_quantile({QUANTILE}, sum by ({grouping}) (rate({_bucket(family)}[{window}])))"
    )


def _mean(family: names.Family, window: str = RATE_WINDOW) -> str:
    return f"sum(rate({family.name}_sum[{window}])) / sum(rate({family.name}_count[{window}]))"


def _count(selector: str, window: str = EVENT_WINDOW) -> str:
    """How many events a counter counted across pods in ``window``, 0 when none: with
    :func:`~spotproof.observability.promql.events`, so a pod whose counter was already
    counting at its first scrape (a trainer resuming, a short-lived pod's final save) is
    counted, as the rules count it."""
    return f"sum({events(selector, window)}) or vector(0)"


TARGET_CLASS = label_name(TARGET_CLASS_LABEL, prefix="label_")
"""The series label kube-state-metrics gives the pod label ``spotproof.dev/target-class``."""
_POD = "namespace, pod, uid"
"""What identifies one pod across kube-state-metrics' series: ``uid`` as well, so that a
pod recreated under the same name (a JobSet's, a StatefulSet's) is not joined to the old."""
_PENDING = '(kube_pod_status_phase{phase="Pending"} == 1)'
_CLASSED = f'kube_pod_labels{{{TARGET_CLASS}!=""}}'

_PENDING_PANELS = (
    Panel(
        title="Pods Pending by target class",
        description="Pods waiting for a node, by the pool class they target.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.COUNT,
        queries=(
            Query(
                f"sum by ({TARGET_CLASS}) ({_PENDING} * on ({_POD}) "
                f"group_left ({TARGET_CLASS}) {_CLASSED})",
                f"{{{TARGET_CLASS}}}",
            ),
        ),
    ),
    Panel(
        title="Longest Pending wait by target class",
        description="Age of the oldest Pending pod of each target class: queued flex-start "
        "capacity can take hours, spot in a busy zone longer than its alert allows.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.SECONDS,
        queries=(
            Query(
                f"max by ({TARGET_CLASS}) ((time() - kube_pod_created) * on ({_POD}) "
                f"group_left ({TARGET_CLASS}) {_CLASSED} and on ({_POD}) {_PENDING})",
                f"{{{TARGET_CLASS}}}",
            ),
        ),
    ),
)

_TRAINER_PANELS = (
    Panel(
        title="Interruptions",
        description="Stop signals trainers received, and processes that ended without a final "
        "save (a hard kill: counted by the process that resumed from a periodic checkpoint), "
        "per hour.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.COUNT,
        queries=(
            Query(_count(names.STOP_SIGNALS.name), "stop signals"),
            Query(
                _count(f'{names.RESUMES.name}{{checkpoint="periodic"}}'),
                "ended without a final save",
            ),
        ),
    ),
    Panel(
        title="Steps lost",
        description="Steps trained past the newest committed checkpoint by processes that "
        "stopped without committing them, per hour: the work a restart trains again.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.COUNT,
        queries=(Query(_count(names.STEPS_LOST.name), "steps"),),
    ),
    Panel(
        title="Checkpoint age",
        description="Seconds since each trainer's newest committed checkpoint, beside the "
        "interval it expects between periodic ones. Both gauges read 0 until known (no "
        "commit yet, no step timed yet), which the queries leave out rather than draw as "
        "an age of 56 years.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.SECONDS,
        queries=(
            Query(f"time() - ({names.LAST_COMMIT_TIME.name} > 0)", "age {instance}"),
            Query(f"{names.INTERVAL_SECONDS.name} > 0", "expected interval {instance}"),
        ),
    ),
    Panel(
        title="Final saves by outcome",
        description="Final checkpoints on leaving, per hour: committed, refused by the store, "
        "or late (abandoned, out of grace).",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.COUNT,
        queries=(
            Query(
                f"sum by (outcome) ({events(names.FINAL_SAVES.name, EVENT_WINDOW)})",
                "{outcome}",
            ),
        ),
    ),
    Panel(
        title="Save and restore durations (p95)",
        description="Seconds from a checkpoint's upload to its commit, by kind, and to find, "
        "verify and load the one a process resumed from.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.SECONDS,
        queries=(
            Query(_quantile(names.SAVE_SECONDS, by=("kind",)), "save {kind}"),
            Query(_quantile(names.RESTORE_SECONDS, window=EVENT_WINDOW), "restore"),
        ),
    ),
    Panel(
        title="Training stall per save",
        description="Seconds a periodic save held training up: the wait for the previous "
        "upload plus the copy of the state.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.SECONDS,
        queries=(
            Query(_quantile(names.STALL_SECONDS), "p95"),
            Query(_mean(names.STALL_SECONDS), "mean"),
        ),
    ),
)

_BATCH_PANELS = (
    Panel(
        title="Batch throughput",
        description="Work items computed and stored per second, across workers.",
        kind=PanelKind.TIME_SERIES,
        unit=Unit.PER_SECOND,
        queries=(Query(f"sum(rate({names.ITEMS_DONE.name}[{RATE_WINDOW}]))", "done"),),
    ),
    Panel(
        title="Batch items in flight",
        description="Work items leased and not yet finished, across workers.",
        kind=PanelKind.STAT,
        unit=Unit.COUNT,
        queries=(Query(f"sum({names.ITEMS_IN_FLIGHT.name})"),),
    ),
    Panel(
        title="Dead letters (last 24 h)",
        description="Work items moved to the dead-letter queue on their last allowed delivery.",
        kind=PanelKind.STAT,
        unit=Unit.COUNT,
        queries=(Query(_count(names.ITEMS_DEAD_LETTERED.name, SUMMARY_WINDOW)),),
    ),
)

PANELS: tuple[Panel, ...] = _TRAINER_PANELS + _PENDING_PANELS + _BATCH_PANELS
"""Every panel of the dashboard, in reading order: the one list both renderings draw."""


def layout(panels: tuple[Panel, ...] = PANELS) -> Iterator[tuple[Panel, Placement]]:
    """Each panel with its place: left to right, a new row when the next does not fit."""
    x = y = row_height = 0
    for panel in panels:
        width, height = _SIZES[panel.kind]
        if x + width > GRID_COLUMNS:
            x, y, row_height = 0, y + row_height, 0
        yield panel, Placement(x, y, width, height)
        x += width
        row_height = max(row_height, height)
