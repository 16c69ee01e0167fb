"""The goodput model behind the plan's checkpoint-interval advice
(``plan.simulation.goodput``): it is Daly's where Daly's applies, agrees with Young's to
first order, and moves the interval the way reclaims with a final save should."""

from __future__ import annotations

import math
import random

import pytest

from spotproof.plan.simulation.goodput import (
    LONGEST_INTERVAL_SECONDS,
    Reclaims,
    SaveCosts,
    best_interval,
    daly_interval,
    goodput,
    wall_per_kept_second,
    young_interval,
)

MINUTE, HOUR = 60.0, 3600.0
DUMP = 5 * MINUTE
"""Daly's worked example: a blocking dump of 5 minutes."""


def _blocking(dump: float, restart: float = 0.0) -> SaveCosts:
    """Daly's setting: the save holds training up until it is committed."""
    return SaveCosts(stall=dump, commit=dump, restart=restart)


def _failures(mtbf: float) -> Reclaims:
    """Failures with no warning at all, one per ``mtbf`` seconds."""
    return Reclaims(per_hour=HOUR / mtbf, graceful_share=0.0)


@pytest.mark.parametrize(
    ("mtbf_hours", "minutes"),
    [(24, 116.7), (6, 56.7), (0.25, 9.1)],
)
def test_dalys_closed_form_gives_the_papers_figures(mtbf_hours: float, minutes: float) -> None:
    assert daly_interval(DUMP, mtbf_hours * HOUR) / MINUTE == pytest.approx(minutes, abs=0.05)


@pytest.mark.parametrize(
    ("mtbf_hours", "low", "high"),
    [(24, 116.6, 116.8), (6, 56.6, 56.8), (0.25, 9.1, 9.2)],
)
def test_the_models_optimum_is_dalys_where_daly_applies(
    mtbf_hours: float, low: float, high: float
) -> None:
    """Daly's complete model's own optimum, found numerically: the closed form is its
    approximation, and at M = 15 min the two part by a few seconds, as in the paper."""
    best = best_interval(_blocking(DUMP, restart=10 * MINUTE), _failures(mtbf_hours * HOUR))
    assert low <= best / MINUTE <= high


def test_the_wall_time_is_dalys_complete_model_for_a_blocking_save() -> None:
    mtbf, restart, interval = 6 * HOUR, 10 * MINUTE, 40 * MINUTE
    daly = mtbf * math.exp(restart / mtbf) * (math.exp((interval + DUMP) / mtbf) - 1) / interval
    wall = wall_per_kept_second(interval, _blocking(DUMP, restart), _failures(mtbf))
    assert wall == pytest.approx(daly, rel=1e-12)


def test_youngs_first_order_interval_holds_where_the_save_is_short_against_the_mtbf() -> None:
    dump, mtbf = 2.0, 200 * HOUR
    assert best_interval(_blocking(dump), _failures(mtbf)) == pytest.approx(
        young_interval(dump, mtbf), rel=0.01
    )


@pytest.mark.parametrize("share", [0.5, 0.9, 0.99])
def test_a_final_save_that_commits_stretches_the_interval_by_one_over_root_of_the_rest(
    share: float,
) -> None:
    """To first order the optimum is Young's for the unannounced reclaims alone; a short
    restart and commit keep the second-order terms (``λu R C / τ``) out of the way."""
    costs = SaveCosts(stall=0.5, commit=2.0, restart=60.0, final_save=1.5)
    every = best_interval(costs, Reclaims(per_hour=0.05, graceful_share=0.0))
    graceful = best_interval(costs, Reclaims(per_hour=0.05, graceful_share=share))
    assert graceful / every == pytest.approx(1 / math.sqrt(1 - share), rel=0.02)


def test_without_reclaims_the_longest_interval_is_advised() -> None:
    costs = SaveCosts(stall=1.0, commit=10.0, restart=300.0)
    assert best_interval(costs, Reclaims(per_hour=0.0, graceful_share=0.0)) == (
        LONGEST_INTERVAL_SECONDS
    )


def test_when_every_reclaim_is_graceful_the_longest_interval_is_advised() -> None:
    costs = SaveCosts(stall=1.0, commit=10.0, restart=300.0, final_save=9.0)
    assert best_interval(costs, Reclaims(per_hour=1.0, graceful_share=1.0)) == (
        LONGEST_INTERVAL_SECONDS
    )


def test_without_reclaims_goodput_is_training_over_training_and_stalls() -> None:
    costs = SaveCosts(stall=3.0, commit=30.0, restart=300.0)
    assert goodput(597.0, costs, Reclaims(0.0, 0.0)) == pytest.approx(597 / 600)


def test_graceful_reclaims_cost_their_restart_and_final_save_only() -> None:
    costs = SaveCosts(stall=3.0, commit=30.0, restart=300.0, final_save=27.0)
    per_hour = 0.5
    expected = 597 / 600 * (1 - per_hour / HOUR * (300 + 27))
    assert goodput(597.0, costs, Reclaims(per_hour, 1.0)) == pytest.approx(expected)


@pytest.mark.parametrize("graceful", [0.0, 0.9])
def test_goodput_falls_as_reclaims_come_more_often(graceful: float) -> None:
    costs = SaveCosts(stall=0.5, commit=8.0, restart=300.0, final_save=7.5)
    rates = [0.0, 0.001, 0.01, 0.1, 1.0]
    kept = [goodput(600.0, costs, Reclaims(rate, graceful)) for rate in rates]
    assert kept == sorted(kept, reverse=True)
    assert len(set(kept)) == len(kept)


def test_an_upload_behind_training_costs_less_than_one_that_holds_it_up() -> None:
    reclaims = Reclaims(per_hour=0.1, graceful_share=0.0)
    behind = goodput(600.0, SaveCosts(stall=0.5, commit=8.0, restart=300.0), reclaims)
    blocking = goodput(600.0, _blocking(8.0, restart=300.0), reclaims)
    instant = goodput(600.0, _blocking(0.5, restart=300.0), reclaims)
    assert blocking < behind < instant


def test_reclaims_faster_than_a_restart_leave_no_goodput() -> None:
    costs = SaveCosts(stall=1.0, commit=1.0, restart=3600.0)
    assert goodput(60.0, costs, Reclaims(per_hour=1000.0, graceful_share=0.0)) == 0.0


@pytest.mark.parametrize(
    "build",
    [
        lambda: SaveCosts(stall=2.0, commit=1.0, restart=0.0),
        lambda: SaveCosts(stall=-1.0, commit=1.0, restart=0.0),
        lambda: SaveCosts(stall=0.0, commit=1.0, restart=-5.0),
        lambda: SaveCosts(stall=0.0, commit=1.0, restart=0.0, final_save=-1.0),
        lambda: Reclaims(per_hour=-0.1, graceful_share=0.0),
        lambda: Reclaims(per_hour=0.1, graceful_share=1.5),
        lambda: goodput(0.0, SaveCosts(1.0, 1.0, 0.0), Reclaims(0.1, 0.0)),
    ],
    ids=[
        "commit-before-stall",
        "negative-stall",
        "negative-restart",
        "negative-final-save",
        "negative-rate",
        "share-above-one",
        "zero-interval",
    ],
)
def test_inputs_out_of_range_are_refused(build: object) -> None:
    with pytest.raises(ValueError):
        build()  # type: ignore[operator]


def _simulated_goodput(
    interval: float, costs: SaveCosts, per_second: float, kept_target: float, seed: int
) -> float:
    """The process the model describes, run event by event: segments of ``interval``
    training then ``stall``, each save committed ``commit`` after it began; unannounced
    reclaims at Poisson times (during restarts too) roll back to the newest commit and
    cost a restart."""
    rng = random.Random(seed)
    period = interval + costs.stall
    lag = costs.commit - costs.stall
    wall = kept = 0.0
    while kept < kept_target:
        life = rng.expovariate(per_second)
        commits = max(0, math.floor((life - lag) / period))
        kept += commits * interval
        wall += life
        restarting = rng.expovariate(per_second)
        while restarting < costs.restart:  # a reclaim during the restart: start it again
            wall += restarting
            restarting = rng.expovariate(per_second)
        wall += costs.restart
    return kept / wall


@pytest.mark.parametrize(
    ("interval", "stall", "commit", "restart", "per_second"),
    [(1.0, 0.01, 0.5, 0.2, 0.3), (350.0, 10.0, 300.0, 300.0, 1 / 3600), (2.0, 0.5, 0.5, 1.0, 0.1)],
    ids=["commit lags the stall", "minutes-long upload", "blocking save"],
)
def test_the_model_agrees_with_the_process_it_describes_run_event_by_event(
    interval: float, stall: float, commit: float, restart: float, per_second: float
) -> None:
    costs = SaveCosts(stall=stall, commit=commit, restart=restart)
    reclaims = Reclaims(per_hour=per_second * 3600, graceful_share=0)
    simulated = _simulated_goodput(
        interval, costs, per_second, kept_target=3000 / per_second, seed=7
    )
    assert goodput(interval, costs, reclaims) == pytest.approx(simulated, abs=0.01)
