"""``spotproof smoke --nodes N``: a gang of trainer ranks over torch.distributed, one rank
preempted, one rank killed and every rank preempted, the gang restarted each time, and the
final digest bit for bit the uninterrupted gang's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spotproof.runtime import exit_codes
from spotproof.smoke.harness import SmokeConfig, SmokeReport
from spotproof.smoke.multinode import SCENARIOS, run_gang_smoke
from tests.support import run_cli

_REPORTS: dict[str, SmokeReport] = {}


def _report(store: str) -> SmokeReport:
    """One gang run per store, shared by the assertions below."""
    if store not in _REPORTS:
        config = SmokeConfig(store=store, total_steps=200, interval=20, model_mb=2)
        _REPORTS[store] = run_gang_smoke(config, nodes=2, progress=lambda _line: None)
    return _REPORTS[store]


@pytest.mark.parametrize("store", ["file", "s3"])
def test_the_restarted_gang_ends_with_the_uninterrupted_gangs_digest(store: str) -> None:
    report = _report(store)
    assert report.failures == []
    assert report.digest == report.reference_digest is not None


@pytest.mark.parametrize("store", ["file", "s3"])
def test_preempting_one_rank_or_all_loses_no_step(store: str) -> None:
    preemptions = [i for i in _report(store).interruptions if i.kind == "preemption"]
    assert len(preemptions) == 2
    for record in preemptions:
        assert record.steps_lost == 0 and record.resumed_from == record.at_step
        assert record.final_save_seconds is not None and not record.sigkilled_after_grace


@pytest.mark.parametrize("store", ["file", "s3"])
def test_a_killed_rank_costs_at_most_the_interval_and_the_upload_in_flight(store: str) -> None:
    [kill] = [i for i in _report(store).interruptions if i.kind == "hard-kill"]
    assert kill.steps_lost is not None and kill.steps_lost <= 2 * 20
    assert kill.resumed_from == kill.newest_committed


def test_every_scenario_restarts_the_whole_gang() -> None:
    report = _report("file")
    assert len(report.interruptions) == len(SCENARIOS)
    assert len(report.attempts) == 2 * (len(SCENARIOS) + 1)  # two ranks per gang start


def test_a_gang_that_cannot_split_the_batch_exits_2_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(capsys, "smoke", "--nodes", "3", "--store", "file")
    assert code == 2 and err.count("\n") == 1 and "allowed: 1, 2, 4 or 8" in err


def test_nodes_with_a_stack_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "smoke", "--nodes", "2", "--stack", "gke-dev")
    assert code == 2 and err.count("\n") == 1 and "--nodes and --stack" in err


def test_the_trainer_refuses_a_world_size_that_does_not_divide_its_batch(tmp_path) -> None:
    env = {
        **os.environ,
        "CHECKPOINT_URL": f"file://{tmp_path}",
        "CHECKPOINT_INTERVAL": "5",
        "TOTAL_STEPS": "10",
        "WORLD_SIZE": "3",
        "RANK": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "spotproof.smoke.train"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr == "spotproof.smoke.train: WORLD_SIZE=3: must divide the batch of 16 rows\n"
