"""The alerts on whether workloads are seen and make progress (``observability.health``)
and on the cloud's own reclaim count (``observability.cloud_reclaims``), each run by the
real ``promtool`` as a plain Prometheus stores its series and as GKE's Managed Service for
Prometheus does (``tests.promtool_cases``): each fires past its threshold, stays silent at
its edge, and follows the stack's setting."""

from __future__ import annotations

from typing import Any

import pytest

from spotproof.catalog import Cloud
from spotproof.fleet.monitoring import Monitoring
from spotproof.observability.rules import rule_groups
from tests.promtool_cases import (
    ASSUMED,
    PROMETHEUS,
    TRAINER,
    Case,
    PromtoolSuite,
    alert,
    description,
    series,
)

pytestmark = pytest.mark.processes

SUITE = PromtoolSuite()
promtool_case = SUITE.case


@pytest.fixture(scope="module")
def promtool_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return SUITE.run(tmp_path_factory.mktemp("health"))


# --- a workload's metrics cannot be scraped ------------------------------------------------

TARGET = {**TRAINER, "target_class": "spot-gpu"}


def _down(rules: str = "gke") -> dict[str, Any]:
    return alert(
        {"namespace": "training", "pod": "trainer-0", "severity": "critical"},
        "The metrics of training/trainer-0 cannot be scraped",
        description(rules, "SpotproofMetricsTargetDown"),
    )


@promtool_case
def test_a_trainer_whose_scrapes_fail_for_five_minutes_is_down() -> Case:
    """A NetworkPolicy that keeps the collector out: every scrape fails from 11m."""
    return Case(
        [series("up", TARGET, "1x10 0x20")],
        [
            ("15m", "SpotproofMetricsTargetDown", []),
            ("16m", "SpotproofMetricsTargetDown", [_down()]),
        ],
    )


@promtool_case
def test_a_trainer_whose_scrapes_recover_within_the_threshold_is_not_down() -> Case:
    return Case(
        [series("up", TARGET, "1x10 0x3 1x20")],
        [("16m", "SpotproofMetricsTargetDown", [])],
    )


@promtool_case
def test_a_target_that_is_no_workload_of_the_stack_is_none_of_this_alerts_business() -> Case:
    """kube-state-metrics' own target carries no target class."""
    return Case(
        [series("up", {"job": "kube-state-metrics", "namespace": "kube-system"}, "0x30")],
        [("20m", "SpotproofMetricsTargetDown", [])],
    )


@promtool_case
def test_target_down_minutes_follow_the_stack_setting() -> Case:
    """targetDownMinutes: 2."""
    return Case(
        [series("up", TARGET, "1x10 0x20")],
        [
            ("12m", "SpotproofMetricsTargetDown", []),
            ("13m", "SpotproofMetricsTargetDown", [_down("custom")]),
        ],
        rules="custom",
    )


# --- a trainer whose step stands still ----------------------------------------------------


def _stepping(last_step: str, interval: str = "600x70") -> list[dict[str, str]]:
    """A trainer scraped every minute, its expected checkpoint interval 600 s; the sample
    at minute i of ``last_step`` is the Unix time of its last step."""
    return [
        series("spotproof_checkpoint_interval_seconds", TRAINER, interval),
        series("spotproof_training_last_step_timestamp_seconds", TRAINER, last_step),
    ]


STOPS_AT_10M = "0+60x10 600x60"
"""Steps every minute, the last at 10m (600 s)."""


def _stalled(waited: str, rules: str = "gke") -> dict[str, Any]:
    return alert(
        {"namespace": "training", "pod": "trainer-0", "severity": "critical"},
        f"Trainer training/trainer-0 has not advanced a step for {waited}",
        description(rules, "SpotproofTrainingStalled"),
    )


@promtool_case
def test_a_trainer_without_a_step_for_two_intervals_is_stalled() -> Case:
    """Stopped at 10m, interval 600 s: over 1200 s from 31m, firing 5 minutes later."""
    return Case(
        _stepping(STOPS_AT_10M),
        [
            ("35m", "SpotproofTrainingStalled", []),
            ("36m", "SpotproofTrainingStalled", [_stalled("26m 0s")]),
        ],
    )


@promtool_case
def test_a_trainer_whose_step_advances_is_never_stalled() -> Case:
    return Case(_stepping("0+60x70"), [("60m", "SpotproofTrainingStalled", [])])


@promtool_case
def test_a_trainer_without_a_known_interval_is_never_stalled() -> Case:
    return Case(_stepping(STOPS_AT_10M, interval="0x70"), [("60m", "SpotproofTrainingStalled", [])])


@promtool_case
def test_stall_intervals_follow_the_stack_setting() -> Case:
    """stepStallIntervals: 3, over 1800 s from 41m."""
    return Case(
        _stepping(STOPS_AT_10M),
        [
            ("45m", "SpotproofTrainingStalled", []),
            ("46m", "SpotproofTrainingStalled", [_stalled("36m 0s", "custom")]),
        ],
        rules="custom",
    )


# --- a failed Job -------------------------------------------------------------------------

KSM = {"job": "kube-state-metrics"}
LLM_JOB = {**KSM, "namespace": "training", "job_name": "llm"}


def _job_failed(true: str, false: str, labels: dict[str, str] = LLM_JOB) -> list:
    return [
        series("kube_job_failed", {**labels, "condition": "true"}, true),
        series("kube_job_failed", {**labels, "condition": "false"}, false),
    ]


def _failed_alert() -> dict[str, Any]:
    return alert(
        {"namespace": "training", "job_name": "llm", "severity": "critical"},
        "Job training/llm has failed",
        description("gke", "SpotproofJobFailed"),
    )


@promtool_case
def test_a_job_failed_for_ten_minutes_fires() -> Case:
    """Failed from 6m, and kept: a Job's ``ttlSecondsAfterFinished`` keeps it a week."""
    return Case(
        _job_failed("0x5 1x30", "1x5 0x30"),
        [
            ("15m", "SpotproofJobFailed", []),
            ("16m", "SpotproofJobFailed", [_failed_alert()]),
        ],
    )


@promtool_case
def test_a_jobsets_child_job_failed_for_a_restart_and_deleted_is_silent() -> Case:
    """The JobSet restarts the gang and deletes the failed child Job once its pods are
    gone, minutes later: no failed JobSet, no alert. Without a staleness marker (GMP) the
    last sample is read for a query's lookback more (Prometheus's default is five
    minutes), still short of ten."""
    return Case(
        _job_failed("0x5 1x3 stale", "1x5 0x3 stale"),
        [("15m", "SpotproofJobFailed", []), ("20m", "SpotproofJobFailed", [])],
    )


@promtool_case
def test_a_failed_job_of_another_namespace_is_not_the_stacks() -> Case:
    return Case(
        _job_failed("1x30", "0x30", {**LLM_JOB, "namespace": "data-team"}),
        [("20m", "SpotproofJobFailed", [])],
    )


# --- crashes that are not reclaims --------------------------------------------------------


def _pod_failures(values: str) -> list:
    return [series("kube_job_status_failed", LLM_JOB, values)]


def _trainer_crashing(failures: int, rules: str = "gke") -> dict[str, Any]:
    return alert(
        {"namespace": "training", "job_name": "llm", "severity": "warning"},
        f"Pods of Job training/llm failed {failures} times",
        description(rules, "SpotproofTrainerCrashLooping"),
    )


@promtool_case
def test_a_training_job_whose_pods_failed_three_times_is_crash_looping() -> Case:
    """``.status.failed`` counts what ``backoffLimit`` counts: reclaims the Job's
    podFailurePolicy ignores are not there."""
    return Case(
        _pod_failures("0x5 1x5 2x5 3x10"),
        [
            ("17m", "SpotproofTrainerCrashLooping", []),
            ("18m", "SpotproofTrainerCrashLooping", [_trainer_crashing(3)]),
        ],
    )


@promtool_case
def test_crash_loop_failures_follow_the_stack_setting() -> Case:
    """crashLoopRestarts: 2."""
    return Case(
        _pod_failures("0x5 1x5 2x5 3x10"),
        [
            ("11m", "SpotproofTrainerCrashLooping", []),
            ("12m", "SpotproofTrainerCrashLooping", [_trainer_crashing(2, "custom")]),
        ],
        rules="custom",
    )


RESTARTS = "kube_pod_container_status_restarts_total"
WORKER_CONTAINER = {**KSM, "namespace": "batch", "pod": "worker-0", "uid": "w0"}


def _restarts(values: str) -> list:
    return [series(RESTARTS, {**WORKER_CONTAINER, "container": "worker"}, values)]


def _container_crashing(restarts: int) -> dict[str, Any]:
    return alert(
        {"namespace": "batch", "pod": "worker-0", "container": "worker", "severity": "warning"},
        f"Container worker of batch/worker-0 restarted {restarts} times in an hour",
        description("gke", "SpotproofContainerCrashLooping"),
    )


@promtool_case
def test_a_new_workers_container_restarting_three_times_is_crash_looping() -> Case:
    return Case(
        _restarts("0x5 1x5 2x5 3x30"),
        [
            ("17m", "SpotproofContainerCrashLooping", []),
            ("18m", "SpotproofContainerCrashLooping", [_container_crashing(3)]),
        ],
    )


@promtool_case
def test_an_old_workers_restarts_count_within_the_last_hour_only() -> Case:
    """Ten restarts long ago, three more within the hour to 2h13m."""
    return Case(
        _restarts("10x120 11x5 12x5 13x5"),
        [
            ("2h12m", "SpotproofContainerCrashLooping", []),
            ("2h13m", "SpotproofContainerCrashLooping", [_container_crashing(3)]),
        ],
    )


@promtool_case
def test_restarts_spread_over_hours_are_not_a_crash_loop() -> Case:
    return Case(
        _restarts("0x60 1x60 2x60 3x60"),
        [("3h", "SpotproofContainerCrashLooping", [])],
    )


# --- reclaims the cloud counted (EKS: Karpenter) ------------------------------------------

SPOT_NODE = {**KSM, "label_spotproof_dev_pool_class": "spot-gpu"}


def _spot_nodes(count: int, samples: int = 360) -> list:
    return [
        series("kube_node_labels", {**SPOT_NODE, "node": f"node-{i}"}, f"1x{samples}")
        for i in range(count)
    ]


def _interrupted(values: str, reason: str = "spot_interrupted") -> list:
    labels = {"job": "karpenter", "reason": reason, "nodepool": "gpu-spot"}
    return [
        series("karpenter_nodeclaims_disrupted_total", {**labels, "capacity_type": "spot"}, values)
    ]


TWO_AT_5H31 = "_x300 1x30 2x30"
"""Karpenter's series, born at the first interruption (5h), at 2 from 5h31m."""


@promtool_case(storages=(PROMETHEUS,))
def test_two_spot_interruptions_on_one_node_in_six_hours_exceed_the_assumed_rate() -> Case:
    """2 in about 5.5 node-hours against 3 x 0.05 per node-hour. EKS's storage only: no
    Karpenter runs where GKE's storage applies."""
    fired = alert(
        {"severity": "warning"},
        "Spot GPU nodes were interrupted 0.361 times per node-hour over 6 hours",
        description("eks-minutely", "SpotproofSpotInterruptionRateAboveAssumed"),
    )
    return Case(
        _spot_nodes(1) + _interrupted(TWO_AT_5H31),
        [
            ("5h30m", "SpotproofSpotInterruptionRateAboveAssumed", []),
            ("5h31m", "SpotproofSpotInterruptionRateAboveAssumed", [fired]),
        ],
        rules="eks-minutely",
    )


@promtool_case(storages=(PROMETHEUS,))
def test_spot_interruptions_spread_over_many_node_hours_are_within_the_assumed_rate() -> Case:
    """2 in about 33 node-hours (six nodes) is 0.06."""
    return Case(
        _spot_nodes(6) + _interrupted(TWO_AT_5H31),
        [("5h40m", "SpotproofSpotInterruptionRateAboveAssumed", [])],
        rules="eks-minutely",
    )


@promtool_case(storages=(PROMETHEUS,))
def test_one_spot_interruption_is_never_a_rate() -> Case:
    return Case(
        _spot_nodes(1) + _interrupted("_x300 1x60"),
        [("5h40m", "SpotproofSpotInterruptionRateAboveAssumed", [])],
        rules="eks-minutely",
    )


@promtool_case(storages=(PROMETHEUS,))
def test_disruptions_for_other_reasons_are_no_spot_interruptions() -> Case:
    return Case(
        _spot_nodes(1) + _interrupted(TWO_AT_5H31, reason="scheduled_change"),
        [("5h40m", "SpotproofSpotInterruptionRateAboveAssumed", [])],
        rules="eks-minutely",
    )


# --- where each alert is rendered ---------------------------------------------------------


def _alerts(cloud: Cloud) -> set[str]:
    groups = rule_groups(Monitoring(), cloud=cloud, assumed_reclaims_per_node_hour=ASSUMED)
    return {rule.alert for group in groups for rule in group.alerts}


@pytest.mark.parametrize("cloud", list(Cloud))
def test_every_cloud_alerts_on_unscraped_failed_crashing_and_stalled_workloads(
    cloud: Cloud,
) -> None:
    assert {
        "SpotproofMetricsTargetDown",
        "SpotproofJobFailed",
        "SpotproofTrainerCrashLooping",
        "SpotproofContainerCrashLooping",
        "SpotproofTrainingStalled",
    } <= _alerts(cloud)


@pytest.mark.parametrize(("cloud", "rendered"), [(c, c is Cloud.EKS) for c in Cloud])
def test_the_clouds_own_reclaim_count_is_read_where_karpenter_is_scraped_alone(
    cloud: Cloud, rendered: bool
) -> None:
    assert ("SpotproofSpotInterruptionRateAboveAssumed" in _alerts(cloud)) is rendered


def test_without_namespaces_the_job_alerts_judge_every_namespace() -> None:
    groups = rule_groups(Monitoring(), cloud=Cloud.GKE, assumed_reclaims_per_node_hour=ASSUMED)
    (failed,) = (r for g in groups for r in g.alerts if r.alert == "SpotproofJobFailed")
    assert "namespace=~" not in failed.expr
