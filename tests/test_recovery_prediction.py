"""The plan's stall prediction for a gang whose ranks are replaced one at a time
(``plan.simulation.recovery``): each path's stall and redone work, goodput against the
whole-gang restart priced the same way, and what warm spares buy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from spotproof.catalog import (
    AGENT_START_SECONDS,
    PEER_RESTORE_MIB_PER_SECOND,
    POD_START_SECONDS,
    PRELOAD_SECONDS,
    RESTORE_MIB_PER_SECOND,
    TEARDOWN_SECONDS,
    WARM_TRAINER_START_SECONDS,
)
from spotproof.plan import run_plan
from spotproof.plan.reporting import formats
from spotproof.plan.simulation import goodput, recovery
from tests.support import stack_config
from tests.test_training_job import GANG_PROGRAM

STATE_MIB = 2048.0
STARTS = AGENT_START_SECONDS + PRELOAD_SECONDS + WARM_TRAINER_START_SECONDS
"""A new pod's agent, then its forkserver's imports (forked from the agent), then every
worker forked warm (spotproof-torchrun): a replacement's, and every pod's of a gang
restarted whole."""
COSTS = goodput.SaveCosts(stall=1.0, commit=15.0, restart=0.0, final_save=14.0)
NODE_SECONDS = 300.0
INTERVAL = 600.0


def _gang(per_node_hour: float = 0.05, graceful: float = 0.9, pods: int = 8) -> recovery.Gang:
    return recovery.Gang(
        pods=pods,
        state_mib=STATE_MIB,
        costs=COSTS,
        reclaims=goodput.Reclaims(per_node_hour * pods, graceful),
        node_seconds=NODE_SECONDS,
        persist_every=4,
    )


def _path(paths: tuple[recovery.Path, ...], reclaim: str) -> recovery.Path:
    [found] = [p for p in paths if p.reclaim == reclaim]
    return found


def test_a_workers_loss_without_notice_waits_for_a_node_then_restores_from_a_peer() -> None:
    lost = _path(recovery.paths(_gang(), INTERVAL), "a worker's node, without notice")
    assert lost.restarted == "its pod alone"
    assert lost.stall_seconds == pytest.approx(
        NODE_SECONDS + STARTS + STATE_MIB / PEER_RESTORE_MIB_PER_SECOND
    )
    assert lost.redone_seconds == pytest.approx(INTERVAL / 2 + COSTS.commit - COSTS.stall)


def test_a_workers_reclaim_with_notice_saves_leaves_then_restores_from_the_bucket() -> None:
    noticed = _path(recovery.paths(_gang(), INTERVAL), "a worker's node, with notice")
    assert noticed.redone_seconds == 0
    assert noticed.stall_seconds == pytest.approx(
        COSTS.final_save
        + TEARDOWN_SECONDS
        + NODE_SECONDS
        + STARTS
        + STATE_MIB / RESTORE_MIB_PER_SECOND
    )


def test_the_leaders_node_restarts_every_pod_and_loses_back_to_the_persisted_save() -> None:
    leader = _path(recovery.paths(_gang(graceful=0.0, pods=4), INTERVAL), "the leader's node")
    assert (leader.share, leader.restarted) == (0.25, "every pod")
    assert leader.redone_seconds == pytest.approx(4 * INTERVAL / 2 + COSTS.commit - COSTS.stall)


def test_the_leaders_node_waits_for_the_survivors_to_leave_their_nodes_when_a_spare_is_ready() -> (
    None
):
    gang = _gang(per_node_hour=1e-6, graceful=0.0)  # the spare is always free
    leader = _path(recovery.paths(gang, INTERVAL, spares=1), "the leader's node")
    assert leader.stall_seconds == pytest.approx(
        TEARDOWN_SECONDS + POD_START_SECONDS + STARTS + STATE_MIB / RESTORE_MIB_PER_SECOND
    )


def test_the_leaders_node_without_a_spare_waits_for_the_node_not_the_teardown() -> None:
    leader = _path(recovery.paths(_gang(graceful=0.0), INTERVAL), "the leader's node")
    assert leader.stall_seconds == pytest.approx(
        NODE_SECONDS + STARTS + STATE_MIB / RESTORE_MIB_PER_SECOND
    )


def test_a_whole_gang_restart_on_nodes_already_there_waits_for_the_teardown() -> None:
    gang = recovery.Gang(8, STATE_MIB, COSTS, goodput.Reclaims(0.4, 0.0), 1.0, 4, pod_seconds=1.0)
    [_, unannounced] = recovery.whole_gang_paths(gang, INTERVAL)
    assert unannounced.stall_seconds == pytest.approx(
        TEARDOWN_SECONDS + 1.0 + STARTS + STATE_MIB / RESTORE_MIB_PER_SECOND
    )


def test_the_paths_shares_add_up_to_every_reclaim() -> None:
    assert sum(p.share for p in recovery.paths(_gang(), INTERVAL)) == pytest.approx(1.0)


def test_a_free_warm_spare_turns_the_wait_for_a_node_into_a_pod_start() -> None:
    rare = _gang(per_node_hour=1e-6)
    assert recovery.replacement_seconds(rare, 1) == pytest.approx(POD_START_SECONDS, rel=1e-3)
    assert recovery.replacement_seconds(rare, 0) == NODE_SECONDS


def test_erlangs_loss_formula_matches_its_textbook_values() -> None:
    assert recovery.erlang_b(1, 1.0) == pytest.approx(0.5)
    assert recovery.erlang_b(2, 1.0) == pytest.approx(0.2)
    assert recovery.erlang_b(0, 3.0) == 1.0


def test_without_reclaims_goodput_is_only_the_saves_stall() -> None:
    gang = _gang(per_node_hour=0.0)
    kept = recovery.goodput(recovery.paths(gang, INTERVAL), gang, INTERVAL)
    assert kept == pytest.approx(INTERVAL / (INTERVAL + COSTS.stall))


def test_the_first_order_baseline_agrees_with_the_exact_model_at_realistic_rates() -> None:
    """The whole-gang restart priced by the renewal argument against Daly's exact form with
    the same restart: within a tenth of a percentage point at 0.05 reclaims/node-hour."""
    gang = _gang()
    first_order = recovery.goodput(recovery.whole_gang_paths(gang, INTERVAL), gang, INTERVAL)
    restart = NODE_SECONDS + STARTS + STATE_MIB / RESTORE_MIB_PER_SECOND
    exact = goodput.goodput(
        INTERVAL,
        goodput.SaveCosts(COSTS.stall, COSTS.commit, restart, COSTS.final_save),
        gang.reclaims,
    )
    assert first_order == pytest.approx(exact, abs=1e-3)


def test_with_a_warm_spare_replacing_one_rank_keeps_more_than_restarting_the_gang() -> None:
    """Without a spare both wait for one new node (the survivors' nodes stay either way),
    and the leader's loss reaches back to the persisted save: a spare is what turns the
    wait into a pod start."""
    gang = _gang(per_node_hour=0.2, graceful=0.5)
    spared = recovery.predict(gang, INTERVAL, 1, 1.0).goodput
    whole = recovery.goodput(recovery.whole_gang_paths(gang, INTERVAL), gang, INTERVAL)
    assert spared > whole


def test_spares_are_recommended_only_where_the_stall_they_save_costs_more_than_they_do() -> None:
    def best(per_node_hour: float) -> int:
        gang = _gang(per_node_hour=per_node_hour, pods=16)
        options = [recovery.predict(gang, INTERVAL, n, 1.0) for n in range(5)]
        return recovery.recommended(options).spares

    assert best(0.001) == 0
    assert best(0.5) >= 1


SPARE_FREE_GANG = (
    GANG_PROGRAM.replace("NODES", "4")
    .replace(
        'command=("python", "train.py")',
        'command=("python", "train.py"), state_mib=2048',
    )
    .replace(
        "        controllers=cluster.controllers,",
        "        controllers=cluster.controllers,\n"
        "        recovery=GangRecovery.REPLACE_RANK,\n"
        '        replica_secret="0123456789abcdef" * 4,',
    )
    .replace(
        "from spotproof.kube import TrainingJob, TrainingJobArgs",
        "from spotproof.kube import GangRecovery, TrainingJob, TrainingJobArgs",
    )
)


def test_the_plan_predicts_each_path_of_a_replace_rank_gang_under_its_advice(
    make_project: Callable[..., Path],
) -> None:
    root = make_project(stack_config("gke-dev"), stack="gke-dev", program=SPARE_FREE_GANG)
    result = run_plan("gke-dev", root)
    [gang] = [a for a in result.intervals if "llm-finetune" in a.workload]
    assert gang.workload.endswith("llm-finetune/workers")
    assert gang.pods == 4
    report = formats.text(result)
    assert "replace-rank gang of 4 pods (a leader, 3 workers):" in report
    for reclaim in ("a worker's node, with notice", "a worker's node, without notice"):
        assert f"{reclaim} (" in report
    assert "the leader's node (25% of reclaims): every pod restarts" in report
    assert "recommended:" in report


WITH_A_SPARE = (
    SPARE_FREE_GANG.replace(
        "from spotproof.kube import GangRecovery, TrainingJob, TrainingJobArgs",
        "from spotproof.kube import (\n"
        "    GangRecovery, TrainingJob, TrainingJobArgs, WarmSpares, WarmSparesArgs,\n)",
    )
    + """
WarmSpares(
    "llm-spares",
    WarmSparesArgs(
        placement=cluster.placement(PoolClass.SPOT_GPU),
        image="ghcr.io/acme/llm-train:1.4",
        gpus=1,
        count=2,
        namespace="spotproof",
    ),
    opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=[cluster.baseline]),
)
"""
)


def test_the_plan_counts_the_warm_spares_kept_where_the_gang_runs(
    make_project: Callable[..., Path],
) -> None:
    root = make_project(stack_config("gke-dev"), stack="gke-dev", program=WITH_A_SPARE)
    result = run_plan("gke-dev", root)
    [gang] = [a for a in result.intervals if "llm-finetune" in a.workload]
    assert gang.warm_spares == 2
    assert "the stack keeps 2 where it runs" in formats.text(result)


def test_a_gang_that_never_keeps_a_step_has_no_useful_hours_to_price() -> None:
    gang = _gang(per_node_hour=50.0, graceful=0.0)
    hopeless = recovery.predict(gang, INTERVAL, 0, 1.0)
    assert hopeless.goodput == 0.0
    assert hopeless.cost == float("inf")
