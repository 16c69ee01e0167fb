"""What ``spotproof smoke --tiers`` refuses, in one line, before it starts a process, and
the room its interruptions need."""

from __future__ import annotations

import argparse
import random

import pytest

from spotproof.smoke.command import default_steps
from spotproof.smoke.reports.records import SmokeConfig
from spotproof.smoke.runs.tiered import placed, scenarios, steps_needed, too_short
from tests.support import run_cli


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--tiers"], "--tiers: replicas are held by a gang's peers; allowed: with --nodes 2"),
        (
            ["--nodes", "2", "--tiers", "--launcher", "none"],
            "--tiers: ranks are replaced one at a time under torchrun's elastic agent; "
            "allowed: --launcher torchrun",
        ),
        (
            ["--nodes", "4", "--tiers", "--steps", "100", "--interval", "10"],
            "--tiers: 100 steps, checkpointing every 10, leave no room for the 4 "
            "interruptions of a gang of 4",
        ),
        (["--command", "python train.py", "--tiers"], "allowed: with --nodes 2 or more"),
        (
            ["--command", "python train.py", "--nodes", "2", "--tiers", "--launcher", "none"],
            "allowed: --launcher torchrun",
        ),
    ],
)
def test_tiers_that_cannot_be_rehearsed_exit_2_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "smoke", *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and says in err, err


@pytest.mark.parametrize("nodes", [2, 4, 8])
@pytest.mark.parametrize("interval", [1, 2, 10])
def test_the_steps_needed_leave_room_for_every_placement(nodes: int, interval: int) -> None:
    """Placed as late as the schedule may, from resumptions that lose nothing, the last
    interruption still comes before the run's last step."""
    needed = steps_needed(nodes, interval)
    for seed in range(200):
        schedule, resumed = random.Random(seed), 0
        for _ in scenarios(nodes):
            resumed = placed(resumed, interval, schedule)
            assert resumed < needed - 1
    assert too_short(nodes, interval, needed) is None
    assert too_short(nodes, interval, needed - 1) is not None


def test_the_default_run_of_a_gang_of_8_has_room_for_its_interruptions() -> None:
    """Without --steps, the reference trainer trains long enough for its gang's size: the
    refusal above is for a --steps given too small."""
    args = argparse.Namespace(tiers=True, nodes=8, interval=None)
    assert default_steps(args) >= steps_needed(8, SmokeConfig.interval)
