"""``[gke-alert-metrics-unvalidated]``: a PromQL alert condition that leaves Cloud Monitoring
to check its metrics exist cannot be created on a fresh project, whose workloads have not
been scraped yet; ``spotproof plan`` says so for any policy, the stack's or the user's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.policy.gke_monitoring import promql_metrics_unvalidated
from tests.support import run_cli, stack_config

PROGRAM_WITH_A_VALIDATED_CONDITION = """\
import pulumi_gcp as gcp
from spotproof.program import main

main()
gcp.monitoring.AlertPolicy(
    "trainer-gone",
    display_name="trainer gone",
    combiner="OR",
    conditions=[{
        "display_name": "no trainer",
        "condition_prometheus_query_language": {"query": "absent(spotproof_training_step)"},
    }],
)
"""


def _promql(**fields: Any) -> dict[str, Any]:
    condition = {"query": "spotproof_training_step == 0", **fields}
    return {"displayName": "stalled", "conditionPrometheusQueryLanguage": condition}


def test_a_promql_condition_without_the_flag_is_flagged_by_name() -> None:
    (message,) = promql_metrics_unvalidated({"conditions": [_promql()]})
    assert message.startswith("PromQL condition 'stalled' does not set disableMetricValidation")


@pytest.mark.parametrize("value", [False, None])
def test_a_flag_that_is_not_true_is_flagged(value: bool | None) -> None:
    conditions = [_promql(disableMetricValidation=value)]
    assert list(promql_metrics_unvalidated({"conditions": conditions}))


def test_a_condition_that_sets_the_flag_passes() -> None:
    conditions = [_promql(disableMetricValidation=True)]
    assert list(promql_metrics_unvalidated({"conditions": conditions})) == []


def test_a_threshold_condition_is_none_of_this_rules_business() -> None:
    threshold = {"displayName": "cpu", "conditionThreshold": {"filter": "metric.type=x"}}
    assert list(promql_metrics_unvalidated({"conditions": [threshold]})) == []


def test_a_program_that_reintroduces_a_validated_condition_turns_the_plan_red(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-dev"), program=PROGRAM_WITH_A_VALIDATED_CONDITION)
    code, out, err = run_cli(capsys, "plan", "--stack", "gke-test", "--project-dir", str(root))
    assert code == 1, out + err
    assert "[gke-alert-metrics-unvalidated] trainer-gone" in out
