"""What a reclaim costs a gang whose ranks are replaced one at a time, path by path, with and
without warm spares: the plan's stall prediction.

A gang rendered with ``TrainingJob(recovery=GangRecovery.REPLACE_RANK)`` is a JobSet of a
*leader* pod (it hosts torchrun's rendezvous store) and *workers* whose reclaimed pod is
replaced alone (``plan.simulation.memory_tiers.replaces_reclaimed_pods_alone``). A reclaim
takes one of three paths, by which node goes and whether a notice comes first:

- **a worker's node, with notice**: the gang saves its final step to the bucket, the pod
  leaves (``catalog.TEARDOWN_SECONDS``: the Job creates its replacement only once it is
  terminal), its replacement starts and every rank restores that step from the bucket;
- **a worker's node, without notice**: the survivors wait in their pods; the replacement
  starts and restores from its holder's replica, the survivors from their own memory; the
  training since the newest save held in memory is redone;
- **the leader's node**: the whole gang restarts, as every reclaim does without
  replace-rank, from the bucket (the final save where a notice came; otherwise the newest
  persisted save, every ``PERSIST_EVERY``-th). The survivors' pods are deleted first, and
  each successor waits for its predecessor to leave its node (``catalog.TEARDOWN_SECONDS``)
  and then starts there (:attr:`Gang.pod_seconds`), while the leader's replacement waits
  for a spare or a node, whichever of the two is longer.

Each path's *stall*, from the reclaim (or notice) to the gang's next step, adds up what it
waits for: the final save, a node and the image (or, on a warm spare, a pod start), the
replacement's agent importing torch (``catalog.AGENT_START_SECONDS``), then its
``spotproof-torchrun`` forkserver, forked from the agent, importing the rest of the trainer
(``catalog.PRELOAD_SECONDS``) while the agent joins, then every worker forked warm
(``catalog.WARM_TRAINER_START_SECONDS``: the survivors' too, whose agents restart them),
and the restore at its tier's rate (``catalog``). The whole-gang restart's pods start the
same way: every pod a new one, its worker forked from its own forkserver.

Goodput then follows from a renewal argument: each reclaim costs its stall plus the
training it redoes, so with ``λ`` reclaims per second of the gang's wall time the share
kept is ``τ / (τ + s) x (1 - λ Σ share x (stall + redone))``, to first order in ``λ`` (the exact
Daly form of ``plan.simulation.goodput`` needs a single kind of reclaim). The whole-gang
restart is priced the same way, so the two compare like for like.

Warm spares (``kube.spares``) make a replacement a pod start. A spare in use is rebuilt
behind it (a node and the image), so ``c`` spares are all busy a share of the time given by
Erlang's loss formula, ``B(c, λ x rebuild)``; then the replacement waits for a node as
without spares. Spares are spot nodes of the same pool, paid whether used or not: the cost
of a useful GPU-hour is ``price x (N + c) / (N x goodput)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotproof.catalog import (
    AGENT_START_SECONDS,
    PEER_RESTORE_MIB_PER_SECOND,
    POD_START_SECONDS,
    PRELOAD_SECONDS,
    RESTORE_MIB_PER_SECOND,
    TEARDOWN_SECONDS,
    WARM_TRAINER_START_SECONDS,
)
from spotproof.plan.simulation.goodput import Reclaims, SaveCosts

WARM_STARTS = AGENT_START_SECONDS + PRELOAD_SECONDS + WARM_TRAINER_START_SECONDS
"""A new pod's start to its worker's restore, a replacement's or a whole-gang restart's:
the agent's import of torch, then the forkserver's imports (it is forked from the agent),
then a warm worker."""
MAX_SPARES = 4
"""The most spares the plan weighs: past a few, each one more saves almost nothing."""


@dataclass(frozen=True)
class Path:
    """One way a reclaim goes, and what it costs the gang."""

    reclaim: str
    """Which node goes, and whether a notice comes first, in words."""
    share: float
    """Of all reclaims of the gang."""
    restarted: str
    """Which pods are started again."""
    restores_from: str
    """Where the ranks read the step they resume from."""
    stall_seconds: float
    """From the reclaim (or its notice) to the gang's next step."""
    redone_seconds: float
    """Training redone on average: the work since the newest save the path can read."""


@dataclass(frozen=True)
class Gang:
    """What the prediction needs to know of one replace-rank gang."""

    pods: int
    state_mib: float
    costs: SaveCosts
    reclaims: Reclaims
    """Of the whole gang: a node's rate times :attr:`pods`."""
    node_seconds: float
    """A new node, then the image on it: what a replacement waits for without a spare."""
    persist_every: int
    """Every this-many-th periodic save also goes to the bucket."""
    pod_seconds: float = POD_START_SECONDS
    """A pod start on a node that is already there, the image on it: a free spare, or a
    restarted gang's own nodes."""


@dataclass(frozen=True)
class Prediction:
    """The paths and goodput of one gang with ``spares`` warm spares."""

    spares: int
    paths: tuple[Path, ...]
    spare_busy: float
    """The share of reclaims that find every spare being rebuilt (Erlang B)."""
    goodput: float
    cost: float
    """A useful GPU-hour (spares included), in the unit of :func:`predict`'s ``price``."""


def replacement_seconds(gang: Gang, spares: int) -> float:
    """Expected wait for a replacement pod to run: a pod start on a free spare, else a node
    and the image; the agent and the workers starting again come on top."""
    busy = erlang_b(spares, _rebuild_load(gang)) if spares else 1.0
    return busy * gang.node_seconds + (1 - busy) * gang.pod_seconds


def leaving_seconds(gang: Gang) -> float:
    """A reclaimed pod, from its notice to its being gone: its final save, then its exit
    (``catalog.TEARDOWN_SECONDS``). Nothing replaces it before: the Job creates its
    replacement, and a JobSet restarts its gang, only once it is terminal."""
    return gang.costs.final_save + TEARDOWN_SECONDS


def restart_seconds(gang: Gang, replacement: float) -> float:
    """Expected wait for every pod of a gang restarted whole to run again: the survivors'
    successors once their predecessors have left their nodes, the reclaimed pod's after
    ``replacement``, whichever comes later."""
    return max(replacement, TEARDOWN_SECONDS + gang.pod_seconds)


def paths(gang: Gang, interval: float, spares: int = 0) -> tuple[Path, ...]:
    """The three paths of :mod:`this module <spotproof.plan.simulation.recovery>`."""
    q = gang.reclaims.graceful_share
    worker = (gang.pods - 1) / gang.pods
    costs = gang.costs
    lag = costs.commit - costs.stall  # the newest save begun is not yet committed
    replacement = replacement_seconds(gang, spares)
    start = replacement + WARM_STARTS
    from_bucket = gang.state_mib / RESTORE_MIB_PER_SECOND
    from_peer = gang.state_mib / PEER_RESTORE_MIB_PER_SECOND
    leader_start = restart_seconds(gang, replacement) + WARM_STARTS + from_bucket
    persisted = gang.persist_every * interval
    return (
        Path(
            "a worker's node, with notice",
            worker * q,
            "its pod alone",
            "the bucket (the final save)",
            leaving_seconds(gang) + start + from_bucket,
            0.0,
        ),
        Path(
            "a worker's node, without notice",
            worker * (1 - q),
            "its pod alone",
            "their own memory (the survivors) and its holder's replica (the replacement)",
            start + from_peer,
            interval / 2 + lag,
        ),
        Path(
            "the leader's node",
            1 / gang.pods,
            "every pod",
            "the bucket",
            q * leaving_seconds(gang) + leader_start,
            (1 - q) * (persisted / 2 + lag),
        ),
    )


def whole_gang_paths(gang: Gang, interval: float) -> tuple[Path, ...]:
    """The same gang restarted whole on every reclaim (``GangRecovery.RESTART_GANG``),
    priced the same way: the baseline."""
    q = gang.reclaims.graceful_share
    costs = gang.costs
    restart = (
        restart_seconds(gang, gang.node_seconds)
        + WARM_STARTS
        + gang.state_mib / RESTORE_MIB_PER_SECOND
    )
    return (
        Path(
            "any node, with notice",
            q,
            "every pod",
            "the bucket",
            leaving_seconds(gang) + restart,
            0,
        ),
        Path(
            "any node, without notice",
            1 - q,
            "every pod",
            "the bucket",
            restart,
            interval / 2 + costs.commit - costs.stall,
        ),
    )


def goodput(found: tuple[Path, ...], gang: Gang, interval: float) -> float:
    """The share of wall time kept as training, to first order in the reclaim rate."""
    lost = gang.reclaims.per_second * sum(
        p.share * (p.stall_seconds + p.redone_seconds) for p in found
    )
    return max(0.0, interval / (interval + gang.costs.stall) * (1 - lost))


def predict(gang: Gang, interval: float, spares: int, price: float) -> Prediction:
    """``spares`` warm spares under the gang, saving every ``interval`` seconds; ``price``:
    a GPU node-hour of the pool, in whatever unit the costs are wanted in."""
    found = paths(gang, interval, spares)
    kept = goodput(found, gang, interval)
    busy = erlang_b(spares, _rebuild_load(gang)) if spares else 1.0
    cost = price * (gang.pods + spares) / (gang.pods * kept) if kept > 0 else math.inf
    return Prediction(spares, found, busy, kept, cost)


def recommended(predictions: list[Prediction]) -> Prediction:
    """The cheapest useful GPU-hour; the fewer spares where two cost the same."""
    return min(predictions, key=lambda p: (round(p.cost, 6), p.spares))


def erlang_b(servers: int, load: float) -> float:
    """Erlang's loss formula: the share of arrivals that find all ``servers`` busy, with
    ``load`` the arrival rate times the mean holding time."""
    blocked = 1.0
    for server in range(1, servers + 1):
        blocked = load * blocked / (server + load * blocked)
    return blocked


def _rebuild_load(gang: Gang) -> float:
    """Reclaims of the gang per rebuild of a spare (``λ x rebuild``): a worker's
    replacement and a restarted leader's pod both take a spare."""
    return gang.reclaims.per_second * gang.node_seconds
