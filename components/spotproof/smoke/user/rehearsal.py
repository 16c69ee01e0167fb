"""``spotproof smoke --command``: rehearse a user's own trainer, as an installed wheel's user
runs it in their own project.

1. The **reference** run: the command once, never interrupted. Its ``done`` event says how
   many steps the script trains (the script decides) and the digest of its final state;
   its saves say the checkpoint interval it really uses.
2. The **interrupted** run, along the preemption path (the stack's, with ``--stack``):
   preemptions with the path's notice and grace, SIGKILL at the grace's end; hard kills
   aimed between a save's payload and its commit; a replacement killed while it restores.
   One process (``smoke.user.solo``), or a gang of ranks each started as a pod starts it,
   through the launch script and the real torchrun (``smoke.user.gang``); with ``tiers``,
   a gang whose ranks are replaced one at a time, each a torchrun elastic agent, its saves
   held in its pod's memory and replicated to a peer (``smoke.user.tiers``), through a
   node lost, a node reclaimed and the leader's node lost.
3. The **judgment**: every exit code as the contract has it (143 after SIGTERM, killed
   processes killed), the steps each interruption lost against what the path allows (a
   graceful preemption none, a kill at most two intervals), and the interrupted run's final
   digest equal to the reference's. Where it is not, a second uninterrupted run tells a
   trainer that is not deterministic from one that loses state on a resume, and the saves
   of the runs name the part that differs and from which save on (``smoke.user.state_diff``).

A small script of about a hundred steps should take about a minute on a laptop: the report
says where the time went (:data:`TIME_SPENT`), and its JSON carries the numbers.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from spotproof.runtime.checkpointer.layout import MANIFESTS
from spotproof.runtime.launcher import Launcher
from spotproof.runtime.python_program import python_worker
from spotproof.runtime.storage import open_store
from spotproof.smoke.emulation.object_stores import Bucket, emulated
from spotproof.smoke.processes.aimed_kill import gated
from spotproof.smoke.processes.warm import Zygote
from spotproof.smoke.reports.records import Progress, SmokeConfig, attempt_of
from spotproof.smoke.user.command import (
    CommandError,
    CommandReport,
    RunResult,
    Stage,
    UserCommand,
    learned,
    room_for,
)
from spotproof.smoke.user.gang import gang_interrupted, gang_reference
from spotproof.smoke.user.solo import solo_interrupted, solo_reference
from spotproof.smoke.user.state_diff import (
    explain,
    lr_scheduler_unsaved,
    not_deterministic,
    saves_of,
)
from spotproof.smoke.user.tiers import tiered_interrupted, tiered_room

TIME_SPENT = (
    "emulator",
    "warm_start",
    "reference_run",
    "interrupted_run",
    "second_reference_run",
    "process_startups",
    "processes",
    "waiting_out_graces",
    "total",
)
"""Where a rehearsal's seconds went: starting the store's emulator, starting the process a
single process's ``python`` command is forked from (where it is: :func:`_forked_from`), each
run from its first
process's start to its last one's end, and within those runs every process's start to its
``restoring`` event (``processes`` says how many: not seconds), and each interruption's
time from its notice to its processes gone (the notice, then the final save, or the whole
grace where the trainer did not leave in it)."""


def rehearse_command(
    config: SmokeConfig,
    command: UserCommand,
    *,
    nodes: int = 1,
    started_by: Launcher = Launcher.TORCHRUN,
    tiers: bool = False,
    progress: Progress = print,
) -> CommandReport:
    """The whole rehearsal (see the module); :class:`CommandError` for a command that
    cannot be rehearsed (exit 2)."""
    began = time.monotonic()
    report = CommandReport(config, command=command.text, nodes=nodes)
    with (
        tempfile.TemporaryDirectory(prefix="spotproof-events-") as events,
        emulated(config.store) as bucket,
        gated(bucket) as gate,
    ):
        report.time_spent["emulator"] = round(time.monotonic() - began, 2)
        progress(f"store: {config.store} ({bucket.url})")
        stage = Stage(config, command, bucket, Path(events), report, progress, gate)
        stage.nodes, stage.started_by, stage.tiers = nodes, started_by, tiers
        warming = time.monotonic()
        with _forked_from(command, nodes) as stage.zygote:
            if stage.zygote is not None:
                report.time_spent["warm_start"] = round(time.monotonic() - warming, 2)
            try:
                runs = _runs(stage)
            finally:
                stage.kill_leftovers()
    spent = report.time_spent
    startups = [s for run in runs for s in run.startups()]
    spent["process_startups"] = round(sum(startups), 2)
    spent["processes"] = len(startups)
    spent["waiting_out_graces"] = round(
        sum(i.waited_seconds or 0.0 for i in report.interruptions), 2
    )
    spent["total"] = round(time.monotonic() - began, 2)
    return report


@contextlib.contextmanager
def _forked_from(command: UserCommand, nodes: int) -> Iterator[Zygote | None]:
    """Where a single process's command is forked from, warm, when it is this interpreter
    running a script or a module (``smoke.processes.warm``): each process then skips the
    imports of torch and its compiler stack, about 5 CPU-seconds, most of a small script's
    start. None otherwise, each process started afresh: any other command, a gang (each
    rank starts as its pod starts, through torchrun), or a zygote that could not start
    (the command then fails, if it does, with its own words)."""
    if nodes != 1 or python_worker(command.words[0], command.words[1:]) is None:
        yield None
        return
    try:
        zygote = Zygote()
    except RuntimeError:
        yield None
        return
    try:
        yield zygote
    finally:
        zygote.close()


def _runs(stage: Stage) -> list[RunResult]:
    """The runs the rehearsal made, each judged into the stage's report."""
    report, progress = stage.report, stage.progress
    reference_of = solo_reference if stage.nodes == 1 else gang_reference
    who = "one process" if stage.nodes == 1 else f"a gang of {stage.nodes} ranks"
    progress(f"reference run of {stage.command.text!r} as {who} (never interrupted)")
    try:
        reference = reference_of(stage, "reference")
    except TimeoutError as error:
        report.failures.append(f"the reference run: {error}")
        return []
    _record(report, reference, "reference_run")
    if reference.done is None:
        return [reference]
    with stage.bucket.apply():
        saved = open_store(reference.url).list(MANIFESTS)
    if not saved:
        report.failures.append(
            "the reference run committed no checkpoint under CHECKPOINT_URL: the command "
            "saves somewhere else (training(url=...) in its code?); allowed: leave the URL "
            "to CHECKPOINT_URL, as a Job sets it"
        )
        return [reference]
    report.reference_digest = reference.digest
    report.reference = attempt_of(reference.processes[0])
    stage.config = learned(stage.config, reference)
    report.config = stage.config
    progress(
        f"  {stage.config.total_steps} steps in {reference.seconds:.1f} s, checkpointing every "
        f"{stage.config.interval}; digest {reference.digest}"
    )
    if stage.tiers:
        short, interrupted_run = tiered_room(stage), tiered_interrupted
    else:
        short = room_for(stage.config, stage.config.preemptions + stage.config.hard_kills)
        interrupted_run = solo_interrupted if stage.nodes == 1 else gang_interrupted
    if short is not None:
        raise CommandError(short)
    try:
        interrupted = interrupted_run(stage)
    except TimeoutError as error:
        report.failures.append(f"the interrupted run: {error}")
        return [reference]
    _record(report, interrupted, "interrupted_run")
    report.digest = interrupted.digest
    report.attempts = [attempt_of(p) for p in interrupted.processes]
    runs = [reference, interrupted]
    if report.digest is not None and report.digest != report.reference_digest:
        progress("the digests differ: a second uninterrupted run, to tell why")
        second = reference_of(stage, "reference-2")
        _record(report, second, "second_reference_run")
        runs.append(second)
        report.second_reference_digest = second.digest
        report.diagnosis = _diagnosis(stage.bucket, reference, interrupted, second)
        report.failures.append(
            f"digest {report.digest} differs from reference {report.reference_digest}: "
            + report.diagnosis[-1]
        )
    return runs


def _record(report: CommandReport, run: RunResult, key: str) -> None:
    report.time_spent[key] = round(run.seconds, 2)
    if key == "reference_run":
        report.reference_seconds = run.seconds
    elif key == "interrupted_run":
        report.interrupted_seconds = run.seconds


def _diagnosis(
    bucket: Bucket, reference: RunResult, interrupted: RunResult, second: RunResult
) -> list[str]:
    """What differs, and why (see ``smoke.user.state_diff``)."""
    with bucket.apply():
        stores = {run.name: open_store(run.url) for run in (reference, interrupted, second)}
    saves = {name: saves_of(store) for name, store in stores.items()}
    if second.done is None:
        return [
            "a second uninterrupted run did not complete: whether the trainer is "
            "deterministic, and so what its resume lost, cannot be told"
        ]
    if second.digest != reference.digest:
        return [
            not_deterministic(
                reference.states, second.states, saves[reference.name], saves[second.name]
            )
        ]
    first = min(saves[reference.name], default=None)
    unsaved = first is not None and lr_scheduler_unsaved(stores[reference.name], first)
    return explain(
        reference.states,
        interrupted.states,
        saves[reference.name],
        saves[interrupted.name],
        interrupted.resumes,
        scheduler_unsaved=unsaved,
    )
