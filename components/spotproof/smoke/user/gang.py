"""``spotproof smoke --command --nodes N``: the user's trainer as a gang of N ranks, each
started as a JobSet's pod starts it (the launch script, then the real torchrun with its
static rendezvous on loopback, then the user's words as torchrun's worker), run once
uninterrupted and once through the stack's reclaims, the whole gang restarted after each
as a JobSet's failure policy restarts it.

Preemptions alternate between one rank (``smoke.runs.gang``'s "preempt one rank": the others
stop with it and wait to be torn down) and every rank (a pool reclaimed); a hard kill is
``smoke.runs.gang``'s "kill one rank", landed, where the bucket has a relay, in the middle of
the last rank's save (its payload uploaded, its shard's record held back, so the step
cannot commit); and after the first hard kill (else the last preemption) the restarted
gang is killed while it restores (``smoke.user.restore_kill``), every rank at once. The gang
steps together (``training()`` agrees after every step whether to stop), so holding the
last rank at a step holds all.
"""

from __future__ import annotations

import random
import re
import signal
import time
from collections.abc import Callable
from typing import Any

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.layout import STEP_NAME, STEPS, manifest_key, step_prefix
from spotproof.smoke.emulation.fault_proxy import Fault
from spotproof.smoke.processes.gang_ranks import GangProcesses, finish_all
from spotproof.smoke.processes.trainer_process import Event
from spotproof.smoke.reports.records import RESTORE_KILL, Interruption, describe
from spotproof.smoke.runs.gang import agreed
from spotproof.smoke.runs.gang_faults import interrupt, judge_scenario
from spotproof.smoke.runs.solo import place
from spotproof.smoke.user.command import (
    RunResult,
    Stage,
    command_env,
    finished,
    never_trained,
    output_tail,
    restoring,
    resuming,
    started,
)
from spotproof.smoke.user.restore_kill import (
    hold_reads,
    judge_restore,
    kill_in_restore,
    restore_kill_after,
)
from spotproof.smoke.user.solo import START_SECONDS


def _starter(stage: Stage, name: str, *, gated: bool) -> tuple[Callable[..., GangProcesses], str]:
    """How each gang of the run ``name`` is started, and the run's URL."""
    env = command_env(stage.config, stage.bucket, name)
    if gated and stage.gate is not None:
        env = stage.gate.route(env)
    events = stage.events_dir / name
    events.mkdir(parents=True, exist_ok=True)
    origin = time.monotonic()

    def start(index: int, pause_on: Callable[[Event], bool] | None) -> GangProcesses:
        return started(
            GangProcesses,
            env,
            stage.nodes,
            origin,
            index,
            started_by=stage.started_by,
            command=stage.command.words,
            events_dir=events,
            pause_on=pause_on,
        )

    return start, stage.bucket.prefix(name)


def _assembled(stage: Stage, gang: GangProcesses, label: str) -> bool:
    """Whether every rank resumed; why not in the report (the gang then torn down)."""
    for rank in gang.ranks:
        if rank.wait_for(resuming, START_SECONDS) is None:
            finish_all(gang.ranks, 0.01)
            why = never_trained(rank, stage.command)
            stage.report.failures.append(f"{label}, rank {gang.ranks.index(rank)}: {why}")
            return False
    return True


def _done(stage: Stage, gang: GangProcesses, label: str) -> Event | None:
    """The ``done`` of every rank, which must agree: the gang's digest."""
    gang.ranks[-1].release()
    events = [
        finished(rank, stage.report, f"{label}, rank {r}") for r, rank in enumerate(gang.ranks)
    ]
    if any(e is None for e in events):
        return None
    if len({str(e["digest"]) for e in events if e is not None}) != 1:
        stage.report.failures.append(f"the ranks of {label} report different digests")
        return None
    return events[0]


def gang_reference(stage: Stage, name: str) -> RunResult:
    """The gang once, never interrupted, to its ``done``."""
    start, url = _starter(stage, name, gated=False)
    began = time.monotonic()
    gang = start(0, None)
    result = RunResult(name, url, processes=list(gang.ranks))
    stage.runs.append(result.processes)
    if _assembled(stage, gang, f"the {name} gang"):
        result.done = _done(stage, gang, f"the {name} gang")
    result.seconds = time.monotonic() - began
    return result


def gang_interrupted(stage: Stage) -> RunResult:
    """The gang interrupted as the stage's configuration says, restarted after each."""
    return _Interrupted(stage).play()


class _Interrupted:
    def __init__(self, stage: Stage) -> None:
        self.stage, self.config, self.report = stage, stage.config, stage.report
        self.schedule = random.Random(self.config.schedule_seed)
        kinds = ["preemption"] * self.config.preemptions + ["hard-kill"] * self.config.hard_kills
        self.schedule.shuffle(kinds)
        self.kinds = kinds
        self.restore_after = restore_kill_after(kinds)
        self.start, url = _starter(stage, "interrupted", gated=True)
        self.began = time.monotonic()
        self.result = RunResult("interrupted", url)
        stage.runs.append(self.result.processes)
        with stage.bucket.apply():
            self.observer = CheckpointStore(url)
        self.resumed = 0
        self.preempted = 0
        self.restored = False

    def _gang(self, index: int, pause_on: Callable[[Event], bool] | None) -> GangProcesses:
        gang = self.start(index, pause_on)
        self.result.processes += gang.ranks
        return gang

    def play(self) -> RunResult:
        scenarios = [self._scenario(kind) for kind in self.kinds]
        plan = " -> ".join(scenarios) or "no interruptions"
        if self.restore_after is not None:
            plan += f"; a gang killed as it restores (from the {self.restore_after + 1}.)"
        self.stage.progress(f"interrupted gang: {plan}")
        gang: GangProcesses | None = self._gang(0, resuming)
        if not _assembled(self.stage, gang, "gang 0"):
            return self.result
        self.resumed = agreed(gang, self.report)
        for index, scenario in enumerate(scenarios):
            gang = self._interrupt(gang, index, scenario)
            if gang is None:
                return self.result
        self.stage.progress(f"  training to step {self.config.total_steps}")
        self.result.done = _done(self.stage, gang, f"gang {gang.index}")
        self.result.seconds = time.monotonic() - self.began
        return self.result

    def _scenario(self, kind: str) -> str:
        if kind == "hard-kill":
            return "kill one rank"
        self.preempted += 1
        return "preempt one rank" if self.preempted % 2 else "preempt every rank"

    def _interrupt(self, gang: GangProcesses, index: int, scenario: str) -> GangProcesses | None:
        remaining = len(self.kinds) - index
        target = place(self.schedule, self.config, self.resumed, remaining, aiming=False)
        last = gang.ranks[-1]
        aiming = scenario == "kill one rank" and self.stage.gate is not None
        if target is not None:
            self.stage.progress(f"  training to step {target}, then {scenario}")
        # An aimed kill holds the gang itself, from before its target on.
        if target is None or (not aiming and last.run_until(lambda e: _reached(e, target)) is None):
            said = f"{output_tail(last)}" if target is not None else "no room left"
            self.report.failures.append(f"gang {gang.index} could not {scenario}: {said}")
            finish_all(gang.ranks, 0.01)
            return None
        kind = "hard-kill" if scenario == "kill one rank" else "preemption"
        aimed = self._aim(gang, target) if aiming else None
        record = Interruption(kind, gang.index, round(time.monotonic() - self.began, 3), target)
        codes = interrupt(gang, scenario, self.config, record)
        if self.stage.gate is not None:
            self.stage.gate.disarm()
        if scenario == "kill one rank":
            self._kill_point(record, aimed, gang)
        newest = self.observer.committed_steps()
        record.newest_committed = newest[-1] if newest else None
        restore, killed = None, None
        if self._restore_next(index) and record.newest_committed is not None:
            self.restored = True
            killed = self._gang(gang.index + 1, restoring if self.stage.gate is None else None)
            fault = hold_reads(self.stage.gate)
            restore = Interruption(RESTORE_KILL, killed.index, 0.0, record.newest_committed or 0)
            restore.newest_committed = record.newest_committed
            kill_in_restore(killed.ranks, self.stage.gate, fault, restore)
        gang = self._gang((killed or gang).index + 1, resuming)
        if not _assembled(self.stage, gang, f"gang {gang.index}"):
            return None
        self.resumed = agreed(gang, self.report)
        self._judged(record, scenario=scenario, codes=codes)
        if restore is not None and killed is not None:
            self._judged(restore, killed=killed)
        return gang

    def _restore_next(self, index: int) -> bool:
        """Whether the gang started after this interruption is to be killed as it restores
        (once, after the first interruption it can be, once something is committed)."""
        return not self.restored and self.restore_after is not None and index >= self.restore_after

    def _aim(self, gang: GangProcesses, target: int) -> int | None:
        """Kill the last rank in the middle of the save of the first step from ``target``
        on (its payload uploaded, the record of its shard held back at the relay, so the
        step cannot commit), and return that step; None if the rank ended first.

        Rank 0 is held as that save begins, so the last rank, uploading in the background,
        waits for it in the next step's agreement instead of training on: with steps of a
        few milliseconds the gang would otherwise be at its next save, waiting for the lost
        rank's shard, before the kill; with steps of real length it is still training,
        and finds the rank gone at its next collective. That is the moment rehearsed."""
        gate = self.stage.gate
        assert gate is not None
        first, last = gang.ranks[0], gang.ranks[-1]
        writer = re.escape(str((last.first("resumed") or {}).get("writer")))
        shard = rf"{STEPS}(?:/|%2F)({STEP_NAME.pattern})(?:/|%2F){writer}(?:/|%2F)shard\.json"
        gate.proxy.clear()
        held = gate.proxy.add(
            Fault("PUT|POST", shard, "hold", times=1, accept=lambda m: int(m[1]) >= target)
        )
        first.hold_at(lambda e: e.get("event") == "saving" and int(e.get("step", 0)) >= target)
        last.release()
        deadline = time.monotonic() + START_SECONDS
        while not held.hit.wait(0.05):
            if last.popen.poll() is not None or time.monotonic() > deadline:
                first.release()
                return None
        last.send(signal.SIGKILL)
        last.finish()
        first.release()
        return int(held.last[1]) if held.last is not None else None

    def _kill_point(self, record: Interruption, aimed: int | None, gang: GangProcesses) -> None:
        saves = gang.ranks[-1].of("saving")
        newest = aimed if aimed is not None else int(saves[-1]["step"]) if saves else None
        if newest is None:
            return
        store = self.observer.store
        committed = store.exists(manifest_key(newest))
        written = bool(store.list(step_prefix(newest)))
        record.upload_step = newest
        record.kill_point = (
            "after-commit" if committed else "in-upload" if written else "before-upload"
        )

    def _judged(self, record: Interruption, **how: Any) -> None:
        record.resumed_from = self.resumed
        record.steps_lost = max(0, record.at_step - self.resumed)
        killed = how.get("killed")
        if killed is not None:
            judge_restore(record, killed.ranks, self.report)
        else:
            scenario, codes = how["scenario"], how["codes"]
            judge_scenario(
                scenario, codes, record, self.config, self.report, started_by=self.stage.started_by
            )
        self.report.interruptions.append(record)
        self.stage.progress("  " + describe(record))


def _reached(event: Event, step: int) -> bool:
    return event.get("event") == "step" and int(event.get("step", 0)) >= step
