"""What the alert tests share: the rule files under test, synthetic series, and promtool
cases that each run under both storage semantics a stack's rules meet.

**Two storages.** Amazon's and Azure's managed Prometheus store a scraped series as a plain
Prometheus does. GKE's Managed Service for Prometheus (GMP) does not, for counters and
histograms: its exporter drops the first sample it sees of each such series and stores
every later one less that first value, until the series decreases, after which values are
stored as they come (GoogleCloudPlatform/prometheus-engine v0.15.3, b07ac7e,
``pkg/export/series_cache.go`` ``getResetAdjusted``, called for counters and for each
histogram series in ``pkg/export/transform.go``; the package moved to GMP's Prometheus fork
after v0.15.3, commit 7178582). Gauges, ``up`` among them (``export.go``,
``internalMetricMetadata``), are stored as scraped. Cloud Monitoring takes no staleness
markers (``transform.go``: "Staleness markers are currently not supported"), so a series
that ends is simply not sampled again. :func:`as_gmp_stores` turns a case's series into
what GMP would store, and every case runs both ways unless it says otherwise.

Each test module keeps its own :class:`PromtoolSuite`: its cases run in one promtool call.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.catalog import Cloud
from spotproof.fleet.monitoring import Monitoring, PendingMinutes
from spotproof.observability.model import rule_file
from spotproof.observability.queues import PUBSUB_OLDEST_UNACKED
from spotproof.observability.rules import rule_groups
from spotproof.runtime.metrics import names

PROMETHEUS, GMP = "prometheus", "gmp"
STORAGES = (PROMETHEUS, GMP)
ASSUMED = 0.05
"""Reclaims per node-hour the rules are told the advice assumes (threshold 3 x 0.05)."""
SUBSCRIPTION = "projects/ml-prod/subscriptions/spotproof-work"
WORKLOAD_NAMESPACES = ("training", "batch")
CUSTOM = Monitoring(
    pending_minutes=PendingMinutes(spot_gpu=5),
    checkpoint_age_intervals=2,
    steps_lost_per_hour=100,
    queue_age_minutes=10,
    reclaim_rate_factor=2,
    scrape_interval_seconds=30,
    target_down_minutes=2,
    crash_loop_restarts=2,
    step_stall_intervals=3,
)


def _rules(monitoring: Monitoring, cloud: Cloud, batch_queue: str | None) -> Callable[[], Any]:
    return lambda: rule_groups(
        monitoring,
        cloud=cloud,
        assumed_reclaims_per_node_hour=ASSUMED,
        batch_queue=batch_queue,
        namespaces=WORKLOAD_NAMESPACES,
    )


RULES: dict[str, Callable[[], Any]] = {
    "gke": _rules(Monitoring(), Cloud.GKE, SUBSCRIPTION),
    "eks": _rules(Monitoring(), Cloud.EKS, "spotproof-work"),
    "aks": _rules(Monitoring(), Cloud.AKS, "spotproof-work"),
    "minutely": _rules(Monitoring(scrape_interval_seconds=60), Cloud.GKE, None),
    "eks-minutely": _rules(Monitoring(scrape_interval_seconds=60), Cloud.EKS, None),
    "custom": _rules(CUSTOM, Cloud.GKE, SUBSCRIPTION),
}
TRAINER = {"namespace": "training", "pod": "trainer-0", "job": "trainers"}
WORKER = {"namespace": "batch", "pod": "worker-0", "job": "workers"}
POD = {"namespace": "training", "pod": "trainer-0", "uid": "u0"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def alert(labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    return {
        "exp_labels": labels,
        "exp_annotations": {"summary": summary, "description": description},
    }


def description(rules: str, name: str, **labels: str) -> str:
    """The description of the one rule of that name (and those labels): a text without
    templates, which promtool renders as it is."""
    found = [
        rule.annotations["description"]
        for group in RULES[rules]()
        for rule in group.rules
        if rule.alert == name and labels.items() <= rule.labels.items()
    ]
    assert len(found) == 1, found
    return found[0]


# --- what GMP stores ---------------------------------------------------------------------

CUMULATIVE_ELSEWHERE = frozenset(
    {
        "kube_pod_container_status_restarts_total",
        "karpenter_nodeclaims_disrupted_total",
    }
)
"""Counters of other exporters the rules read: kube-state-metrics v2.20.0
(``docs/metrics/workload/pod-metrics.md``: Counter) and Karpenter (kubernetes-sigs/karpenter
v1.6.2 ``pkg/metrics/metrics.go``, ``NewPrometheusCounter``)."""
GAUGES_ELSEWHERE = re.compile(rf"kube_[a-z_]+|up|{re.escape(PUBSUB_OLDEST_UNACKED)}")
"""kube-state-metrics' other series the rules read are gauges (same page, and
``job-metrics.md``); ``up`` is Prometheus's own; Pub/Sub's is Cloud Monitoring's, which no
collector exports."""
_HISTOGRAM_SERIES = {
    f"{family.name}_{suffix}"
    for family in names.ALL
    if family.kind is names.Kind.HISTOGRAM
    for suffix in ("bucket", "sum", "count")
}
_COUNTERS = {family.name for family in names.ALL if family.kind is names.Kind.COUNTER}
_GAUGES = {family.name for family in names.ALL if family.kind is names.Kind.GAUGE}
_EXPANDING = re.compile(r"(-?[0-9.]+)(?:([+-])([0-9.]+))?x([0-9]+)")


def cumulative(name: str) -> bool:
    """Whether GMP stores ``name`` as a cumulative (reset-adjusted) series; a name of no
    known type is refused, so a new case says what its series are."""
    if name in _COUNTERS or name in _HISTOGRAM_SERIES or name in CUMULATIVE_ELSEWHERE:
        return True
    if name in _GAUGES or GAUGES_ELSEWHERE.fullmatch(name) or ":" in name:
        return False  # a name with a colon is a recorded series: GMP writes them as gauges
    raise ValueError(f"{name}: no known type; add it to CUMULATIVE_ELSEWHERE or the gauges")


def expand(values: str) -> list[float | str | None]:
    """promtool's series notation, one entry per sample: a number, ``"stale"``, or None
    for a missing sample (``a+bxn`` is n+1 samples, ``_xn`` n missing ones)."""
    found: list[float | str | None] = []
    for token in values.split():
        if token == "stale":
            found.append("stale")
        elif token == "_":
            found.append(None)
        elif token.startswith("_x"):
            found += [None] * int(token[2:])
        elif (match := _EXPANDING.fullmatch(token)) is not None:
            start, sign, step, times = match.groups()
            delta = float(step or 0) * (-1 if sign == "-" else 1)
            found += [float(start) + i * delta for i in range(int(times) + 1)]
        else:
            found.append(float(token))
    return found


def _shown(value: float | str | None) -> str:
    if value is None:
        return "_"
    if isinstance(value, str):
        return value
    return str(int(value)) if value == int(value) else repr(value)


def as_gmp_stores(input_series: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """``input_series`` as GMP would store them (see the module): staleness markers gone;
    a cumulative series' first sample dropped and each later one less it, until a value
    below the one before, from which values are kept as they are."""
    stored = []
    for each in input_series:
        name = each["series"].split("{", 1)[0]
        samples: list[float | str | None] = [
            None if value == "stale" else value for value in expand(each["values"])
        ]
        if cumulative(name):
            start: float | None = None
            last = 0.0
            for index, value in enumerate(samples):
                if not isinstance(value, float):
                    continue
                if start is None:
                    start, last, samples[index] = value, value, None
                    continue
                if value < last:
                    start = 0.0
                last, samples[index] = value, value - start
        stored.append({**each, "values": " ".join(_shown(v) for v in samples)})
    return stored


# --- cases --------------------------------------------------------------------------------


@dataclass
class Case:
    """One promtool test group: the series it is fed and the alerts it must see."""

    input_series: list[dict[str, str]]
    expect: list[tuple[str, str, list[dict[str, Any]]]]
    """(evaluation time, alert name, the alerts firing then: empty for silence)."""
    interval: str = "1m"
    rules: str = "gke"
    evaluation_interval: str = "1m"
    """How often promtool evaluates the rules; coarser for a case spanning a day."""

    def test_group(self, storage: str) -> dict[str, Any]:
        stored = as_gmp_stores(self.input_series) if storage == GMP else self.input_series
        return {
            "interval": self.interval,
            "input_series": stored,
            "alert_rule_test": [
                {"eval_time": at, "alertname": name, "exp_alerts": alerts}
                for at, name, alerts in self.expect
            ],
        }


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is missing: `make prometheus-tools` installs it (Debian's prometheus "
            "package); the alert rules are tested with the real one",
            pytrace=False,
        )
    return found


def write_rule_files(folder: Path) -> dict[str, Path]:
    """Each rule set of :data:`RULES` as the rule file the clouds are given."""
    files = {}
    for name, build in RULES.items():
        files[name] = folder / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump(rule_file(build()), sort_keys=False))
    return files


class PromtoolSuite:
    """One test module's promtool cases, run together in one promtool call."""

    def __init__(self) -> None:
        self.cases: dict[str, tuple[Callable[[], Case], tuple[str, ...]]] = {}

    def case(
        self, build: Callable[[], Case] | None = None, *, storages: tuple[str, ...] = STORAGES
    ) -> Any:
        """The test named after ``build``, one per storage in ``storages``: it passes when
        promtool reports that case's file, under that storage, a success."""

        def register(build: Callable[[], Case]) -> Callable[..., None]:
            self.cases[build.__name__] = (build, storages)

            @pytest.mark.parametrize("storage", storages)
            def test(promtool_outcomes: dict[str, str], storage: str) -> None:
                outcome = promtool_outcomes[f"{build.__name__}@{storage}"]
                assert outcome.strip() == "SUCCESS", outcome

            test.__name__, test.__doc__ = build.__name__, build.__doc__
            return test

        return register(build) if build is not None else register

    def run(self, folder: Path) -> dict[str, str]:
        """Every case's outcome under each of its storages, by ``name@storage``."""
        rule_files = write_rule_files(folder)
        paths = []
        for name, (build, storages) in self.cases.items():
            case = build()
            for storage in storages:
                path = folder / f"{name}@{storage}.test.yaml"
                test = {
                    "rule_files": [str(rule_files[case.rules])],
                    "evaluation_interval": case.evaluation_interval,
                    "tests": [case.test_group(storage)],
                }
                path.write_text(yaml.safe_dump(test, sort_keys=False))
                paths.append(path)
        # One stream: promtool writes each file's name to stdout and its failures to stderr.
        report = subprocess.run(
            [promtool(), "test", "rules", *map(str, paths)],
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
        ).stdout
        outcomes = {}
        for chunk in report.split("Unit Testing: ")[1:]:
            path, _, outcome = chunk.partition("\n")
            outcomes[Path(path.strip()).name.removesuffix(".test.yaml")] = outcome
        expected = {f"{n}@{s}" for n, (_, storages) in self.cases.items() for s in storages}
        missing = expected - set(outcomes)
        assert not missing, f"promtool reported no outcome for {sorted(missing)}:\n{report}"
        return outcomes
