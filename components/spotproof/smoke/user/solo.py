"""``spotproof smoke --command`` for one process: the user's trainer run once uninterrupted,
and once along the preemption path, as a Job restarts its pod.

The interrupted run plays what ``smoke.runs.solo`` plays against the reference trainer, with
its own functions: preemptions along the path (notice, SIGTERM, the grace, SIGKILL at its
end; the first with its replacement started while the old process still saves), hard kills
aimed between a save's payload and its commit (``smoke.processes.aimed_kill``), and, new
here, a replacement killed while it restores (``smoke.user.restore_kill``). A user's steps
are not paced for the rehearsal, so each process is held (``TrainerProcess.run_until``) as it
resumes and at the step where its interruption is placed: nothing depends on how fast the
script trains or how busy the machine is.
"""

from __future__ import annotations

import random
import time

from spotproof.smoke.emulation.fault_proxy import Fault
from spotproof.smoke.processes.lineage import Lineage
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.reports.records import RESTORE_KILL, Interruption, describe
from spotproof.smoke.runs.solo import arm, hard_kill, judge_interruption, place, preempt
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

START_SECONDS = 300.0
"""The longest a process may take from its start to resuming: imports and a model built."""


def _lineage(stage: Stage, name: str, *, gated: bool = False) -> Lineage:
    run = Lineage(
        stage.config,
        stage.bucket,
        name,
        stage.progress,
        gate=stage.gate if gated else None,
        zygote=stage.zygote,
        argv=stage.command.words,
        env=command_env(stage.config, stage.bucket, name),
        events_dir=stage.events_dir,
    )
    stage.runs.append(run.processes)
    return run


def solo_reference(stage: Stage, name: str) -> RunResult:
    """The command once, never interrupted, to its ``done``; what went wrong in the report."""
    run = _lineage(stage, name)
    result = RunResult(name, run.url, processes=run.processes)
    process = started(run.start)
    if process.wait_for(resuming, START_SECONDS) is None:
        stage.report.failures.append(f"the {name} run: {never_trained(process, stage.command)}")
    else:
        result.done = finished(process, stage.report, f"the {name} run")
    result.seconds = time.monotonic() - run.origin
    return result


def solo_interrupted(stage: Stage) -> RunResult:
    """The command interrupted as the stage's configuration says, restarted each time."""
    return _Interrupted(stage).play()


class _Interrupted:
    def __init__(self, stage: Stage) -> None:
        self.stage, self.config, self.report = stage, stage.config, stage.report
        self.schedule = random.Random(self.config.schedule_seed)
        self.kinds = ["preemption"] * self.config.preemptions
        self.kinds += ["hard-kill"] * self.config.hard_kills
        self.schedule.shuffle(self.kinds)
        self.restore_after = restore_kill_after(self.kinds)
        self.run = _lineage(stage, "interrupted", gated=True)
        self.result = RunResult("interrupted", self.run.url, processes=self.run.processes)
        self.overlapped = False
        self.restored = False
        self.resumed = 0

    def play(self) -> RunResult:
        plan = " -> ".join(self.kinds) or "no interruptions"
        if self.restore_after is not None:
            plan += f"; a replacement killed as it restores (from the {self.restore_after + 1}.)"
        self.stage.progress(f"interrupted run: {plan}")
        if self.config.preemptions:
            self.stage.progress(f"preemption path: {self.config.path}")
        self.run.pause_on = resuming
        process: TrainerProcess | None = started(self.run.start)
        process = self._resumed(process)
        self.run.observer  # noqa: B018 - connect now, not when a kill is being aimed
        for index, kind in enumerate(self.kinds):
            if process is None:
                return self.result
            process = self._interrupt(process, index, kind)
        if process is None:
            return self.result
        self.run.announce(process, self.resumed)
        process.release()
        self.stage.progress(f"  training to step {self.config.total_steps}")
        self.result.done = finished(process, self.report, f"attempt {process.index}")
        self.result.seconds = time.monotonic() - self.run.origin
        return self.result

    def _resumed(self, process: TrainerProcess) -> TrainerProcess | None:
        """``process`` held as it resumed, announced; None when it never did."""
        if process.wait_for(resuming, START_SECONDS) is None:
            why = never_trained(process, self.stage.command)
            self.report.failures.append(f"attempt {process.index}: {why}")
            return None
        self.resumed = int(process.first("resumed")["step"])  # type: ignore[index]
        return process

    def _interrupt(self, process: TrainerProcess, index: int, kind: str) -> TrainerProcess | None:
        """Train to the placed step, interrupt there, restart; the process that trains on,
        None when the run cannot go on."""
        self.run.announce(process, self.resumed)
        aiming = "hard-kill" in self.kinds[index:] and not any(
            i.landed_in_upload for i in self.report.interruptions
        )
        remaining = len(self.kinds) - index
        target = place(self.schedule, self.config, self.resumed, remaining, aiming=aiming)
        if target is None:
            self.report.failures.append(
                f"{self.config.total_steps} steps leave no room for the {kind} after step "
                f"{self.resumed}"
            )
            return None
        self.stage.progress(f"  training to step {target}, then a {kind}")
        if process.run_until(lambda e: e["event"] == "step" and e["step"] >= target) is None:
            said = f"exit {process.finish(timeout=30)}, {output_tail(process)}"
            self.report.failures.append(f"the command ended before step {target}: {said}")
            return None
        record = Interruption(kind, process.index, round(process.now(), 3), target)
        restore_next = self._restore_next(index)
        gate = self.stage.gate
        self.run.pause_on = restoring if restore_next and gate is None else resuming
        if kind == "preemption":
            overlap = not self.overlapped and not restore_next
            process = preempt(self.run, process, record, overlap=overlap)
            self.overlapped = self.overlapped or overlap
        else:
            aim = arm(self.run, self.report, target)
            process.release()
            process = hard_kill(self.run, process, record, aim=aim)
        fault = hold_reads(gate) if restore_next else None
        record.newest_committed = self.run.newest_committed()
        restore, killed = None, process
        if restore_next:
            restore = self._kill_in_restore(process, fault, record.newest_committed)
            if restore is not None:
                process = started(self.run.start)
        replacement = self._resumed(process)
        if replacement is None:
            return None
        self._judged(record)
        if restore is not None:
            self._judged(restore, killed)
        return replacement

    def _restore_next(self, index: int) -> bool:
        """Whether this interruption's replacement is to be killed while it restores."""
        return not self.restored and self.restore_after is not None and index >= self.restore_after

    def _kill_in_restore(
        self, process: TrainerProcess, fault: Fault | None, newest: int | None
    ) -> Interruption | None:
        """Kill ``process`` while it restores ``newest``; None (the kill left for the next
        replacement) when nothing is committed yet: there is no restore to catch."""
        self.run.pause_on = resuming
        if newest is None:
            if self.stage.gate is not None:
                self.stage.gate.disarm()
            process.run_until(resuming, START_SECONDS)
            return None
        self.restored = True
        record = Interruption(RESTORE_KILL, process.index, 0.0, newest)
        record.newest_committed = newest
        kill_in_restore([process], self.stage.gate, fault, record)
        record.exit_code = process.popen.returncode
        return record

    def _judged(self, record: Interruption, killed: TrainerProcess | None = None) -> None:
        record.resumed_from = self.resumed
        record.steps_lost = max(0, record.at_step - self.resumed)
        if killed is None:
            judge_interruption(record, self.config, self.report)
        else:
            judge_restore(record, [killed], self.report)
        self.report.interruptions.append(record)
        self.stage.progress("  " + describe(record))
