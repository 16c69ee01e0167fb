"""How often to checkpoint, and what reclaims then cost: the goodput model.

Goodput is the share of wall time that ends up as kept training. A periodic save costs
the time it holds training up; a reclaim costs the time to get a replacement training
again, plus whatever was trained since the newest committed checkpoint unless the final
save commits within the grace period. Saving often makes the first large and the second
small; the interval in between that maximises goodput is what this module computes.

**Model.** Reclaims arrive as a Poisson process of rate ``λ`` (per second of the job's
wall time: the per-node rate times its nodes, any node's reclaim restarting the job). A
share ``q`` of them are *graceful*: SIGTERM arrives and the final save commits within the
grace period, so they lose no training, only the final save ``f`` and the restart ``R``.
The rest, at rate ``λu = (1 - q) λ``, are *unannounced*: the work since the newest
committed checkpoint is redone. Between saves the job trains ``τ`` seconds; a save holds
training up ``s`` seconds (the capture of the state; the upload runs behind training) and
is committed ``C ≥ s`` seconds after it began.

For the unannounced reclaims this is Daly's complete model (J. T. Daly, "A higher order
estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), 2006, eq. 12:
``Tw = M e^(R/M) (e^((τ+δ)/M) - 1) Ts / τ``, ``M = 1/λu``) with the dump ``δ`` the stall
``s``, and the commit's lag behind it added to the restart: a reclaim rolls back to the
newest *committed* save, which is ``C - s`` older than the newest one begun. So the wall
time per second of kept training is::

    W(τ) = e^(λu (R + C - s)) (e^(λu (τ + s)) - 1) / (λu τ) / (1 - λ q (R + f))

which is Daly's model exactly when ``C = s`` and ``q = 0``, tends to ``(τ + s) / τ`` when
nothing is reclaimed, and to first order costs ``s/τ + λu (τ/2 + C + R) + λ q (R + f)``;
a Monte Carlo run of the process agrees to a thousandth (``tests/test_goodput_model.py``).
It holds while an upload finishes before the next save begins (``C ≤ τ + s``); past that
the next save waits, and the stall grows. Graceful reclaims take ``λ q (R + f)`` of every
wall second (``λ`` per wall second of the job), hence the last factor.
Goodput is ``1 / W``. The recommended interval is the ``τ`` that maximises it, found
numerically; Young's ``√(2 s M)`` and Daly's closed form are reported beside it, and
:func:`daly_interval` reproduces the paper's own figures (``tests/test_goodput_model.py``).

The refinement for graceful reclaims is what moves the interval: with a final save that
commits, only ``λu`` drives periodic saving, so the interval grows by ``1/√(1-q)`` over
what the reclaim rate alone would ask for, and a state too large to commit within the
grace period (``q = 0``) shrinks it back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LONGEST_INTERVAL_SECONDS = 24 * 3600.0
"""The longest interval recommended: where reclaims lose (almost) nothing, periodic saves
still guard against what is not a reclaim (a crash, a bad node), and a day is as long as
any run should go without one."""
SHORTEST_INTERVAL_SECONDS = 1.0


@dataclass(frozen=True)
class SaveCosts:
    """What a checkpoint costs the job, in seconds."""

    stall: float
    """Training held up per periodic save (``s``): the capture of the state."""
    commit: float
    """From a periodic save's start until it is committed (``C``, at least ``stall``)."""
    restart: float
    """From the end of training on the old node until the replacement trains (``R``):
    a node, the image, the restore."""
    final_save: float = 0.0
    """SIGTERM to the final save committed (``f``): training the graceful path stops."""

    def __post_init__(self) -> None:
        if min(self.stall, self.restart, self.final_save) < 0 or self.commit < self.stall:
            raise ValueError(f"costs out of range: {self}")


@dataclass(frozen=True)
class Reclaims:
    """How the job's nodes are taken back."""

    per_hour: float
    """Reclaims of the whole job per hour of its wall time (``λ``): per-node rate x nodes."""
    graceful_share: float
    """Share of reclaims whose final save commits within the grace period (``q``)."""

    def __post_init__(self) -> None:
        if self.per_hour < 0 or not 0 <= self.graceful_share <= 1:
            raise ValueError(f"reclaims out of range: {self}")

    @property
    def per_second(self) -> float:
        return self.per_hour / 3600

    @property
    def unannounced_per_second(self) -> float:
        """``λu``: the reclaims that cost the work since the newest commit."""
        return self.per_second * (1 - self.graceful_share)


def wall_per_kept_second(interval: float, costs: SaveCosts, reclaims: Reclaims) -> float:
    """``W(τ)``: wall seconds per second of kept training; ``inf`` where reclaims come
    faster than the job can recover from them."""
    if interval <= 0:
        raise ValueError(f"interval {interval} must be positive")
    unannounced = reclaims.unannounced_per_second
    graceful = reclaims.per_second * reclaims.graceful_share
    if unannounced > 0:
        exponent = unannounced * (interval + costs.stall)
        lag = unannounced * (costs.restart + costs.commit - costs.stall)
        if lag + exponent > 700:  # e^700 ~ float's end: no progress at all
            return math.inf
        wall = math.exp(lag) * math.expm1(exponent) / (unannounced * interval)
    else:
        wall = (interval + costs.stall) / interval
    spare = 1 - graceful * (costs.restart + costs.final_save)
    return wall / spare if spare > 0 else math.inf


def goodput(interval: float, costs: SaveCosts, reclaims: Reclaims) -> float:
    """Expected share of wall time kept as training, saving every ``interval`` seconds."""
    return 1 / wall_per_kept_second(interval, costs, reclaims)


def best_interval(costs: SaveCosts, reclaims: Reclaims) -> float:
    """The interval in seconds that maximises :func:`goodput`, within
    [:data:`SHORTEST_INTERVAL_SECONDS`, :data:`LONGEST_INTERVAL_SECONDS`], and no shorter
    than the model holds for: an upload done before the next save begins (``τ ≥ C - s``)."""
    if reclaims.unannounced_per_second == 0:
        return LONGEST_INTERVAL_SECONDS
    shortest = max(SHORTEST_INTERVAL_SECONDS, costs.commit - costs.stall)
    if shortest >= LONGEST_INTERVAL_SECONDS:
        return shortest
    # W is convex in τ here: golden-section search on log τ, which spans the range evenly.
    low, high = math.log(shortest), math.log(LONGEST_INTERVAL_SECONDS)
    ratio = (math.sqrt(5) - 1) / 2

    def cost(log_interval: float) -> float:
        return wall_per_kept_second(math.exp(log_interval), costs, reclaims)

    a, b = high - ratio * (high - low), low + ratio * (high - low)
    cost_a, cost_b = cost(a), cost(b)
    for _ in range(100):
        if cost_a <= cost_b:
            high, b, cost_b = b, a, cost_a
            a = high - ratio * (high - low)
            cost_a = cost(a)
        else:
            low, a, cost_a = a, b, cost_b
            b = low + ratio * (high - low)
            cost_b = cost(b)
    return math.exp((low + high) / 2)


def young_interval(dump: float, mtbf: float) -> float:
    """Young (1974), CACM 17(9): ``τ ≈ √(2 δ M)``."""
    return math.sqrt(2 * dump * mtbf)


def daly_interval(dump: float, mtbf: float) -> float:
    """Daly (2006), eq. 37: the higher-order optimum for a blocking dump ``δ`` and mean
    time between failures ``M``; ``M`` itself where ``δ ≥ 2M``."""
    if dump >= 2 * mtbf:
        return mtbf
    ratio = dump / (2 * mtbf)
    return math.sqrt(2 * dump * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - dump
