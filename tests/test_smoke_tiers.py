"""``spotproof smoke --nodes 2 --tiers``: a gang whose periodic saves are held in memory
and replicated to the other rank's node, whose nodes are lost without notice (SIGKILL, and
the node's memory gone with it), and which must end with the uninterrupted gang's digest."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import pytest

from spotproof import cli
from spotproof.smoke.tiered import EVERY_NODE, ONE_NODE, PERSIST_EVERY

pytestmark = pytest.mark.processes


@dataclass(frozen=True)
class TieredRun:
    code: int
    out: str
    err: str
    report: dict[str, Any]


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> TieredRun:
    """One rehearsal as a person starts it, checkpointing to S3 (moto): 120 steps leave room
    for both losses, each at least two intervals after the restart before it. Not in the
    serial group of timed tests (conftest): nothing here races a deadline, the ranks are
    killed without notice and the survivors get 30 s to notice it."""
    report = tmp_path_factory.mktemp("tiers") / "tiers.json"
    argv = [
        *("smoke", "--nodes", "2", "--tiers", "--store", "s3", "--steps", "120"),
        *("--json", str(report)),
    ]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(argv)
    return TieredRun(code, out.getvalue(), err.getvalue(), json.loads(report.read_text()))


def _record(run: TieredRun, index: int) -> dict[str, Any]:
    return run.report["interruptions"][index]


def test_the_gang_that_lost_its_nodes_ends_with_the_uninterrupted_gangs_digest(
    tiered: TieredRun,
) -> None:
    assert (tiered.code, tiered.err, tiered.report["failures"]) == (0, "", []), tiered.out
    assert tiered.report["digest"] == tiered.report["reference_digest"] is not None
    assert "PASSED" in tiered.out


def test_a_lost_nodes_rank_resumes_from_its_holders_replica(tiered: TieredRun) -> None:
    lost_one = _record(tiered, 0)
    assert f"{ONE_NODE} at step {lost_one['at_step']}" in tiered.out
    assert lost_one["resumed_tiers"] == ["memory", "peer"]
    # Memory held what the bucket had not yet got: newer than its newest, if it had any.
    assert lost_one["resumed_from"] > (lost_one["newest_committed"] or 0)
    assert lost_one["steps_lost"] <= 2 * tiered.report["config"]["interval"]


def test_losing_every_node_resumes_from_the_buckets_newest_step(tiered: TieredRun) -> None:
    lost_all = _record(tiered, 1)
    assert f"{EVERY_NODE} at step {lost_all['at_step']}" in tiered.out
    assert lost_all["resumed_tiers"] == ["bucket", "bucket"]
    assert lost_all["resumed_from"] == lost_all["newest_committed"] is not None
    interval = tiered.report["config"]["interval"]
    assert lost_all["steps_lost"] <= (PERSIST_EVERY + 1) * interval


def test_tiers_without_a_gang_are_refused_in_one_line(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["smoke", "--tiers"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "spotproof smoke: --tiers: replicas are held by a gang's peers; allowed: with "
        "--nodes 2 or more"
    ]
