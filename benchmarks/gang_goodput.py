"""Goodput of a gang under a reclaim trace: replace-rank against today's whole-gang restart
(issue 44), both in the same run on the same machine.

    python benchmarks/gang_goodput.py [--ranks 8] [--reclaims 3] [--seed 44] [--trace 600,2400]
    python benchmarks/gang_goodput.py --quick
    python benchmarks/gang_goodput.py --readme docs/performance.md

Two arms, each a gang of ``--ranks`` pods started as ``smoke.processes.elastic_gang`` starts them
(the launch script, torchrun's elastic agent and the trainer as its worker, one loopback
address per pod, the bucket emulator), reclaimed at the same points of the same trace:

- **replace-rank** (``TrainingJob(recovery=REPLACE_RANK)``): each pod keeps its saves in
  a memory directory (on ``/dev/shm``, as a memory-backed ``emptyDir``) replicated to a
  peer, every ``PERSIST_EVERY``-th save persisted. A worker's reclaim replaces its pod
  alone ``--pod-start`` seconds after it is gone (its memory lost); the survivors keep
  their pods and memory. The leader's reclaim (it hosts the rendezvous store) restarts
  the gang, as its JobSet does.
- **whole gang** (today's ``RESTART_GANG``): no memory tier (a restart would find it
  empty), every periodic save persisted; every reclaim restarts every pod: the rest are
  torn down (SIGTERM, then SIGKILL after ``LEAVE_SECONDS``), and ``--pod-start`` seconds
  later all pods start again on a new rendezvous and resume from the bucket.

The agents wait ``--join-timeout`` (300 s) for their gang to assemble, not the rehearsal's
120 s: eight agents importing torch on two busy cores took longer (a TrainingJob renders
900 s).

A reclaim strikes one pod, with notice (SIGTERM, the grace, as ``smoke.runs.gang_faults.reclaim``
plays it) or without (SIGKILL of the pod's every process). Which pod, and whether with
notice, cycles through ``--mix`` (by default a worker with notice, a worker without, the
leader without: each path of replace-rank once, the leader at 1/3 rather than its 1/N
share, which makes the replace-rank figure over the trace conservative; a worker is
drawn from the trace's seed, the same in both arms).

Time-scaling: the trace is in real seconds (reclaims of the whole gang, a seeded Poisson
process of mean ``--every`` = 1800 s, or ``--trace``); between two reclaims the gang trains
``gap x --scale`` seconds of compressed time (at least ``--min-steps`` steps, so a save has
been replicated since the last resume). Stalls and redone steps are real seconds, never
scaled. Per reclaim the benchmark reports the *stall*, from the SIGTERM or SIGKILL to the
gang's next step (the slowest pod's first step after its resume), and the *steps lost*:
steps trained before the reclaim that were trained again. The goodput at one reclaim every
30 minutes is ``1 - (mean stall + mean redone seconds) / 1800``, redone seconds being steps
lost x the arm's median step time; the *mix-weighted* figure weights each kind's mean by
its share of an N-rank gang's reclaims (the leader 1/N, each worker kind (N-1)/N split by
``--notice-share``); the *raw* goodput is measured over the compressed run, net steps x the
median step time over the wall time, so it counts each stall against the compressed time
between reclaims and means nothing at the real rate. Beside the measured stalls: the plan's
predictions for the same gang (``plan.simulation.recovery``, with ``--pod-start`` for the
node and the final saves as measured).

The arms take turns in blocks (``--blocks``: the trace split in that many parts, each
played by a fresh gang of each arm, the order of the arms reversed every block), so drift
in the machine's load hits both; each block costs a gang start per arm (2.5 minutes for 8
pods on 2 busy cores), so the default is one block, the arms one after the other. Nothing
asserts: each target is printed with met or missed. ``--quick`` (2 pods, one reclaim with
notice, the file store) checks the harness in about two minutes; its figures mean
nothing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from measure import check_block, replace_block

from spotproof.kube.jobset import JOIN_TIMEOUT_SECONDS
from spotproof.plan.simulation import recovery
from spotproof.plan.simulation.goodput import Reclaims, SaveCosts
from spotproof.smoke.emulation.object_stores import emulated
from spotproof.smoke.processes import elastic_gang
from spotproof.smoke.processes.elastic_gang import (
    PERSIST_EVERY,
    REPLACEMENT_SECONDS,
    ElasticGang,
    Nodes,
)
from spotproof.smoke.processes.gang_ranks import finish_all
from spotproof.smoke.processes.trainer_process import Event, TrainerProcess
from spotproof.smoke.reports.records import Interruption, SmokeConfig, last_words, trainer_env
from spotproof.smoke.runs.gang_faults import LEAVE_SECONDS, reclaim

REPLACE, WHOLE = "replace-rank", "whole gang"
EVERY_SECONDS = 1800.0
"""The issue's rate: one reclaim of the gang every 30 minutes."""
TARGET_STALL = 30.0
"""Issue 44: with a spare node and the notice, the gang's next step within 30 s of the
reclaimed rank's SIGTERM, plus the emulated pod start."""
TARGET_GOODPUT = 0.97
MIX = "worker:notice,worker:kill,leader:kill"
KINDS = ("worker:notice", "worker:kill", "leader:notice", "leader:kill")
BLOCK = "gang-goodput"
RESUME_SECONDS = 360.0
"""How long the gang gets to resume after a reclaim or its start; a recovery that takes
longer is reported as failed (torch's elastic rendezvous once hung for minutes after a
worker's kill at 8 pods, docs/performance.md)."""
JOIN_SECONDS = 300
"""The agents' ``join_timeout`` here: the rehearsal's 120 s (``elastic_gang.JOIN_SECONDS``)
is too short for 8 agents importing torch on 2 busy cores (a whole-gang restart failed its
rendezvous at a load average of 11); a ``TrainingJob`` renders 900 s
(``kube.jobset.JOIN_TIMEOUT_SECONDS``)."""


@dataclass(frozen=True)
class Reclaim:
    """One entry of the trace."""

    at: float
    """Real seconds since the trace began."""
    gap: float
    """Compressed seconds the gang trains before it."""
    kind: str
    """``worker`` or ``leader``, ``notice`` or ``kill``."""

    @property
    def leader(self) -> bool:
        return self.kind.startswith("leader")

    @property
    def notice(self) -> bool:
        return self.kind.endswith("notice")


@dataclass
class Outcome:
    """One reclaim as one arm lived it."""

    reclaim: Reclaim
    victim: int
    at_step: int
    resumed: int
    tiers: list[str]
    stall: float
    """The SIGTERM or SIGKILL to the gang's next step, seconds."""
    teardown: float | None = None
    """The other pods' SIGTERM to their exit, on a whole-gang restart."""
    final_save: float | None = None
    exit_code: int | None = None
    memory_bound: int | None = None
    """Without notice, on replace-rank: the newest save every survivor held in memory
    before the kill."""
    struck: float = 0.0
    """When the SIGTERM or SIGKILL was sent, seconds since the gang's origin."""
    load: float = 0.0
    """The machine's 1-minute load average at the gang's next step (other work included)."""

    @property
    def steps_lost(self) -> int:
        return max(0, self.at_step - self.resumed)


@dataclass
class Arm:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    step_gaps: list[float] = field(default_factory=list)
    """Seconds between consecutive steps of the last pod while nothing was struck."""
    net_steps: int = 0
    wall: float = 0.0
    failures: list[str] = field(default_factory=list)
    redone_step: float = 0.0
    """The step time redone steps are priced at: both arms' pooled median (set once both
    have run), so that load drifting between the arms does not price the same lost step
    differently."""

    @property
    def step_seconds(self) -> float:
        return statistics.median(self.step_gaps) if self.step_gaps else 0.0

    def redone(self, outcome: Outcome) -> float:
        return outcome.steps_lost * self.redone_step

    def mean(self, value: Callable[[Outcome], float], kind: str | None = None) -> float | None:
        found = [value(o) for o in self.outcomes if kind is None or o.reclaim.kind == kind]
        return statistics.mean(found) if found else None

    def goodput(self) -> float | None:
        """At one reclaim every 30 minutes, from the plain means over the trace."""
        if not self.outcomes:
            return None
        cost = statistics.mean(o.stall + self.redone(o) for o in self.outcomes)
        return 1 - cost / EVERY_SECONDS

    def weighted_goodput(self, ranks: int, notice_share: float) -> float | None:
        """At one reclaim every 30 minutes, each kind's mean weighted by its share of an
        N-rank gang's reclaims; a kind not played takes the mean of its node's others."""
        shares = shares_of(ranks, notice_share)
        cost = 0.0
        for kind, share in shares.items():
            mean = self.mean(lambda o: o.stall + self.redone(o), kind)
            if mean is None:  # e.g. the leader only without notice: its other kind
                node = kind.split(":")[0]
                found = [
                    o.stall + self.redone(o)
                    for o in self.outcomes
                    if o.reclaim.kind.startswith(node)
                ]
                if not found:
                    return None
                mean = statistics.mean(found)
            cost += share * mean
        return 1 - cost / EVERY_SECONDS

    def raw_goodput(self) -> float | None:
        return self.net_steps * self.step_seconds / self.wall if self.wall else None


def shares_of(ranks: int, notice_share: float) -> dict[str, float]:
    worker = (ranks - 1) / ranks
    return {
        "worker:notice": worker * notice_share,
        "worker:kill": worker * (1 - notice_share),
        "leader:notice": notice_share / ranks,
        "leader:kill": (1 - notice_share) / ranks,
    }


# --- the trace ------------------------------------------------------------------------


def make_trace(args: argparse.Namespace) -> list[Reclaim]:
    """The reclaims' real times (``--trace``, or a seeded Poisson process of mean
    ``--every``), each gap compressed by ``--scale``, the kinds cycling through ``--mix``;
    plus one more gap, the training after the last reclaim."""
    mix = args.mix.split(",")
    if args.trace:
        times = [float(t) for t in args.trace.split(",")]
        draws = random.Random(args.seed)
        times.append(times[-1] + draws.expovariate(1 / args.every))
    else:
        draws, times, now = random.Random(args.seed), [], 0.0
        for _ in range(args.reclaims + 1):
            now += draws.expovariate(1 / args.every)
            times.append(now)
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    return [
        Reclaim(at, gap * args.scale, mix[k % len(mix)] if k < len(times) - 1 else "end")
        for k, (at, gap) in enumerate(zip(times, gaps, strict=True))
    ]


def blocks(trace: list[Reclaim], count: int) -> list[list[Reclaim]]:
    """The reclaims in ``count`` parts, each ending with a stretch of training."""
    reclaims, end = trace[:-1], trace[-1]
    count = max(1, min(count, len(reclaims)))
    size = -(-len(reclaims) // count)
    parts = [reclaims[k : k + size] for k in range(0, len(reclaims), size)]
    # Each part's closing stretch: the next part's first gap (the trace's own last for the last).
    return [
        [*part, Reclaim(part[-1].at, (parts[k + 1][0] if k + 1 < len(parts) else end).gap, "end")]
        for k, part in enumerate(parts)
    ]


# --- the pods -------------------------------------------------------------------------


class NoTier(Nodes):
    """Today's ``RESTART_GANG`` pods: no memory tier, every periodic save to the bucket."""

    def env(self, rank: int) -> dict[str, str]:
        return {}


def memory_root() -> str | None:
    """``/dev/shm`` (tmpfs, as a memory-backed ``emptyDir``) where writable."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def replace(gang: ElasticGang, index: int, pod_start: float) -> None:
    """Pod ``index`` is gone with its memory; its replacement starts ``pod_start`` later
    (``ElasticGang.replace`` with the benchmark's own pod start)."""
    gang.nodes.lose(index)
    time.sleep(pod_start)
    gang.pods[index] = gang._start(index)  # the gang's own way to start a pod


def restart_all(gang: ElasticGang, victim: int, pod_start: float) -> float:
    """What the JobSet does when a Job of the gang failed: every other pod deleted (SIGTERM,
    SIGKILL after ``LEAVE_SECONDS``), then, ``pod_start`` later, every pod new with empty
    memory on a new rendezvous. Returns the teardown's seconds."""
    others = [pod for k, pod in enumerate(gang.pods) if k != victim]
    started = time.monotonic()
    for pod in others:
        pod.send(signal.SIGTERM)
    finish_all(others, LEAVE_SECONDS)
    teardown = time.monotonic() - started
    time.sleep(pod_start)
    gang.restart_all()
    return teardown


def resumes(gang: ElasticGang, lives: list[int]) -> list[Event]:
    """Each pod's ``lives[k]``-th ``resumed`` event (1-based), waiting up to
    ``RESUME_SECONDS`` for the slowest: the rehearsal's own wait is too short for 16
    processes starting on 2 busy cores."""
    deadline, found = time.monotonic() + RESUME_SECONDS, []
    for pod, life in zip(gang.pods, lives, strict=True):
        event = pod.wait_for(_nth("resumed", life), timeout=max(1.0, deadline - time.monotonic()))
        if event is None:
            raise RuntimeError(f"pod {pod.index} ended before resuming: {last_words(pod)}")
        found.append(event)
    return found


def _nth(name: str, n: int) -> Callable[[Event], bool]:
    """Matches the ``n``-th event called ``name`` of one scan from the first event."""
    seen = [0]

    def match(event: Event) -> bool:
        seen[0] += event.get("event") == name
        return event.get("event") == name and seen[0] == n

    return match


def first_step_after(pod: TrainerProcess, since: float, timeout: float = 240) -> float | None:
    """When ``pod`` reported its first step at or after ``since`` (seconds since origin)."""
    deadline, seen = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        events = pod.events[seen:]
        for at, event in events:
            if at >= since and event.get("event") == "step":
                return at
        seen += len(events)
        if pod.popen.poll() is not None and not pod.events[seen:]:
            return None
        time.sleep(0.05)
    return None


def next_step(gang: ElasticGang, lives: list[int]) -> float:
    """The gang's next step (seconds since origin): the slowest pod's first step after its
    ``lives[k]``-th resume (1-based)."""
    latest = 0.0
    for pod, life in zip(gang.pods, lives, strict=True):
        resumed = [t for t, e in pod.events if e.get("event") == "resumed"][life - 1]
        at = first_step_after(pod, resumed)
        if at is None:
            raise RuntimeError(f"pod {pod.index} took no step after resuming")
        latest = max(latest, at)
    return latest


def held_in_memory(pod: TrainerProcess, before: float) -> int:
    """The newest save ``pod`` reported held (in memory and on its peer) or committed
    before ``before``."""
    steps = [
        int(e["step"])
        for t, e in pod.events
        if t <= before
        and (
            e.get("event") == "checkpoint_held"
            or (e.get("event") == "checkpoint" and e.get("kind") != "final")
        )
    ]
    return max(steps, default=0)


# --- one arm, one block ---------------------------------------------------------------


@dataclass
class Setup:
    args: argparse.Namespace
    config: SmokeConfig
    bucket: object
    scratch: Path
    progress: Callable[[str], None]


def play(arm: Arm, block: list[Reclaim], number: int, setup: Setup) -> None:
    """A fresh gang of ``arm`` through the reclaims of ``block``, then its closing stretch."""
    args, config = setup.args, setup.config
    name = f"{arm.name.replace(' ', '-')}-{number}"
    env = trainer_env(config, setup.bucket, name)  # type: ignore[arg-type]
    kind = Nodes if arm.name == REPLACE else NoTier
    nodes = kind(setup.scratch / name, args.ranks)
    origin = time.monotonic()
    gang = ElasticGang(env, nodes, origin)
    try:
        resumes(gang, [1] * args.ranks)
        lives = [1] * args.ranks
        began = first = next_step(gang, lives)
        resumed_step, start_step = 0, gang.step
        for reclaim_ in block:
            target = resumed_step + args.min_steps
            last = gang.pods[-1]
            if last.wait_for(lambda e, t=target: e["event"] == "step" and e["step"] >= t) is None:
                raise RuntimeError(
                    f"pod {last.index} ended before step {target}: {last_words(last)}"
                )
            time.sleep(max(0.0, began + reclaim_.gap - last.now()))
            _keep_step_gaps(arm, gang.pods[-1], began, last.now())
            if reclaim_.kind == "end":
                arm.net_steps += gang.step - start_step
                arm.wall += last.now() - first
                break
            outcome, lives = strike(arm.name, gang, reclaim_, lives, setup=setup)
            arm.outcomes.append(outcome)
            began = outcome.struck + outcome.stall
            resumed_step = outcome.resumed
            setup.progress(f"  {arm.name}, {describe(outcome)}")
    except (RuntimeError, TimeoutError) as error:
        said = [e[-1][1].get("event", "?") if (e := pod.events) else "-" for pod in gang.pods]
        words = f"{str(error) or type(error).__name__} (each pod's last event: {said})"
        arm.failures.append(f"block {number}: {words}")
        setup.progress(f"  {arm.name}: block {number} abandoned: {words}")
    finally:
        for pod in gang.every_pod:
            pod.send(signal.SIGKILL)
        for pod in gang.every_pod:
            pod.finish(10)
        shutil.rmtree(setup.scratch / name, ignore_errors=True)


def strike(
    arm: str,
    gang: ElasticGang,
    reclaim_: Reclaim,
    lives: list[int],
    *,
    setup: Setup,
) -> tuple[Outcome, list[int]]:
    """One reclaim of one pod, then the arm's recovery, to the gang's next step."""
    args, size = setup.args, gang.size
    victim = 0 if reclaim_.leader else 1 + random.Random(f"{reclaim_.at}").randrange(size - 1)
    pod = gang.pods[victim]
    survivors = [p for k, p in enumerate(gang.pods) if k != victim]
    record = Interruption("preemption" if reclaim_.notice else "hard-kill", 0, 0.0, 0)
    struck = pod.now()
    lives = list(lives)
    if reclaim_.notice:
        grace = reclaim([pod], setup.config, record)
        code = pod.finish(grace + LEAVE_SECONDS)
        finals = [e for e in pod.of("checkpoint") if e.get("kind") == "final"]
        final = float(finals[-1].get("since_signal", finals[-1]["seconds"])) if finals else None
    else:
        pod.send(signal.SIGKILL)
        code, final = pod.finish(), None
    at_step = gang.step
    bound = None
    if arm == REPLACE and not reclaim_.notice and not reclaim_.leader:
        bound = min(held_in_memory(p, struck) for p in survivors)
    teardown = None
    if arm == WHOLE or reclaim_.leader:
        teardown = restart_all(gang, victim, args.pod_start)
        lives = [1] * size
    else:
        replace(gang, victim, args.pod_start)
        lives = [life + 1 for life in lives]
        lives[victim] = 1
    events = resumes(gang, lives)
    resumed = min(int(e["step"]) for e in events)
    stall = next_step(gang, lives) - struck
    load = os.getloadavg()[0]
    return (
        Outcome(
            reclaim_,
            victim,
            at_step,
            resumed,
            [str(e.get("tier", "")) for e in events],
            stall,
            teardown,
            final,
            code,
            bound,
            struck,
            load,
        ),
        lives,
    )


def describe(outcome: Outcome) -> str:
    reclaim_ = outcome.reclaim
    teardown = "" if outcome.teardown is None else f" (teardown {outcome.teardown:.1f} s)"
    return (
        f"{reclaim_.kind} (pod {outcome.victim}) at step {outcome.at_step}: resumed from "
        f"{outcome.resumed} ({', '.join(sorted(set(outcome.tiers)))}), {outcome.steps_lost} "
        f"steps lost, next step {outcome.stall:.1f} s after the "
        f"{'SIGTERM' if reclaim_.notice else 'SIGKILL'}{teardown}"
    )


def _keep_step_gaps(arm: Arm, pod: TrainerProcess, since: float, until: float) -> None:
    times = [t for t, e in pod.events if e.get("event") == "step" and since <= t <= until]
    # The first steps after a resume warm up; the median takes care of the rest.
    arm.step_gaps += [b - a for a, b in itertools.pairwise(times[3:])]


# --- the plan's prediction --------------------------------------------------------------


def plan_gang(args: argparse.Namespace, final_save: float, notice_share: float) -> recovery.Gang:
    """This benchmark's gang as the plan models it: ``--pod-start`` both for a node and for
    a pod on a node already there, every reclaim's final save ``final_save``."""
    return recovery.Gang(
        pods=args.ranks,
        state_mib=args.model_mb,
        costs=SaveCosts(0.0, 0.0, 0.0, final_save),
        reclaims=Reclaims(3600 / EVERY_SECONDS, notice_share),
        node_seconds=args.pod_start,
        persist_every=PERSIST_EVERY,
        pod_seconds=args.pod_start,
    )


def predicted(kind: str, args: argparse.Namespace, final_save: float, whole: bool) -> float:
    """The plan's stall for one kind of reclaim of this gang: ``--pod-start`` for the node,
    the restore at its tier's catalogue rate."""
    notice = kind.endswith("notice")
    gang = plan_gang(args, final_save if notice else 0.0, 1.0 if notice else 0.0)
    interval = args.interval * args.step_seconds
    if whole:
        paths = recovery.whole_gang_paths(gang, interval)
        return paths[0 if notice else 1].stall_seconds
    paths = recovery.paths(gang, interval)
    return paths[2 if kind.startswith("leader") else 0 if notice else 1].stall_seconds


# --- the report -----------------------------------------------------------------------


def _f(value: float | None, unit: str = " s", digits: str = ".1f") -> str:
    return "n/a" if value is None else f"{value:{digits}}{unit}"


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs > 0 else "n/a"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def tables(arms: dict[str, Arm], args: argparse.Namespace, trace: list[Reclaim]) -> list[str]:
    replace_arm, whole = arms[REPLACE], arms[WHOLE]
    drawn = f"--trace {args.trace}" if args.trace else f"Poisson, mean {args.every:g} s"
    lines = [
        f"Gang of {args.ranks} pods, {args.model_mb:g} MiB of model and Adam state, "
        f"{args.store} bucket emulator, a save every {args.interval} steps "
        f"({args.interval * args.step_seconds:g} s at the {args.step_seconds:g} s step pacing), "
        f"pod start {args.pod_start:g} s. Trace: {len(trace) - 1} reclaims ({drawn}, seed "
        f"{args.seed}), productive time between them x{args.scale:.4g} (at least "
        f"{args.min_steps} steps); {args.blocks} block(s), the arms' order reversed each "
        f"block; agents' join_timeout {args.join_timeout} s. Median step: replace-rank "
        f"{replace_arm.step_seconds:.3f} s, whole gang {whole.step_seconds:.3f} s; redone "
        f"steps priced at both arms' {replace_arm.redone_step:.3f} s.",
        "",
        "| # | reclaim (trace s) | arm | pod | stall: reclaim to next step | teardown | "
        "steps lost | redone | resumed from | read from | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k in range(len(trace) - 1):
        for arm in (replace_arm, whole):
            found = [o for o in arm.outcomes if o.reclaim is trace[k]]
            if not found:
                lines.append(f"| {k + 1} | {trace[k].kind} | {arm.name} | not played ||||||||")
                continue
            o = found[0]
            tiers = ", ".join(f"{tier} x{o.tiers.count(tier)}" for tier in sorted(set(o.tiers)))
            lines.append(
                f"| {k + 1} | {o.reclaim.kind} ({o.reclaim.at:.0f}) | {arm.name} | {o.victim} | "
                f"**{o.stall:.1f} s** | {_f(o.teardown)} | {o.steps_lost} | "
                f"{arm.redone(o):.2f} s | {o.resumed} | {tiers} | {o.load:.1f} |"
            )
    final = statistics.mean(
        [o.final_save for a in arms.values() for o in a.outcomes if o.final_save is not None]
        or [0.0]
    )
    lines += [
        "",
        "| arm | mean stall | mean steps lost | mean redone | goodput at 1 reclaim / 30 min "
        f"| mix-weighted ({args.notice_share:.0%} with notice, leader 1/{args.ranks}) "
        "| raw goodput, compressed run | plan's predicted goodput |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm, paths in ((replace_arm, False), (whole, True)):
        plan = plan_goodput(args, final, whole=paths)
        lines.append(
            f"| {arm.name} | {_f(arm.mean(lambda o: o.stall))} | "
            f"{_f(arm.mean(lambda o: o.steps_lost), '', '.1f')} | "
            f"{_f(arm.mean(arm.redone), ' s', '.2f')} | **{_pct(arm.goodput())}** | "
            f"{_pct(arm.weighted_goodput(args.ranks, args.notice_share))} | "
            f"{_pct(arm.raw_goodput())} | {_pct(plan)} |"
        )
    lines += [
        "",
        "| reclaim kind | replace-rank: measured stall | plan predicts | whole gang: measured "
        "| plan predicts |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind in KINDS:
        ours, theirs = (
            replace_arm.mean(lambda o: o.stall, kind),
            whole.mean(lambda o: o.stall, kind),
        )
        if ours is None and theirs is None:
            continue
        lines.append(
            f"| {kind} | {_f(ours)} | {predicted(kind, args, final, whole=False):.1f} s | "
            f"{_f(theirs)} | {predicted(kind, args, final, whole=True):.1f} s |"
        )
    lines += ["", *verdicts(arms, args)]
    failures = [f"{arm.name}: {why}" for arm in arms.values() for why in arm.failures]
    if failures:
        lines += ["", "Failures: " + "; ".join(failures)]
    return lines


def plan_goodput(args: argparse.Namespace, final_save: float, whole: bool) -> float:
    gang = plan_gang(args, final_save, args.notice_share)
    interval = args.interval * args.step_seconds
    found = recovery.whole_gang_paths(gang, interval) if whole else recovery.paths(gang, interval)
    return recovery.goodput(found, gang, interval)


def verdicts(arms: dict[str, Arm], args: argparse.Namespace) -> list[str]:
    ours, today = arms[REPLACE], arms[WHOLE]
    lines = []
    stall, base = ours.mean(lambda o: o.stall), today.mean(lambda o: o.stall)
    lost, base_lost = ours.mean(lambda o: o.steps_lost), today.mean(lambda o: o.steps_lost)
    if stall and base:
        lines.append(
            f"Replace-rank against the whole gang: mean stall {stall / base:.2f}x"
            + (f", steps lost {lost / base_lost:.2f}x" if base_lost else "")
            + f", goodput at 1/30 min {_pct(ours.goodput())} against {_pct(today.goodput())}"
            f" ({_ratio(1 - (ours.goodput() or 0), 1 - (today.goodput() or 0))} the time lost)."
        )
    noticed = [o for o in ours.outcomes if o.reclaim.kind == "worker:notice"]
    if noticed:
        worst = max(o.stall - args.pod_start for o in noticed)
        met = "met" if worst <= TARGET_STALL else f"MISSED by {worst - TARGET_STALL:.1f} s"
        lines.append(
            f"Target: a worker reclaimed with notice, next step within {TARGET_STALL:g} s of "
            f"its SIGTERM plus the {args.pod_start:g} s pod start: worst "
            f"{worst + args.pod_start:.1f} s ({worst:.1f} s + {args.pod_start:g} s) over "
            f"{len(noticed)}, {met}."
        )
    else:
        lines.append("Target: next step within 30 s of a worker's SIGTERM: not played.")
    killed = [o for o in ours.outcomes if o.memory_bound is not None]
    if killed:
        over = [o.resumed - o.memory_bound for o in killed]
        met = "met" if min(over) >= 0 else f"MISSED by {-min(over)} steps"
        lines.append(
            "Target: a worker killed without notice, survivors lose at most the steps since "
            "their last memory-tier save: "
            + ", ".join(
                f"lost {o.steps_lost} of {o.at_step - o.memory_bound} since it" for o in killed
            )
            + f", {met}."
        )
    else:
        lines.append("Target: without notice, steps since the last memory save: not played.")
    found = ours.goodput()
    weighted = ours.weighted_goodput(args.ranks, args.notice_share)
    if found is not None:
        met = "met" if found >= TARGET_GOODPUT else f"MISSED by {TARGET_GOODPUT - found:.2%}"
        lines.append(
            f"Target: goodput >= {TARGET_GOODPUT:.0%} for a gang of {args.ranks} at one reclaim "
            f"every 30 minutes: {_pct(found)} over the trace ({_pct(weighted)} mix-weighted), "
            f"{met}; today's whole-gang restart measured the same way: "
            f"{_pct(today.goodput())} "
            f"({_pct(today.weighted_goodput(args.ranks, args.notice_share))})."
        )
    return lines


# --- main -----------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8, help="pods in the gang")
    parser.add_argument("--reclaims", type=int, default=3, help="Poisson trace: reclaims")
    parser.add_argument("--every", type=float, default=EVERY_SECONDS, help="trace: mean s")
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--trace", default="", help="reclaims at these real seconds: 600,2400")
    parser.add_argument("--mix", default=MIX, help=f"kinds, cycled (of {', '.join(KINDS)})")
    parser.add_argument("--notice-share", type=float, default=0.5, help="for the weighting")
    parser.add_argument("--scale", type=float, default=1 / 120, help="compressed s per real s")
    parser.add_argument("--min-steps", type=int, default=0, help="default 2 intervals + 1")
    parser.add_argument("--pod-start", type=float, default=REPLACEMENT_SECONDS)
    parser.add_argument("--blocks", type=int, default=1)
    parser.add_argument("--model-mb", type=float, default=64)
    parser.add_argument("--interval", type=int, default=10, help="steps between saves")
    parser.add_argument("--step-seconds", type=float, default=0.05, help="each step's pacing")
    parser.add_argument("--store", default="s3", help="the bucket emulator")
    parser.add_argument(
        "--join-timeout",
        type=int,
        default=JOIN_SECONDS,
        help="the agents' join_timeout, s (the rehearsal's is "
        f"{elastic_gang.JOIN_SECONDS}, a TrainingJob's {JOIN_TIMEOUT_SECONDS})",
    )
    parser.add_argument("--quick", action="store_true", help="2 ranks, 1 reclaim, 4 MiB")
    parser.add_argument("--readme", type=Path, help=f"replace the {BLOCK} tables there")
    args = parser.parse_args()
    if args.quick:
        args.ranks, args.reclaims, args.model_mb, args.blocks = 2, 1, 4, 1
        args.mix, args.scale, args.trace, args.store = "worker:notice", 1 / 600, "", "file"
    args.min_steps = args.min_steps or 2 * args.interval + 1
    if args.ranks < 2 or 16 % args.ranks:
        raise SystemExit(f"--ranks {args.ranks}: 2 or more, dividing the batch's 16 rows")
    if bad := [k for k in args.mix.split(",") if k not in KINDS]:
        raise SystemExit(f"--mix: unknown kinds {bad}; allowed: {', '.join(KINDS)}")
    check_block(args.readme, BLOCK)
    # The pods' join_timeout is read from the module when each pod starts.
    if not hasattr(elastic_gang, "JOIN_SECONDS"):
        raise SystemExit(
            "smoke.processes.elastic_gang has no JOIN_SECONDS: --join-timeout needs a way in"
        )
    elastic_gang.JOIN_SECONDS = args.join_timeout
    trace = make_trace(args)
    config = SmokeConfig(
        store=args.store,
        total_steps=10**7,
        interval=args.interval,
        model_mb=args.model_mb,
        step_seconds=args.step_seconds,
    )
    arms = {REPLACE: Arm(REPLACE), WHOLE: Arm(WHOLE)}
    started, load = time.monotonic(), os.getloadavg()[0]
    with (
        emulated(args.store) as bucket,
        tempfile.TemporaryDirectory(prefix="spotproof-gang-goodput-", dir=memory_root()) as scratch,
    ):
        setup = Setup(args, config, bucket, Path(scratch), lambda line: print(line, flush=True))
        for number, block in enumerate(blocks(trace, args.blocks)):
            order = [REPLACE, WHOLE] if number % 2 == 0 else [WHOLE, REPLACE]
            for name in order:
                print(f"block {number + 1}, {name}: {', '.join(r.kind for r in block)}", flush=True)
                play(arms[name], block, number + 1, setup)
    gaps = [gap for arm in arms.values() for gap in arm.step_gaps]
    for arm in arms.values():
        arm.redone_step = statistics.median(gaps) if gaps else 0.0
    lines = tables(arms, args, trace)
    lines[0] += (
        f" The run took {time.monotonic() - started:.0f} s on {os.cpu_count()} cores; load "
        f"average {load:.1f} at its start, {os.getloadavg()[0]:.1f} at its end."
    )
    print("\n".join(lines))
    if args.readme:
        replace_block(args.readme, BLOCK, lines)
    return 0 if not any(arm.failures for arm in arms.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
