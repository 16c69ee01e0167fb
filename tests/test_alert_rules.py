"""Every alert, run by the real ``promtool`` (Debian's prometheus package) against
synthetic series: each fires past its threshold and stays silent at its edge, with the
exact labels and annotations promtool renders. The rule files are the ones
``rule_file(rule_groups(...))`` writes, and each test's promtool case is written here, in
the test, so that neither can drift from the other. All cases run in one promtool call,
each twice: as a plain Prometheus stores its series (Amazon's, Azure's managed Prometheus)
and as GKE's Managed Service for Prometheus does (``tests.promtool_cases``).

A counter's series is written as the runtime serves it: at 0 in the process's first scrape,
whatever it counted before (``runtime.metrics.recorders.Registry``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.catalog import Cloud
from spotproof.fleet.monitoring import Monitoring
from spotproof.observability.model import Rule, duration_seconds
from spotproof.observability.queues import GLOBAL_GROUP, PUBSUB_OLDEST_UNACKED
from spotproof.observability.rules import KSM_REQUIREMENT, rule_groups
from spotproof.runtime import metrics
from spotproof.runtime.metrics import TrainerMetrics, names
from spotproof.smoke.emulation.object_stores import free_port
from tests.promtool_cases import (
    ASSUMED,
    GMP,
    POD,
    PROMETHEUS,
    RULES,
    TRAINER,
    WORKER,
    Case,
    PromtoolSuite,
    alert,
    description,
    promtool,
    series,
    write_rule_files,
)
from tests.test_trainer_metrics import scrape, value

pytestmark = pytest.mark.processes

SUITE = PromtoolSuite()
promtool_case = SUITE.case


@pytest.fixture(scope="module")
def rule_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_rule_files(tmp_path_factory.mktemp("rules"))


@pytest.fixture(scope="module")
def promtool_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every case's outcome, under each storage, from one ``promtool test rules``."""
    return SUITE.run(tmp_path_factory.mktemp("cases"))


# --- the rule files -----------------------------------------------------------------------


@pytest.mark.parametrize("rules", sorted(RULES))
def test_promtool_checks_the_rule_file(rules: str, rule_files: dict[str, Path]) -> None:
    run = subprocess.run(
        [promtool(), "check", "rules", str(rule_files[rules])],
        check=False,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


# --- GPU pods Pending ---------------------------------------------------------------------


def _pending_pod(target_class: str, scheduled_after: int | None = None, length: int = 40) -> list:
    """A pod created at 0 and Pending, with its target class; Running from
    ``scheduled_after`` (steps of the case's interval) when given."""
    pending = (
        f"1x{length}"
        if scheduled_after is None
        else f"1x{scheduled_after} 0x{length - scheduled_after}"
    )
    return [
        series("kube_pod_created", {**POD, "job": "kube-state-metrics"}, f"0x{length}"),
        series(
            "kube_pod_status_phase",
            {**POD, "job": "kube-state-metrics", "phase": "Pending"},
            pending,
        ),
        series(
            "kube_pod_labels",
            {**POD, "job": "kube-state-metrics", "label_spotproof_dev_target_class": target_class},
            f"1x{length}",
        ),
    ]


def _pending_alert(target_class: str, waited: str, rules: str = "gke") -> dict[str, Any]:
    return alert(
        {**POD, "target_class": target_class, "severity": "warning"},
        f"GPU pod training/trainer-0 ({target_class}) has been Pending for {waited}",
        description(rules, "SpotproofGpuPodPendingTooLong", target_class=target_class),
    )


@promtool_case
def test_spot_gpu_pod_pending_past_30_minutes_fires() -> Case:
    """Silent at exactly 30 minutes (the threshold), firing a minute later."""
    return Case(
        _pending_pod("spot-gpu"),
        [
            ("30m", "SpotproofGpuPodPendingTooLong", []),
            ("31m", "SpotproofGpuPodPendingTooLong", [_pending_alert("spot-gpu", "31m 0s")]),
        ],
    )


@promtool_case
def test_on_demand_gpu_pod_pending_past_15_minutes_fires() -> Case:
    return Case(
        _pending_pod("on-demand-gpu"),
        [
            ("15m", "SpotproofGpuPodPendingTooLong", []),
            ("16m", "SpotproofGpuPodPendingTooLong", [_pending_alert("on-demand-gpu", "16m 0s")]),
        ],
    )


@promtool_case
def test_flex_start_pod_may_wait_a_day_before_the_alert() -> Case:
    return Case(
        _pending_pod("flex-start", length=150),
        [
            ("23h", "SpotproofGpuPodPendingTooLong", []),
            ("24h", "SpotproofGpuPodPendingTooLong", []),
            (
                "24h10m",
                "SpotproofGpuPodPendingTooLong",
                [_pending_alert("flex-start", "1d 0h 10m 0s")],
            ),
        ],
        interval="10m",
        evaluation_interval="10m",
    )


@promtool_case
def test_pod_scheduled_before_its_threshold_stays_silent() -> Case:
    return Case(
        _pending_pod("spot-gpu", scheduled_after=20),
        [("35m", "SpotproofGpuPodPendingTooLong", [])],
    )


@promtool_case
def test_pending_pod_without_a_target_class_is_not_a_gpu_workload() -> Case:
    no_class = [s for s in _pending_pod("spot-gpu") if "kube_pod_labels" not in s["series"]]
    no_class.append(series("kube_pod_labels", {**POD, "job": "kube-state-metrics"}, "1x40"))
    return Case(no_class, [("35m", "SpotproofGpuPodPendingTooLong", [])])


@promtool_case
def test_two_clusters_alert_apart_when_read_together() -> Case:
    """GKE's alert policies read every cluster of the project: the same pod name Pending in
    one and Running in the other is one alert, naming its cluster."""

    def in_cluster(name: str, pod: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{**s, "series": s["series"].replace("{", f'{{cluster="{name}", ', 1)} for s in pod]

    fired = _pending_alert("spot-gpu", "31m 0s")
    fired["exp_labels"]["cluster"] = "gke-prod"
    return Case(
        in_cluster("gke-prod", _pending_pod("spot-gpu"))
        + in_cluster("gke-stage", _pending_pod("spot-gpu", scheduled_after=2)),
        [("31m", "SpotproofGpuPodPendingTooLong", [fired])],
    )


@promtool_case
def test_pending_threshold_follows_the_stack_setting() -> Case:
    """pendingMinutes.spot-gpu: 5."""
    return Case(
        _pending_pod("spot-gpu"),
        [
            ("5m", "SpotproofGpuPodPendingTooLong", []),
            (
                "6m",
                "SpotproofGpuPodPendingTooLong",
                [_pending_alert("spot-gpu", "6m 0s", "custom")],
            ),
        ],
        rules="custom",
    )


# --- checkpoints --------------------------------------------------------------------------


def _trainer(last_commit: str, interval: str = "600x200", pod: str = "trainer-0") -> list:
    """A trainer scraped every 15 s (the default scrape interval) whose checkpoints are
    expected every 600 s."""
    labels = {**TRAINER, "pod": pod}
    return [
        series("spotproof_checkpoint_interval_seconds", labels, interval),
        series("spotproof_checkpoint_last_commit_timestamp_seconds", labels, last_commit),
    ]


def _overdue(waited: str, rules: str = "gke", pod: str = "trainer-0") -> dict[str, Any]:
    return alert(
        {"namespace": "training", "pod": pod, "severity": "critical"},
        f"Trainer training/{pod} has committed no checkpoint for {waited}",
        description(rules, "SpotproofCheckpointOverdue"),
    )


@promtool_case
def test_trainer_without_a_commit_for_three_intervals_is_overdue() -> Case:
    """Committed at 60 s, interval 600 s: over 1800 s from 32m, firing 5 minutes later."""
    return Case(
        _trainer("60x200"),
        [
            ("31m", "SpotproofCheckpointOverdue", []),
            ("36m", "SpotproofCheckpointOverdue", []),
            ("37m", "SpotproofCheckpointOverdue", [_overdue("36m 0s")]),
        ],
        interval="15s",
    )


@promtool_case
def test_trainer_that_never_committed_is_overdue_three_intervals_after_its_start() -> Case:
    return Case(
        _trainer("0x200"),
        [
            ("34m", "SpotproofCheckpointOverdue", []),
            ("35m", "SpotproofCheckpointOverdue", [_overdue("35m 15s")]),
        ],
        interval="15s",
    )


@promtool_case
def test_restarted_trainer_is_not_overdue_before_it_has_run_three_intervals() -> Case:
    """trainer-0 stops at 40m; trainer-1 starts then, knowing only the old checkpoint."""
    return Case(
        _trainer("60x160 stale", interval="600x160 stale")
        + _trainer("_x160 60x200", interval="_x160 600x200", pod="trainer-1"),
        [
            ("65m", "SpotproofCheckpointOverdue", []),
            ("74m", "SpotproofCheckpointOverdue", []),
            ("75m", "SpotproofCheckpointOverdue", [_overdue("35m 15s", pod="trainer-1")]),
        ],
        interval="15s",
    )


@promtool_case
def test_trainer_without_a_known_interval_is_never_overdue() -> Case:
    return Case(
        _trainer("60x300", interval="0x300"),
        [("70m", "SpotproofCheckpointOverdue", [])],
        interval="15s",
    )


@promtool_case
def test_overdue_intervals_follow_the_stack_setting() -> Case:
    """checkpointAgeIntervals: 2, scraped every 30 s: over 1200 s from 22m."""
    return Case(
        _trainer("60x100"),
        [
            ("26m", "SpotproofCheckpointOverdue", []),
            ("27m", "SpotproofCheckpointOverdue", [_overdue("26m 0s", "custom")]),
        ],
        interval="30s",
        rules="custom",
    )


def _final_save(outcome: str) -> dict[str, Any]:
    return alert(
        {"namespace": "training", "pod": "trainer-0", "outcome": outcome, "severity": "warning"},
        f"A final checkpoint of training/trainer-0 was {outcome}",
        description("gke", "SpotproofFinalSaveFailed"),
    )


def _final_saves(committed: str, refused: str, late: str) -> list:
    name = "spotproof_final_saves_total"
    return [
        series(name, {**TRAINER, "outcome": "committed"}, committed),
        series(name, {**TRAINER, "outcome": "refused"}, refused),
        series(name, {**TRAINER, "outcome": "late"}, late),
    ]


@promtool_case
def test_late_final_save_fires_for_an_hour() -> Case:
    """The trainer counts it on its way out: one last scrape, then its series end."""
    return Case(
        _final_saves("0x11 stale", "0x11 stale", "0x10 1 stale"),
        [
            ("10m", "SpotproofFinalSaveFailed", []),
            ("11m", "SpotproofFinalSaveFailed", [_final_save("late")]),
            ("70m", "SpotproofFinalSaveFailed", [_final_save("late")]),
            ("72m", "SpotproofFinalSaveFailed", []),
        ],
    )


@promtool_case
def test_refused_final_save_counted_in_a_trainers_second_and_last_scrape_fires() -> Case:
    """A trainer reclaimed one scrape after it started: its counters read 0, then 1."""
    return Case(
        _final_saves("_x9 0 0 stale", "_x9 0 1 stale", "_x9 0 0 stale"),
        [("11m", "SpotproofFinalSaveFailed", [_final_save("refused")])],
    )


@promtool_case(storages=(PROMETHEUS,))
def test_refused_final_save_in_a_trainers_only_scrape_fires_where_the_first_sample_is_kept() -> (
    Case
):
    """A single sample, which ``increase()`` alone cannot see: the rules also count what a
    series that began in the window already holds."""
    return Case(
        _final_saves("_x10 0 stale", "_x10 1 stale", "_x10 0 stale"),
        [("11m", "SpotproofFinalSaveFailed", [_final_save("refused")])],
    )


@promtool_case(storages=(GMP,))
def test_a_count_in_a_processs_only_scrape_is_lost_where_the_first_sample_is_dropped() -> Case:
    """What no rule can see under GMP: a process scraped once, on its way out."""
    return Case(
        _final_saves("_x10 0 stale", "_x10 1 stale", "_x10 0 stale"),
        [("11m", "SpotproofFinalSaveFailed", [])],
    )


@promtool_case
def test_committed_final_save_is_silent() -> Case:
    return Case(
        _final_saves("0x10 1 stale", "0x11 stale", "0x11 stale"),
        [("11m", "SpotproofFinalSaveFailed", [])],
    )


def _resumed(checkpoint: str, values: str = "_x5 0 1x69") -> list:
    labels = {**TRAINER, "pod": "trainer-1", "checkpoint": checkpoint}
    return [series("spotproof_resumes_total", labels, values)]


@promtool_case
def test_resume_from_a_periodic_checkpoint_fires_for_an_hour() -> Case:
    """The new process counts it before its first scrape, which reads it at 0: it shows
    from the second."""
    return Case(_resumed("periodic"), _RESUME_FIRES_FOR_AN_HOUR)


def _resumed_alert() -> dict[str, Any]:
    return alert(
        {"namespace": "training", "pod": "trainer-1", "severity": "info"},
        "Trainer training/trainer-1 resumed from a periodic checkpoint",
        description("gke", "SpotproofResumedFromPeriodicCheckpoint"),
    )


_RESUME_FIRES_FOR_AN_HOUR = [
    ("5m", "SpotproofResumedFromPeriodicCheckpoint", []),
    ("6m", "SpotproofResumedFromPeriodicCheckpoint", [_resumed_alert()]),
    ("65m", "SpotproofResumedFromPeriodicCheckpoint", [_resumed_alert()]),
    ("67m", "SpotproofResumedFromPeriodicCheckpoint", []),
]


@promtool_case
def test_a_resume_a_served_trainer_counted_before_its_first_scrape_fires() -> Case:
    """The series is two real scrapes of a trainer's endpoint, the resume counted before
    the first one; then the second's value, once a minute."""
    served = metrics.served({"METRICS_PORT": str(free_port())}, names.TRAINER)
    assert served is not None
    TrainerMetrics(served.registry, 10).observe(
        {"event": "resumed", "step": 40, "checkpoint": "periodic"}
    )
    first, second = (
        value(scrape(served.endpoint.port), names.RESUMES.name, checkpoint="periodic")
        for _ in range(2)
    )
    served.endpoint.close()
    values = f"_x5 {first:g} {second:g}x69"
    return Case(_resumed("periodic", values), _RESUME_FIRES_FOR_AN_HOUR)


@promtool_case(storages=(GMP,))
def test_a_resume_served_at_one_in_the_first_scrape_is_lost_where_that_sample_is_dropped() -> Case:
    """Why the runtime holds its counts for its first scrape: served as before, GMP would
    store the resume as 0 and the alert would never fire."""
    return Case(
        _resumed("periodic", values="_x5 1x70"),
        [("6m", "SpotproofResumedFromPeriodicCheckpoint", [])],
    )


@promtool_case
def test_resume_from_a_final_save_is_silent() -> Case:
    return Case(_resumed("final"), [("6m", "SpotproofResumedFromPeriodicCheckpoint", [])])


def _steps_lost(lost: str) -> list:
    return [
        series("spotproof_checkpoint_interval_steps", TRAINER, "50x40"),
        series("spotproof_steps_lost_total", TRAINER, lost),
    ]


def _lost(steps: int, rules: str = "gke") -> dict[str, Any]:
    return alert(
        {"namespace": "training", "severity": "warning"},
        f"Trainers in training lost {steps} steps in the last hour",
        description(rules, "SpotproofStepsLostAboveBudget"),
    )


@promtool_case
def test_steps_lost_beyond_one_interval_an_hour_fire() -> Case:
    return Case(
        _steps_lost("0x10 60x30"),
        [
            ("10m", "SpotproofStepsLostAboveBudget", []),
            ("11m", "SpotproofStepsLostAboveBudget", [_lost(60)]),
        ],
    )


@promtool_case
def test_steps_lost_of_exactly_one_interval_are_within_budget() -> Case:
    return Case(_steps_lost("0x10 50x30"), [("11m", "SpotproofStepsLostAboveBudget", [])])


@promtool_case
def test_steps_lost_budget_follows_the_stack_setting() -> Case:
    """stepsLostPerHour: 100, whatever the interval."""
    return Case(
        _steps_lost("0x10 100x5 120x20"),
        [
            ("16m", "SpotproofStepsLostAboveBudget", []),
            ("17m", "SpotproofStepsLostAboveBudget", [_lost(120, "custom")]),
        ],
        rules="custom",
    )


# --- reclaims -----------------------------------------------------------------------------


def _trainer_run(pod: str, start: int, steps: int, **counters: str) -> list:
    """A trainer scraped every minute from sample ``start`` for ``steps`` samples, then gone;
    ``counters``: its counters' values, by series (after the same leading gap)."""
    gap = f"_x{start} " if start else ""
    labels = {**TRAINER, "pod": pod}
    found = [series("spotproof_training_step", labels, f"{gap}0+1x{steps - 1} stale")]
    for selector, values in counters.items():
        name, _, checkpoint = selector.partition(":")
        extra = {"checkpoint": checkpoint} if checkpoint else {}
        found.append(series(name, {**labels, **extra}, f"{gap}{values} stale"))
    return found


HOURS_3 = 180
"""Samples in three hours, scraped every minute (the ``minutely`` rules)."""


@promtool_case
def test_two_interruptions_in_three_pod_hours_exceed_three_times_the_assumed_rate() -> Case:
    """A SIGTERM to trainer-0 near 3h, then trainer-1 resuming from a periodic checkpoint
    (its predecessor left without notice), seen at its second scrape: 2 in 3 pod-hours,
    0.66 against 3 x 0.05."""
    runs = _trainer_run(
        "trainer-0", 0, HOURS_3, spotproof_stop_signals_total=f"0x{HOURS_3 - 2} 1"
    ) + _trainer_run("trainer-1", HOURS_3, 10, **{"spotproof_resumes_total:periodic": "0 1x8"})
    fired = alert(
        {"namespace": "training", "severity": "warning"},
        "Trainers in training see 0.659 interruptions per pod-hour",
        description("gke", "SpotproofReclaimRateAboveAssumed"),
    )
    return Case(
        runs,
        [
            ("3h", "SpotproofReclaimRateAboveAssumed", []),
            ("3h1m", "SpotproofReclaimRateAboveAssumed", [fired]),
        ],
        rules="minutely",
    )


@promtool_case
def test_one_interruption_is_never_a_rate() -> Case:
    runs = _trainer_run(
        "trainer-0", 0, HOURS_3, spotproof_stop_signals_total=f"0x{HOURS_3 - 2} 1"
    ) + _trainer_run("trainer-1", HOURS_3, 30, **{"spotproof_resumes_total:final": "0 1x28"})
    return Case(runs, [("3h20m", "SpotproofReclaimRateAboveAssumed", [])], rules="minutely")


@promtool_case
def test_interruptions_within_three_times_the_assumed_rate_are_silent() -> Case:
    """2 in 24 pod-hours (four trainers for 6 hours) is 0.083, under 0.15."""
    runs = [
        s
        for index in range(4)
        for s in _trainer_run(
            f"trainer-{index}",
            0,
            2 * HOURS_3,
            spotproof_stop_signals_total=f"0x{HOURS_3} 1x{HOURS_3 - 2}"
            if index < 2
            else f"0x{2 * HOURS_3 - 1}",
        )
    ]
    return Case(runs, [("5h59m", "SpotproofReclaimRateAboveAssumed", [])], rules="minutely")


# --- batch --------------------------------------------------------------------------------


def _workers(in_flight: str, done: str, already_done: str = "0x40") -> list:
    return [
        series("spotproof_batch_items_in_flight", WORKER, in_flight),
        series("spotproof_batch_items_done_total", WORKER, done),
        series("spotproof_batch_items_already_done_total", WORKER, already_done),
    ]


@promtool_case
def test_dead_lettered_items_fire() -> Case:
    fired = alert(
        {"namespace": "batch", "severity": "warning"},
        "2 batch items in batch went to the dead-letter queue in the last hour",
        description("gke", "SpotproofBatchItemsDeadLettered"),
    )
    return Case(
        [series("spotproof_batch_items_dead_lettered_total", WORKER, "0x5 2x30")],
        [
            ("5m", "SpotproofBatchItemsDeadLettered", []),
            ("6m", "SpotproofBatchItemsDeadLettered", [fired]),
        ],
    )


@promtool_case
def test_workers_holding_items_without_finishing_any_for_30_minutes_are_stalled() -> Case:
    """Silent while the workers are younger than the window: new workers are not stalled."""
    fired = alert(
        {"namespace": "batch", "severity": "warning"},
        "Batch workers in batch held items but finished none in 30 minutes",
        description("gke", "SpotproofBatchWorkStalled"),
    )
    return Case(
        _workers("1x40", "0x40"),
        [
            ("29m", "SpotproofBatchWorkStalled", []),
            ("30m", "SpotproofBatchWorkStalled", [fired]),
        ],
    )


@promtool_case
def test_workers_finishing_items_are_not_stalled() -> Case:
    return Case(_workers("1x40", "0+1x40"), [("35m", "SpotproofBatchWorkStalled", [])])


@promtool_case
def test_items_found_already_done_count_as_progress() -> Case:
    return Case(_workers("1x40", "0x40", "0+1x40"), [("35m", "SpotproofBatchWorkStalled", [])])


@promtool_case
def test_pubsub_backlog_older_than_30_minutes_fires_on_gke() -> Case:
    """Read from Cloud Monitoring through Managed Service for Prometheus; another project's
    subscription of the same name is not this stack's."""
    labels = {"monitored_resource": "pubsub_subscription", "subscription_id": "spotproof-work"}
    fired = alert(
        {"project_id": "ml-prod", "subscription_id": "spotproof-work", "severity": "warning"},
        "The oldest unacknowledged item of spotproof-work is 31m 0s old",
        description("gke", "SpotproofBatchQueueMessagesTooOld"),
    )
    return Case(
        [
            series(PUBSUB_OLDEST_UNACKED, {**labels, "project_id": "ml-prod"}, "0+60x40"),
            series(PUBSUB_OLDEST_UNACKED, {**labels, "project_id": "other"}, "0+120x40"),
        ],
        [
            ("30m", "SpotproofBatchQueueMessagesTooOld", []),
            ("31m", "SpotproofBatchQueueMessagesTooOld", [fired]),
        ],
    )


# --- what promtool does not judge ---------------------------------------------------------


def _rules(groups: Any) -> list[Any]:
    return [rule for group in groups for rule in group.rules]


@pytest.mark.parametrize("rules", ["eks", "aks"])
def test_queue_age_outside_gke_is_not_a_prometheus_rule(rules: str) -> None:
    """SQS's age is a CloudWatch metric and Azure's queues report none: no rule could see
    it, so none pretends to."""
    groups = RULES[rules]()
    assert GLOBAL_GROUP not in {group.name for group in groups}
    assert not [r.alert for r in _rules(groups) if PUBSUB_OLDEST_UNACKED in r.expr]
    assert "SpotproofBatchWorkStalled" in {r.alert for r in _rules(groups)}


def test_a_stack_without_batch_work_gets_no_batch_rules() -> None:
    groups = rule_groups(Monitoring(), cloud=Cloud.GKE, assumed_reclaims_per_node_hour=ASSUMED)
    assert [group.name for group in groups] == [
        "spotproof-pending",
        "spotproof-checkpoints",
        "spotproof-reclaims",
        "spotproof-health",
    ]


def _metrics_read(prefix: str) -> set[str]:
    """Metric names the GKE rules query (a recorded series' name holds a colon)."""
    pattern = re.compile(rf"(?<![\w:]){prefix}[a-z_]+")
    return {name for rule in _rules(RULES["gke"]()) for name in pattern.findall(rule.expr)}


def test_every_kube_state_metric_the_rules_read_is_in_the_ksm_requirement() -> None:
    read = {
        m
        for rules in RULES
        for r in _rules(RULES[rules]())
        for m in re.findall(r"(?<![\w:])kube_[a-z_]+", r.expr)
    }
    assert read == set(KSM_REQUIREMENT.metrics)
    assert KSM_REQUIREMENT.arguments == (
        "--metric-labels-allowlist=pods=[spotproof.dev/target-class]",
    )


def test_every_spotproof_metric_the_rules_read_is_one_the_pods_serve() -> None:
    read = {
        m
        for r in _rules(RULES["gke"]())
        for m in re.findall(r"(?<![\w:])spotproof_[a-z_]+", r.expr)
    }
    assert read <= {family.name for family in names.ALL}


def test_every_alert_says_what_to_do_in_the_monitoring_docs() -> None:
    docs = (Path(__file__).parents[1] / "docs" / "monitoring.md").read_text()
    headings = set(re.findall(r"^### `?(\w+)`?$", docs, re.MULTILINE))
    alerts = {r.alert for rules in RULES for r in _rules(RULES[rules]()) if r.alert}
    assert alerts <= headings, sorted(alerts - headings)
    for rule in _rules(RULES["gke"]()):
        if rule.alert:
            assert f"docs/monitoring.md#{rule.alert.lower()}" in rule.annotations["description"]


# --- durations, read as Prometheus reads them ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("90s", 90),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("1y", 365 * 86400),
        ("1500ms", 1.5),
    ],
)
def test_a_prometheus_duration_is_read_in_seconds(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


DURATIONS = ("0", "90s", "1h30m", "1d12h", "1500ms", "", "10", "1m1h", "5 m", "PT1M", "1s1s")


def test_a_duration_is_read_exactly_when_promtool_accepts_it(tmp_path: Path) -> None:
    """Each duration as an alert's ``for``, checked by the real ``promtool check rules``."""
    for index, text in enumerate(DURATIONS):
        rule = Rule(alert="Probe", expr="vector(1)", for_="1m")
        group = {"name": "probe", "rules": [{**rule.to_dict(), "for": text}]}
        path = tmp_path / f"{index}.yaml"
        path.write_text(yaml.safe_dump({"groups": [group]}))
        checked = subprocess.run(
            [promtool(), "check", "rules", str(path)], check=False, capture_output=True, text=True
        )
        try:
            duration_seconds(text)
        except ValueError as refused:
            assert "\n" not in str(refused)
            read = False
        else:
            read = True
        assert read == (checked.returncode == 0), (text, checked.stderr)
