"""``spotproof smoke --nodes N``: a gang of trainer ranks over torch.distributed, one rank
preempted, one rank killed and every rank preempted, the gang restarted each time, and the
final digest bit for bit the uninterrupted gang's."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import pytest

from spotproof import cli
from spotproof.runtime import exit_codes
from spotproof.runtime.launcher import Launcher
from spotproof.smoke.processes import gang_ranks
from spotproof.smoke.reports.records import SmokeConfig
from spotproof.smoke.runs.gang import SCENARIOS, run_gang_smoke
from tests.support import REPO, run_cli

pytestmark = pytest.mark.processes


@dataclass(frozen=True)
class GangRun:
    code: int
    out: str
    err: str
    report: dict[str, Any]


@pytest.fixture(scope="module")
def gang(tmp_path_factory: pytest.TempPathFactory) -> GangRun:
    """One gang rehearsal, as a person starts it: gke-dev's preemption path played against a
    gang of 2 ranks started by torchrun through the launch script, checkpointing to S3
    (moto), each scenario restarting the whole gang; read by the tests below. At 0.5 the
    15 s grace is 7.5 s: GKE sends SIGTERM at the notice, so the scale stretches no step
    here, only the margin a loaded CI machine gets."""
    report = tmp_path_factory.mktemp("gang") / "gang.json"
    argv = [
        *("smoke", "--stack", "gke-dev", "--project-dir", str(REPO), "--nodes", "2"),
        *("--store", "s3", "--time-scale", "0.5", "--steps", "200", "--json", str(report)),
    ]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(argv)
    return GangRun(code, out.getvalue(), err.getvalue(), json.loads(report.read_text()))


def test_a_gang_rehearses_a_stacks_preemption_path(gang: GangRun) -> None:
    assert (gang.code, gang.err) == (0, ""), gang.out
    assert "store: s3" in gang.out and "gang of 2 ranks over gloo" in gang.out
    # By default each rank starts as TrainingJob's pods do: the launch script, torchrun.
    assert "each started by torchrun, through the launch script" in gang.out
    assert "kill one rank at step" in gang.out and "every rank exited [143, -9]" in gang.out
    assert "SIGTERM at 0 s with 15 s grace" in gang.out
    assert "final checkpoint" in gang.out and "of 7.5 s grace" in gang.out
    assert "PASSED" in gang.out


def test_the_restarted_gang_ends_with_the_uninterrupted_gangs_digest(gang: GangRun) -> None:
    assert gang.report["failures"] == []
    assert gang.report["digest"] == gang.report["reference_digest"] is not None


def test_preempting_one_rank_or_all_loses_no_step(gang: GangRun) -> None:
    preemptions = [i for i in gang.report["interruptions"] if i["kind"] == "preemption"]
    assert len(preemptions) == 2
    for record in preemptions:
        assert record["steps_lost"] == 0 and record["resumed_from"] == record["at_step"]
        assert record["final_save_seconds"] is not None and not record["sigkilled_after_grace"]


def test_a_killed_rank_costs_at_most_the_interval_and_the_upload_in_flight(gang: GangRun) -> None:
    [kill] = [i for i in gang.report["interruptions"] if i["kind"] == "hard-kill"]
    interval = gang.report["config"]["interval"]
    assert kill["steps_lost"] is not None and kill["steps_lost"] <= 2 * interval
    assert kill["resumed_from"] == kill["newest_committed"]


def test_every_scenario_restarts_the_whole_gang(gang: GangRun) -> None:
    assert len(gang.report["interruptions"]) == len(SCENARIOS)
    assert len(gang.report["attempts"]) == 2 * (len(SCENARIOS) + 1)  # two ranks per gang start


def test_a_gang_size_that_cannot_split_the_batch_exits_2_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, "smoke", "--nodes", "3", "--store", "file")
    assert (exited.value.code, capsys.readouterr().err) == (
        2,
        "spotproof smoke: argument --nodes: 3 is not allowed; allowed: 1, 2, 4, 8 (see --help)\n",
    )


def test_without_the_launch_script_torchrun_leaves_every_reclaimed_rank_looking_crashed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The real torchrun, as the container's first process: it exits 1 after SIGTERM.
    monkeypatch.setattr(gang_ranks.launcher, "wrapped", list)
    config = SmokeConfig(store="file", total_steps=60, interval=20, model_mb=1)
    report = run_gang_smoke(
        config,
        nodes=2,
        progress=lambda _: None,
        started_by=Launcher.TORCHRUN,
        scenarios=["preempt one rank"],
    )
    assert "preempt one rank: ranks exited [1, 1], expected [143, 143]" in report.failures


def test_a_path_that_sends_no_sigterm_fails_the_gang() -> None:
    config = SmokeConfig(
        store="file", total_steps=60, interval=20, model_mb=2, sigterm_after=None, gone_after=0.3
    )
    report = run_gang_smoke(
        config, nodes=2, progress=lambda _line: None, scenarios=["preempt one rank"]
    )
    assert not report.passed
    assert any("did not commit within the 0 s grace" in f for f in report.failures)


def test_a_gang_killed_at_the_end_of_its_grace_says_what_each_rank_last_did() -> None:
    config = SmokeConfig(total_steps=60, interval=20, model_mb=1, grace_seconds=2, gone_after=0.01)
    report = run_gang_smoke(
        config, nodes=2, progress=lambda _line: None, scenarios=["preempt every rank"]
    )
    every_rank = report.interruptions[-1]
    assert len(every_rank.last_seen) == 2
    assert all(
        re.match(r"trainer \d+ last said \w+ \(.*\) at [+-]\d+\.\d\d s", seen)
        for seen in every_rank.last_seen
    )
    [failure] = [f for f in report.failures if f.startswith("preempt every rank: the final")]
    assert failure.endswith("; ".join(["", *every_rank.last_seen]))


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
