"""``spotproof smoke --nodes N``: the preemption harness for a gang of N trainer ranks.

Each rank is a trainer process (``spotproof.smoke.train`` with ``RANK``, ``WORLD_SIZE``
and a rendezvous on loopback, as torchrun and a JobSet give a pod), so the gang trains
over ``torch.distributed`` with gloo and checkpoints through
``spotproof.runtime.checkpointer.gang``.
The harness plays what happens to a gang on reclaimable nodes, and restarts the whole gang
after each, as a JobSet whose failure policy restarts every child Job does:

1. **one rank preempted**: SIGTERM to the last rank only. The ranks stop together at the
   next step and each saves its shard of that step; the preempted rank exits
   ``PREEMPTED``, the others wait to be torn down, and once the preempted rank is gone
   the harness tears them down (SIGTERM, as the JobSet deletes their pods): they exit
   ``PREEMPTED`` too;
2. **one rank killed**: SIGKILL to the last rank, as if its node vanished. The others
   find it gone in their next collective and wait; torn down, they exit ``PEER_LOST``;
3. **every rank preempted**: SIGTERM to all, as when a whole pool is reclaimed.

A preemption follows the configured path (``--stack``: the stack's, from its plan): SIGTERM
that long after the notice, with the grace left before the node is gone; a path that sends
no SIGTERM kills the ranks when their node goes, and the run fails.

A rank stopped by a peer that exits before the teardown fails the run: on a cluster its
Job could fail before the disrupted rank's and spend a restart from the JobSet's budget
for crashes (``spotproof.runtime.checkpointer.gang``, "Stopping because of a peer").

With ``launcher=torchrun`` each rank is started as a pod of a TrainingJob gang starts it:
the launch script, then torchrun with the static rendezvous on rank 0 (``runtime.launcher``),
then the trainer as torchrun's worker; the harness then sends SIGTERM to the script alone,
as the kubelet signals PID 1, and a kill takes every process of the rank. Ranks torn down
after a peer's loss then exit ``PREEMPTED`` too: the script turns any failed stop after a
SIGTERM into 143, and the JobSet acts on the first Job to fail, not on these.

The run passes only if the restarted gang ends with the digest of a gang of the same size
that was never interrupted, no preemption loses a step, every restart resumes from the
newest committed step, and a kill loses at most a checkpoint interval plus the upload in
flight.

The never-interrupted gang's ranks meet directly (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``),
forked warm from a zygote (``smoke.processes.warm``), however the interrupted gang is
started: its only use is its digest, which depends on the ranks' number and the run's
settings, not on who started them (torchrun gives the trainer nothing else it reads). On
2 cores a torchrun pod cost 8 CPU-seconds before its first step (the agent's imports, then
the worker's); the reference gang spent them for nothing the run judges. Ranks that start
themselves in the interrupted gang too (``--launcher none``) are forked from the same zygote.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.launcher import Launcher
from spotproof.smoke.emulation.object_stores import Bucket, emulated
from spotproof.smoke.processes.gang_ranks import GangProcesses
from spotproof.smoke.processes.warm import Zygote, warm_trainers
from spotproof.smoke.reports.records import (
    Interruption,
    Progress,
    SmokeConfig,
    SmokeReport,
    attempt_of,
    last_words,
    trainer_env,
)
from spotproof.smoke.runs.gang_faults import interrupt, judge_scenario

SCENARIOS = ("preempt one rank", "kill one rank", "preempt every rank")


def run_gang_smoke(
    config: SmokeConfig,
    nodes: int,
    progress: Progress = print,
    started_by: Launcher = Launcher.NONE,
    scenarios: Sequence[str] = SCENARIOS,
) -> SmokeReport:
    """The reference gang, then the interrupted one, through ``scenarios`` (some of
    :data:`SCENARIOS`, in the order given); see the module docstring."""
    if nodes < 2:
        raise ValueError(f"nodes = {nodes}: a gang needs at least 2")
    if unknown := [s for s in scenarios if s not in SCENARIOS]:
        raise ValueError(f"unknown scenarios {unknown}; allowed: {', '.join(SCENARIOS)}")
    report = SmokeReport(config)
    with emulated(config.store) as bucket, warm_trainers() as zygote:
        how = "torchrun, through the launch script" if started_by is Launcher.TORCHRUN else "itself"
        progress(
            f"store: {config.store} ({bucket.url}); gang of {nodes} ranks over gloo, "
            f"each started by {how}"
        )
        env = trainer_env(config, bucket, "reference")
        run_reference(env, nodes, report, progress, zygote=zygote)
        _interrupted(
            config,
            bucket,
            nodes,
            report,
            progress,
            started_by=started_by,
            scenarios=scenarios,
            zygote=zygote,
        )
    judge_digest(report)
    return report


def run_reference(
    env: dict[str, str],
    nodes: int,
    report: SmokeReport,
    progress: Progress,
    *,
    zygote: Zygote | None = None,
    **options: Any,
) -> None:
    """The gang never interrupted, its ranks forked warm and meeting directly (module
    docstring; from ``zygote``, or a zygote of their own; ``options`` as
    :class:`GangProcesses` takes them): its digest is what every restarted gang must end
    with."""
    if zygote is None:
        with warm_trainers() as own:
            run_reference(env, nodes, report, progress, zygote=own, **options)
        return
    progress("reference gang (never interrupted)")
    started = time.monotonic()
    reference = GangProcesses(env, nodes, started, 0, zygote=zygote, **options)
    reference.resumed()
    report.reference_digest = complete(reference, report)
    report.reference_seconds = time.monotonic() - started
    report.reference = attempt_of(reference.ranks[0])
    progress(f"  done in {report.reference_seconds:.1f} s, digest {report.reference_digest}")


def judge_digest(report: SmokeReport) -> None:
    """The restarted gang must end bit for bit where the reference did."""
    if report.digest is not None and report.digest != report.reference_digest:
        report.failures.append(
            f"digest {report.digest} differs from reference {report.reference_digest}"
        )


def _interrupted(
    config: SmokeConfig,
    bucket: Bucket,
    nodes: int,
    report: SmokeReport,
    progress: Progress,
    *,
    started_by: Launcher,
    scenarios: Sequence[str],
    zygote: Zygote,
) -> None:
    progress(f"interrupted gang: {' -> '.join(scenarios)}")
    env = trainer_env(config, bucket, "interrupted")
    with bucket.apply():
        observer = CheckpointStore(env[settings.CHECKPOINT_URL.name])
    schedule = random.Random(config.schedule_seed)
    origin = time.monotonic()
    gang = GangProcesses(env, nodes, origin, 0, started_by=started_by, zygote=zygote)
    gangs = [gang]
    resumed = agreed(gang, report)
    for scenario in scenarios:
        target = resumed + schedule.randint(max(2, config.interval // 2), 2 * config.interval)
        if not gang.reaches(target, config.total_steps, scenario, report):
            break
        kind = "hard-kill" if scenario == "kill one rank" else "preemption"
        record = Interruption(kind, gang.index, round(time.monotonic() - origin, 3), target)
        codes = interrupt(gang, scenario, config, record)
        newest = observer.committed_steps()
        record.newest_committed = newest[-1] if newest else None
        gang = GangProcesses(
            env, nodes, origin, gang.index + 1, started_by=started_by, zygote=zygote
        )
        gangs.append(gang)
        resumed = agreed(gang, report)
        record.resumed_from = resumed
        record.steps_lost = max(0, record.at_step - resumed)
        judge_scenario(scenario, codes, record, config, report, started_by=started_by)
        report.interruptions.append(record)
        progress(
            f"  {scenario} at step {record.at_step}: every rank exited {codes}, "
            f"the gang resumed from {resumed}, {record.steps_lost} steps lost"
        )
    report.digest = complete(gang, report)
    report.interrupted_seconds = time.monotonic() - origin
    report.attempts = [attempt_of(rank) for started in gangs for rank in started.ranks]


def agreed(gang: GangProcesses, report: SmokeReport) -> int:
    steps = gang.resumed()
    if len(set(steps)) != 1:
        report.failures.append(
            f"the ranks of gang {gang.index} resumed from different steps {steps}"
        )
    return min(steps)


def complete(gang: GangProcesses, report: SmokeReport) -> str | None:
    digests = [rank.wait_for(lambda e: e["event"] == "done", timeout=600) for rank in gang.ranks]
    codes = gang.finish(60)
    if any(d is None for d in digests) or any(code != exit_codes.COMPLETED for code in codes):
        report.failures.append(
            f"gang {gang.index} did not complete: exit codes {codes}, "
            f"{'; '.join(last_words(r) for r in gang.ranks)}"
        )
        return None
    values = {str(d["digest"]) for d in digests if d is not None}
    if len(values) != 1:
        report.failures.append(f"the ranks of gang {gang.index} report different digests")
        return None
    return values.pop()
