"""``spotproof smoke --nodes 2 --tiers``: a gang under torchrun's elastic agents whose ranks
are replaced one at a time, its periodic saves held in memory and replicated to the other
pod: a worker's node lost without notice, then reclaimed with it, then the leader's node
lost; it must end with the uninterrupted gang's digest."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

import pytest

from spotproof import cli
from spotproof.smoke.processes.elastic_gang import PERSIST_EVERY
from spotproof.smoke.runs.tiered import LEADER, ONE_NODE, RECLAIMED

pytestmark = pytest.mark.processes


@dataclass(frozen=True)
class TieredRun:
    code: int
    out: str
    err: str
    report: dict[str, Any]


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> TieredRun:
    """One rehearsal as a person starts it, checkpointing to S3 (moto): 200 steps of 10 leave
    room for the three interruptions, each at least two intervals after the resume before it.
    Not in the serial group of timed tests (conftest): nothing here races a deadline but the
    reclaim's 15 s grace, which a 4 MiB final save meets with room to spare."""
    report = tmp_path_factory.mktemp("tiers") / "tiers.json"
    argv = [
        *("smoke", "--nodes", "2", "--tiers", "--store", "s3"),
        *("--steps", "200", "--interval", "10"),
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


def test_a_lost_workers_pod_alone_is_replaced(tiered: TieredRun) -> None:
    lost_one = _record(tiered, 0)
    assert f"{ONE_NODE} at step {lost_one['at_step']}" in tiered.out
    assert lost_one["replaced"] == [1]
    assert "pods [0] kept" in tiered.out


def test_the_survivor_resumes_from_its_own_memory_and_the_replacement_from_its_replica(
    tiered: TieredRun,
) -> None:
    lost_one = _record(tiered, 0)
    assert lost_one["resumed_tiers"] == ["memory", "peer"]
    # Memory held what the bucket had not yet got: newer than its newest, if it had any.
    assert lost_one["resumed_from"] > (lost_one["newest_committed"] or 0)
    assert lost_one["steps_lost"] <= 2 * tiered.report["config"]["interval"]


def test_a_reclaimed_workers_pod_saves_its_final_step_and_alone_is_replaced(
    tiered: TieredRun,
) -> None:
    reclaimed = _record(tiered, 1)
    assert f"{RECLAIMED} at step {reclaimed['at_step']}" in tiered.out
    assert reclaimed["exit_code"] == 143
    assert reclaimed["replaced"] == [1]
    assert reclaimed["resumed_from"] == reclaimed["at_step"] == reclaimed["newest_committed"]
    assert reclaimed["steps_lost"] == 0


def test_losing_the_leaders_node_restarts_the_gang_from_the_buckets_newest_step(
    tiered: TieredRun,
) -> None:
    leader = _record(tiered, 2)
    assert f"{LEADER} at step {leader['at_step']}" in tiered.out
    assert leader["replaced"] == [0, 1]
    assert leader["resumed_tiers"] == ["bucket", "bucket"]
    assert leader["resumed_from"] == leader["newest_committed"] is not None
    interval = tiered.report["config"]["interval"]
    assert leader["steps_lost"] <= (PERSIST_EVERY + 1) * interval


def test_a_reclaims_stall_runs_from_its_notice_through_its_final_save(tiered: TieredRun) -> None:
    [reclaimed] = [r for r in tiered.report["interruptions"] if r["kind"] == "preemption"]
    [replacement] = [
        a for a in tiered.report["attempts"] if a["started"] > reclaimed["at"] and a["steps"]
    ][:1]
    first_step = replacement["steps"][0][0]
    assert reclaimed["stall_seconds"] > reclaimed["final_save_seconds"]
    assert reclaimed["at"] + reclaimed["stall_seconds"] >= first_step - 0.01


def test_every_interruption_reports_the_stall_to_the_gangs_next_step(tiered: TieredRun) -> None:
    stalls = [record["stall_seconds"] for record in tiered.report["interruptions"]]
    assert len(stalls) == 3
    assert all(stall > 0 for stall in stalls)
    assert "next step" in tiered.out
