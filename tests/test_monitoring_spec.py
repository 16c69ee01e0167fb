"""``spotproof:monitoring`` as a stack states it: defaults, ranges, one-line refusals, off
by default where the stack is disposable, and notification targets in the stack's cloud's
format."""

from __future__ import annotations

from typing import Any

import pytest

from spotproof.fleet import SpecError, fleet_from_config
from spotproof.fleet.existing import existing_cluster
from spotproof.fleet.monitoring import Monitoring, PendingMinutes
from tests.support import stack_config

TARGETS = {
    "gke": "projects/ml-prod/notificationChannels/1234567890",
    "eks": "arn:aws:sns:us-east-1:123456789012:spotproof-alerts",
    "aks": (
        "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/ml-prod"
        "/providers/microsoft.insights/actionGroups/spotproof-alerts"
    ),
}
FORMATS = {
    "gke": "a Cloud Monitoring notification channel, projects/PROJECT/notificationChannels/ID",
    "eks": "a Standard SNS topic's ARN, arn:aws:sns:REGION:ACCOUNT:TOPIC",
    "aks": (
        "an action group resource ID, /subscriptions/SUB/resourceGroups/RG/providers/"
        "microsoft.insights/actionGroups/NAME"
    ),
}


def _monitoring(stack: str, section: Any = None, **top: Any) -> Monitoring:
    config = stack_config(stack)
    if section is not None:
        config["spotproof:monitoring"] = section
    config.update({f"spotproof:{key}": value for key, value in top.items()})
    return fleet_from_config(stack, config).monitoring


def _refusal(stack: str, section: Any) -> str:
    with pytest.raises(SpecError) as raised:
        _monitoring(stack, section)
    return str(raised.value)


def test_defaults() -> None:
    monitoring = _monitoring("gke-prod")
    assert monitoring == Monitoring(
        enabled=True,
        pending_minutes=PendingMinutes(spot_gpu=30, on_demand_gpu=15, flex_start=1440),
        checkpoint_age_intervals=3,
        steps_lost_per_hour=None,
        queue_age_minutes=30,
        reclaim_rate_factor=3.0,
        scrape_interval_seconds=15,
        target_down_minutes=5,
        crash_loop_restarts=3,
        step_stall_intervals=2,
        notify=(),
    )


@pytest.mark.parametrize("stack", ["gke-prod", "eks-prod", "aks-prod"])
def test_a_protected_stack_is_monitored_by_default(stack: str) -> None:
    assert _monitoring(stack).enabled


@pytest.mark.parametrize("stack", ["gke-dev", "eks-dev", "aks-dev"])
def test_a_disposable_stack_is_not_monitored_by_default(stack: str) -> None:
    """Managed Prometheus bills ingestion; a throwaway cluster need not pay for it."""
    assert not _monitoring(stack).enabled


def test_a_disposable_stack_may_ask_for_monitoring() -> None:
    assert _monitoring("gke-dev", {"enabled": True}).enabled


def test_protect_false_is_disposable_for_monitoring_too() -> None:
    config = stack_config("gke-prod")
    config["spotproof:protect"] = False
    assert not fleet_from_config("gke-prod", config).monitoring.enabled


def test_pending_minutes_given_for_one_class_keep_the_others_defaults() -> None:
    monitoring = _monitoring("gke-prod", {"pendingMinutes": {"flex-start": 2880}})
    assert monitoring.pending_minutes == PendingMinutes(flex_start=2880)


def test_values_as_pulumi_passes_them_are_read() -> None:
    """Scalars as strings, objects as JSON text."""
    monitoring = _monitoring(
        "gke-prod",
        '{"checkpointAgeIntervals": "4", "reclaimRateFactor": "2.5", '
        '"pendingMinutes": {"spot-gpu": "10"}}',
    )
    assert (monitoring.checkpoint_age_intervals, monitoring.reclaim_rate_factor) == (4, 2.5)
    assert monitoring.pending_minutes.spot_gpu == 10


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"pendingMinutes": {"spot-gpu": 0}},
            "spotproof:monitoring.pendingMinutes.spot-gpu = 0: out of range; allowed: a whole "
            "number >= 1 and <= 10080",
        ),
        (
            {"pendingMinutes": {"flex-start": 20000}},
            "spotproof:monitoring.pendingMinutes.flex-start = 20000: out of range; allowed: a "
            "whole number >= 1 and <= 10080",
        ),
        (
            {"checkpointAgeIntervals": 1},
            "spotproof:monitoring.checkpointAgeIntervals = 1: out of range; allowed: a whole "
            "number >= 2 and <= 20",
        ),
        (
            {"stepsLostPerHour": 0},
            "spotproof:monitoring.stepsLostPerHour = 0: out of range; allowed: a whole number "
            ">= 1 and <= 1000000000000",
        ),
        (
            {"queueAgeMinutes": "soon"},
            "spotproof:monitoring.queueAgeMinutes = 'soon': not a whole number; allowed: a "
            "whole number >= 1 and <= 20160",
        ),
        (
            {"reclaimRateFactor": 0.5},
            "spotproof:monitoring.reclaimRateFactor = 0.5: out of range; allowed: a number >= "
            "1 and <= 100",
        ),
        (
            {"scrapeIntervalSeconds": 300},
            "spotproof:monitoring.scrapeIntervalSeconds = 300: out of range; allowed: a whole "
            "number >= 5 and <= 120",
        ),
        (
            {"enabled": "yes"},
            "spotproof:monitoring.enabled = 'yes': not a boolean; allowed: true or false",
        ),
        (
            {"notify": TARGETS["gke"]},
            "spotproof:monitoring.notify = 'projects/ml-prod/notificationChannels/1234567890': "
            "expected a list; allowed: a YAML list",
        ),
    ],
    ids=[
        "pending-zero",
        "pending-over-a-week",
        "one-interval",
        "no-steps",
        "age-not-a-number",
        "factor-under-one",
        "scrape-too-slow",
        "enabled-not-a-boolean",
        "notify-not-a-list",
    ],
)
def test_bad_values_are_refused_in_one_line(section: dict[str, Any], message: str) -> None:
    assert _refusal("gke-prod", section) == message


def test_misspelt_key_is_refused_with_what_was_meant() -> None:
    assert _refusal("gke-prod", {"pendingMinute": {}}) == (
        "spotproof:monitoring.pendingMinute = {}: unknown field (did you mean "
        "pendingMinutes?); allowed: checkpointAgeIntervals, crashLoopRestarts, enabled, "
        "notify, pendingMinutes, queueAgeMinutes, reclaimRateFactor, scrapeIntervalSeconds, "
        "stepStallIntervals, stepsLostPerHour, targetDownMinutes"
    )


def test_unknown_target_class_is_refused() -> None:
    assert _refusal("gke-prod", {"pendingMinutes": {"spot": 10}}) == (
        "spotproof:monitoring.pendingMinutes.spot = 10: unknown field; allowed: flex-start, "
        "on-demand-gpu, spot-gpu"
    )


def test_misspelt_top_level_key_is_refused() -> None:
    config = stack_config("gke-prod")
    config["spotproof:monitorng"] = {}
    with pytest.raises(SpecError, match="did you mean monitoring"):
        fleet_from_config("gke-prod", config)


@pytest.mark.parametrize("cloud", sorted(TARGETS))
def test_a_target_in_the_stacks_cloud_format_is_accepted(cloud: str) -> None:
    assert _monitoring(f"{cloud}-prod", {"notify": [TARGETS[cloud]]}).notify == (TARGETS[cloud],)


@pytest.mark.parametrize(("cloud", "other"), [("gke", "eks"), ("eks", "aks"), ("aks", "gke")])
def test_a_target_in_another_clouds_format_is_refused(cloud: str, other: str) -> None:
    message = _refusal(f"{cloud}-prod", {"notify": [TARGETS[cloud], TARGETS[other]]})
    assert message.startswith("spotproof:monitoring.notify[1] = ")
    assert message.endswith(f": not a target on {cloud}; allowed: {FORMATS[cloud]}")


@pytest.mark.parametrize(
    "target",
    [
        "projects/ml-prod/notificationChannels/abc",
        "arn:aws:sns:us-east-1:1234:spotproof-alerts",
        "arn:aws:sns:us-east-1:123456789012:spotproof-alerts.fifo",
        "/subscriptions/not-a-guid/resourceGroups/rg/providers/microsoft.insights/actionGroups/a",
    ],
    ids=[
        "channel-id-not-numeric",
        "account-not-12-digits",
        "fifo-topic",
        "subscription-not-a-guid",
    ],
)
def test_a_malformed_target_is_refused_naming_every_format(target: str) -> None:
    message = _refusal("gke-prod", {"notify": [target]})
    assert message.startswith("spotproof:monitoring.notify[0] = ")
    assert ": not a notification target; allowed: gke: " in message
    assert all(shown in message for shown in FORMATS.values())


def test_existing_cluster_states_monitoring_checked_for_its_cloud() -> None:
    facts = {"cloud": "eks", "monitoring": {"notify": [TARGETS["gke"]]}}
    with pytest.raises(SpecError) as raised:
        existing_cluster({"spotproof:existingCluster": facts})
    assert str(raised.value).startswith(
        "spotproof:existingCluster.monitoring.notify[0] = 'projects/ml-prod/"
    )


def test_existing_cluster_is_monitored_by_default() -> None:
    assert existing_cluster({}).monitoring == Monitoring()


def test_a_program_built_monitoring_is_judged_like_the_stack_file() -> None:
    with pytest.raises(SpecError) as raised:
        Monitoring(scrape_interval_seconds=1)
    assert str(raised.value) == (
        "Monitoring.scrape_interval_seconds = 1: out of range; allowed: a whole number >= 5 "
        "and <= 120"
    )


def test_a_program_built_pending_minutes_is_judged_too() -> None:
    with pytest.raises(SpecError, match=r"^PendingMinutes\.on.demand.gpu = 0: out of range"):
        PendingMinutes(on_demand_gpu=0)
