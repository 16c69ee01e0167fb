"""The goodput model (``spotproof.plan.simulation.goodput``) against real trainers: what
``goodput.py --model`` and ``tests/test_goodput_trace.py`` run, so it lives beside them, out
of the package.

A trace trains the smoke trainer on a local file store for a set time while reclaims stop
it, ``graceful`` (SIGTERM, the final save, exit within the grace period) or
``unannounced`` (SIGKILL), each followed by a replacement. The trainers' events give what
the model takes as given (the step; a save's stall and commit latency; the restart; the
final save) and the reclaims the trace had (their rate, the graceful share); from those
the model predicts the goodput the trace measures. That tests the model's own part:
how interval, rate and costs combine, above all that an unannounced reclaim loses the work
since the newest commit and a graceful one only its stop and restart.

**A short run measures the expectation, not one draw.** A few reclaims at random times
would lose whatever their phases in the checkpoint period happened to be. So each waits
for the first save begun after its due time (due times spread evenly over the run) to
commit, and an unannounced one then strikes at the mean age (time since that commit) of
a Poisson reclaim that strikes before the next commit: an exponential at the trace's rate,
truncated at the period ``τ + s`` as the steps kept so far measure it. The loss, commit
latency plus age, is linear in the age, so a reclaim at the mean age loses the expected
amount. (Stratified phases would put the last stratum against the next commit, where
milliseconds of jitter decide between losing a period and nothing.)

**The rate is per second a reclaim could strike.** A trace strikes only while a trainer
trains, never during a restart or a final save, so the Poisson process it samples has its
reclaims per second of that time: ``n / (wall - restarts - final saves)``, the rate's
maximum-likelihood estimate over what was exposed. Per wall second instead, the model
would see a rate a restart's share too low: at the long interval (four reclaims, half a
second of restart each, in 18 s of wall) that read three points of goodput above the
measurement. Left out, as of second order: Poisson reclaims that strike a restart (the
model prices them, the trace plays none), half a point of goodput at most.

**Traces run side by side, started and stopped together**, so that each sees the same
load throughout: one left to finish alone would speed up at its end, its period shorter
than the one its reclaims were timed by. **Restarts are warm**: a trace's trainers are
forked, one at a time, from the rehearsal's zygote (``smoke.processes.warm``: a process that has
imported the trainer, torch and its compiler stack), four CPU-seconds once per trace
rather than per reclaim. A restart is then a replacement's on a node with the image
pulled, the trainer's ``main`` through the restore to its first step: a fraction of
a second, as a real restart's minutes are a fraction of a real interval.

The step is the mean of the kept steps that hold no capture (an upload slowing the steps
beside it counts as training: the model has no term for it), the stall the mean excess of
those that do; the restart runs from the kill, or the final commit, to the replacement's
first step, less a step; wall time from the first step to the last (the first start and
the closing save are no part of the model). So the bookkeeping is exact: the wall time is
the kept steps, the stalls, the work lost, the restarts and the final saves.
"""

from __future__ import annotations

import math
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass, field

from spotproof.plan.simulation.goodput import Reclaims, SaveCosts, best_interval, goodput
from spotproof.smoke.processes.trainer_process import Event, TrainerProcess
from spotproof.smoke.processes.warm import Zygote, warm_trainers

GRACEFUL, UNANNOUNCED = "graceful", "unannounced"


@dataclass(frozen=True)
class TraceConfig:
    interval: int
    """Steps between periodic saves (``CHECKPOINT_INTERVAL``)."""
    seconds: float = 15
    """Of training, from the first step to the stop."""
    step_seconds: float = 0.02
    model_mb: float = 4
    grace_seconds: float = 10
    reclaims: tuple[str, ...] = (UNANNOUNCED, GRACEFUL, UNANNOUNCED, UNANNOUNCED)
    """In order, due at even times over the run, the last well before its end."""

    def __post_init__(self) -> None:
        if set(self.reclaims) - {GRACEFUL, UNANNOUNCED}:
            raise ValueError(f"reclaims must be {GRACEFUL!r} or {UNANNOUNCED!r}")
        if self.interval < 2:
            raise ValueError("a step is timed by those that hold no save: interval 2 at least")


@dataclass
class Reclaim:
    kind: str
    """As played; a graceful one whose final save did not commit counts as unannounced."""
    at_step: int
    """The newest step trained."""
    ended: float
    """When training ended for good: the kill, or the final save committed."""
    final_save: float | None = None
    """SIGTERM to the final save committed."""
    resumed_from: int = 0
    restart: float = 0.0
    """From ``ended`` to the replacement's first step, less that step."""

    @property
    def steps_lost(self) -> int:
        return self.at_step - self.resumed_from


@dataclass
class TraceResult:
    config: TraceConfig
    steps: int
    """Trained and kept."""
    wall_seconds: float
    step_seconds: float
    stall: float
    commit: float
    restart: float
    final_save: float
    reclaims: list[Reclaim] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(r.kind == kind for r in self.reclaims)

    @property
    def interval_seconds(self) -> float:
        return self.config.interval * self.step_seconds

    @property
    def costs(self) -> SaveCosts:
        return SaveCosts(self.stall, max(self.commit, self.stall), self.restart, self.final_save)

    @property
    def exposed_seconds(self) -> float:
        """The wall time in which a reclaim could strike: not a restart, not a final save."""
        recovering = sum(r.restart + (r.final_save or 0.0) for r in self.reclaims)
        return self.wall_seconds - recovering

    @property
    def rate(self) -> Reclaims:
        share = self.count(GRACEFUL) / len(self.reclaims) if self.reclaims else 0.0
        return Reclaims(len(self.reclaims) * 3600 / self.exposed_seconds, share)

    @property
    def measured_goodput(self) -> float:
        return self.steps * self.step_seconds / self.wall_seconds

    @property
    def predicted_goodput(self) -> float:
        return goodput(self.interval_seconds, self.costs, self.rate)

    @property
    def best_interval_seconds(self) -> float:
        """The model's interval for these costs and rate. ``best_interval`` recommends none
        under a second; the model is scale-free, so it is asked in hours for seconds."""
        hours = SaveCosts(*(3600 * cost for cost in astuple(self.costs)))
        rate = Reclaims(self.rate.per_hour / 3600, self.rate.graceful_share)
        return best_interval(hours, rate) / 3600


def run_traces(configs: Sequence[TraceConfig]) -> list[TraceResult]:
    """The traces side by side, started and stopped together (their trainers mostly wait
    out the step pause)."""
    together = threading.Barrier(len(configs))
    with ThreadPoolExecutor(len(configs)) as pool:
        return list(pool.map(lambda config: _run_trace(config, together), configs))


def _run_trace(config: TraceConfig, together: threading.Barrier) -> TraceResult:
    with tempfile.TemporaryDirectory(prefix="spotproof-trace-") as root:
        env = {
            "CHECKPOINT_URL": f"file://{root}/run",
            "CHECKPOINT_INTERVAL": str(config.interval),
            "TOTAL_STEPS": str(10**9),
            "MODEL_MB": str(config.model_mb),
            "STEP_SECONDS": str(config.step_seconds),
            "GRACE_SECONDS": str(config.grace_seconds),
            "EMIT_STEPS": "1",
        }
        try:
            with warm_trainers() as zygote:
                return _Trace(config, env, zygote, together).run()
        except BaseException:
            together.abort()  # the others stop at the next wait, rather than wait for it
            raise


class _Trace:
    """One trace's trainers, each forked warm from ``zygote`` when the one before it is
    gone; every event timed from the same origin."""

    def __init__(
        self,
        config: TraceConfig,
        env: dict[str, str],
        zygote: Zygote,
        together: threading.Barrier,
    ) -> None:
        self.config, self.env, self.zygote, self.together = config, env, zygote, together
        self.origin = time.monotonic()
        self.reclaims: list[Reclaim] = []
        self.trainers: list[TrainerProcess] = []
        """Every trainer forked, the current one last."""

    @property
    def trainer(self) -> TrainerProcess:
        return self.trainers[-1]

    def now(self) -> float:
        return time.monotonic() - self.origin

    def await_event(
        self, match: Callable[[float, Event], bool], timeout: float = 60
    ) -> tuple[float, Event]:
        """The first event of the current trainer that matches, and when it came."""
        trainer, deadline, seen = self.trainer, time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            gone = trainer.popen.poll() is not None
            if gone:
                trainer.finish()  # its output read to the end
            for at, event in trainer.events[seen:]:
                if match(at, event):
                    return at, event
                seen += 1
            if gone:
                raise RuntimeError(f"the trainer exited: {trainer.last_seen(0)}")
            time.sleep(0.002)
        raise RuntimeError(f"the trace stopped: {trainer.last_seen(0)}")

    def fork(self) -> int:
        """Starts a trainer; the step it resumed from."""
        index = len(self.trainers)
        self.trainers.append(TrainerProcess(self.env, self.origin, index=index, zygote=self.zygote))
        return int(self.await_event(lambda _, e: e["event"] == "resumed")[1]["step"])

    def run(self) -> TraceResult:
        config = self.config
        self.together.wait(timeout=120)
        self.fork()
        began = self.await_event(lambda _, e: e["event"] == "step")[0]
        # Due at even spacings, the last two before the end: each waits for a commit.
        spacing, rate = config.seconds / (len(config.reclaims) + 2), 0.0
        if config.reclaims:
            rate = config.reclaims.count(UNANNOUNCED) / config.seconds
        for k, kind in enumerate(config.reclaims):
            base, committed = self.save_after(began + (k + 1) * spacing)
            age = _mean_age(rate if kind == UNANNOUNCED else 0, self.period(base))
            time.sleep(max(0.0, committed + age - self.now()))
            self.reclaim(kind)
            self.reclaims[-1].resumed_from = self.fork()
        time.sleep(max(0.0, began + config.seconds - self.now()))
        self.await_event(lambda _, e: e["event"] == "step")  # a step to close with
        self.together.wait(timeout=config.seconds + 60)
        self.reclaim(GRACEFUL)
        stop = self.reclaims.pop()
        if stop.kind != GRACEFUL:
            raise RuntimeError(f"the closing save did not commit: {self.trainer.last_seen(0)}")
        return _measure(config, self.lives(), self.reclaims, stop.at_step)

    def lives(self) -> list[Life]:
        """The events of each trainer forked, in order."""
        return [trainer.events for trainer in self.trainers]

    def save_after(self, due: float) -> tuple[int, float]:
        """The step of the first save begun after ``due``, and when it committed: the first
        commit after it would favour slow ones."""
        every = self.config.interval
        _, begun = self.await_event(
            lambda t, e: t >= due and e["event"] == "step" and e["step"] % every == 0
        )
        step = begun["step"]
        at, _ = self.await_event(lambda _, e: e["event"] == "checkpoint" and e["step"] == step)
        return step, at

    def period(self, base: int) -> float:
        """The model's period, ``τ + s``, as the steps kept so far measure it."""
        limits = [r.resumed_from for r in self.reclaims] + [base]
        step, stall, _ = _timing(self.config.interval, self.lives(), limits)
        return self.config.interval * step + stall

    def reclaim(self, kind: str) -> None:
        trainer, signalled = self.trainer, self.now()
        trainer.send(signal.SIGKILL if kind == UNANNOUNCED else signal.SIGTERM)
        if trainer.finish(self.config.grace_seconds) is None:
            trainer.send(signal.SIGKILL)
            trainer.finish()
        life = trainer.events
        at_step = max(_step_times(life), default=0)
        final = [t for t, e in life if e["event"] == "checkpoint" and e["step"] == at_step]
        if kind == UNANNOUNCED:
            self.reclaims.append(Reclaim(kind, at_step, signalled))
        elif final:
            self.reclaims.append(Reclaim(kind, at_step, final[0], final[0] - signalled))
        else:
            self.reclaims.append(Reclaim(UNANNOUNCED, at_step, life[-1][0]))


def _mean_age(rate: float, period: float) -> float:
    """The mean time since the newest commit of a Poisson reclaim at ``rate`` that strikes
    before the next commit, ``period`` later: of an exponential truncated there."""
    if rate * period < 1e-6:
        return period / 2
    return 1 / rate - period / math.expm1(rate * period)


Life = list[tuple[float, Event]]


def _step_times(life: Life) -> dict[int, float]:
    return {int(e["step"]): t for t, e in life if e["event"] == "step"}


def _timing(interval: int, lives: list[Life], kept: list[int]) -> tuple[float, float, list[float]]:
    """The mean step, the mean stall, and each commit latency, from the steps of each life
    up to the one its successor resumed from (``kept``)."""
    plain, captures, commits = [], [], []
    for life, last in zip(lives, kept, strict=True):
        at = _step_times(life)
        for step, t in at.items():
            if step <= last and step - 1 in at:
                (plain if (step - 1) % interval else captures).append(t - at[step - 1])
        for t, e in life:
            if e["event"] == "checkpoint" and e["kind"] == "periodic" and e["step"] in at:
                commits.append(t - at[e["step"]])
    step = statistics.fmean(plain)  # a stall lost in the steps' noise is none
    return step, max(0.0, statistics.fmean(captures or [step]) - step), commits


def _measure(
    config: TraceConfig, lives: list[Life], reclaims: list[Reclaim], steps: int
) -> TraceResult:
    kept = [r.resumed_from for r in reclaims] + [steps]
    step_seconds, stall, commits = _timing(config.interval, lives, kept)
    firsts = [min(_step_times(life).values()) - step_seconds for life in lives]
    for reclaim, first in zip(reclaims, firsts[1:], strict=True):
        reclaim.restart = first - reclaim.ended
    finals = [r.final_save for r in reclaims if r.final_save is not None]
    return TraceResult(
        config,
        steps=steps,
        wall_seconds=max(_step_times(lives[-1]).values()) - firsts[0],
        step_seconds=step_seconds,
        stall=stall,
        commit=statistics.fmean(commits or [0.0]),
        restart=statistics.fmean([r.restart for r in reclaims] or [0.0]),
        final_save=statistics.fmean(finals or [0.0]),
        reclaims=reclaims,
    )
