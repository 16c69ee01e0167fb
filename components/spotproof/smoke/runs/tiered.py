"""``spotproof smoke --nodes N --tiers``: a gang whose ranks are replaced one at a time, whose
periodic saves are held in memory and replicated to a peer (``runtime.checkpointer.tiers``),
and whose nodes vanish or are reclaimed.

Each rank is a pod as ``TrainingJob(recovery=GangRecovery.REPLACE_RANK)`` starts one
(``smoke.processes.elastic_gang``): the launch script, torchrun's elastic agent (the ``c10d``
rendezvous for exactly N nodes, its store on pod 0, the *leader*), then the trainer as the
agent's worker, with a directory standing for the pod's memory-backed ``emptyDir``
(``MEMORY_TIER_DIR``) that goes with the pod. A replacement starts shortly after its
predecessor is gone, standing for a spare node with the image already on it. The harness
plays, in turn:

1. **one node lost** (SIGKILL, no notice) of a worker: the surviving pods' processes are
   never stopped; their workers find the peer gone, wait, and are restarted in place by
   their agents once the replacement's agent joins. The survivors must resume from their
   own memory and the replacement from its holder's replica, no older than the bucket's
   newest step;
2. **one node reclaimed** (SIGTERM along the configured path, then the grace): the gang
   saves its final step to the bucket together; the reclaimed pod exits 143, which its
   Job ignores, and is replaced; nothing trained is lost;
3. **a node and its replica's holder lost** (4 nodes or more; two workers): the replica
   went with its holder, so the gang resumes from the bucket's newest committed step;
4. **the leader's node lost**: the store of the rendezvous is gone, so every other agent
   fails; the launch scripts hold those failures back (``TEARDOWN_WAIT_ENV``) until the
   harness restarts the whole gang as the JobSet does when the leader's Job fails. Every
   pod is new, every ``emptyDir`` empty: the gang resumes from the bucket.

The run passes only if each interruption replaces exactly the pods it should, every
survivor resumes where the scenario says, no committed step is lost, and the gang ends with
the digest of a gang of the same size and tiers that was never interrupted (a gang whose
ranks start themselves, ``smoke.runs.gang``: the digest does not depend on the launcher).
Each interruption's *stall*, from the interruption to the gang's next step, is reported.
"""

from __future__ import annotations

import random
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.tiers import BUCKET, MEMORY, PEER, replica_holders
from spotproof.smoke.emulation.object_stores import emulated
from spotproof.smoke.processes.elastic_gang import (
    PERSIST_EVERY,
    REPLACEMENT_SECONDS,
    Abandoned,
    ElasticGang,
    Nodes,
    agent_running,
)
from spotproof.smoke.processes.gang_ranks import finish_all
from spotproof.smoke.processes.trainer_process import Event, TrainerProcess
from spotproof.smoke.reports.records import (
    Interruption,
    Progress,
    SmokeConfig,
    SmokeReport,
    attempt_of,
    judge_recovery,
    last_words,
    trainer_env,
)
from spotproof.smoke.runs.gang import judge_digest, run_reference
from spotproof.smoke.runs.gang_faults import LEAVE_SECONDS, reclaim

ONE_NODE, RECLAIMED, WITH_HOLDER, LEADER = (
    "one node lost",
    "one node reclaimed",
    "a node and its replica's holder lost",
    "the leader's node lost",
)


STEP_WAIT_SECONDS = 600
"""The longest the last pod may take to train from the gang's resumption to the step an
interruption is placed at (a few intervals of a user's steps, which may be seconds long)."""


def scenarios(nodes: int) -> list[str]:
    middle = [WITH_HOLDER] if nodes >= 4 else []
    return [ONE_NODE, RECLAIMED, *middle, LEADER]


def placed(resumed: int, interval: int, schedule: random.Random) -> int:
    """The step an interruption is placed at: two to three intervals past the gang's
    resumption, so that at least one save since then has been replicated."""
    low = 2 * interval + 1
    return resumed + schedule.randint(low, low + interval)


def steps_needed(nodes: int, interval: int) -> int:
    """The fewest steps a run of a gang of ``nodes`` pods must train for every one of its
    :func:`scenarios` to be placed (:func:`placed`, at the latest, from a resumption that
    loses nothing), each before the run's last step."""
    return len(scenarios(nodes)) * (3 * interval + 1) + 2


def too_short(nodes: int, interval: int, total_steps: int) -> str | None:
    """Why a run of ``total_steps`` cannot be interrupted as a gang of ``nodes`` is, or None."""
    needed = steps_needed(nodes, interval)
    if total_steps >= needed:
        return None
    fewer = "; or fewer than 4 --nodes (one interruption less)" if nodes >= 4 else ""
    return (
        f"--tiers: {total_steps} steps, checkpointing every {interval}, leave no room for the "
        f"{len(scenarios(nodes))} interruptions of a gang of {nodes} (each 2 to 3 intervals "
        f"after the resumption before it); allowed: at least {needed} steps, or a smaller "
        f"--interval{fewer}"
    )


def run_tiered_smoke(config: SmokeConfig, nodes: int, progress: Progress = print) -> SmokeReport:
    """The reference gang, then the one whose pods are replaced; see the module docstring."""
    if nodes < 2:
        raise ValueError(f"nodes = {nodes}: peer replicas need a gang of at least 2")
    report = SmokeReport(config)
    with emulated(config.store) as bucket, tempfile.TemporaryDirectory() as scratch:
        progress(
            f"store: {config.store} ({bucket.url}); gang of {nodes} pods, each a torchrun "
            f"elastic agent and its worker, saves held in memory and replicated to a peer, "
            f"every {PERSIST_EVERY}rd persisted; a pod is replaced {REPLACEMENT_SECONDS:g} s "
            "after it is gone"
        )
        memory = Nodes(Path(scratch) / "reference", nodes)
        env = trainer_env(config, bucket, "reference")
        run_reference(env, nodes, report, progress, node_env=memory.env)
        env = trainer_env(config, bucket, "interrupted")
        with bucket.apply():
            observer = CheckpointStore(env[settings.CHECKPOINT_URL.name])
        gang = ElasticGang(env, Nodes(Path(scratch) / "interrupted", nodes), time.monotonic())
        done = played(config, gang, observer=observer, report=report, progress=progress)
        report.digest = None if done is None else str(done["digest"])
        report.interrupted_seconds = time.monotonic() - gang.origin
        report.attempts = [attempt_of(pod) for pod in gang.every_pod]
    judge_digest(report)
    return report


def played(
    config: SmokeConfig,
    gang: ElasticGang,
    *,
    observer: CheckpointStore,
    report: SmokeReport,
    progress: Progress,
) -> Event | None:
    """The gang through :func:`play`, then to its end: the ``done`` its pods agree on, or
    None with why in ``report``. No pod of it is left running."""
    try:
        play(config, gang, observer=observer, report=report, progress=progress)
        return completed(gang, report)
    except Abandoned:
        return None
    finally:
        for pod in gang.every_pod:
            pod.send(signal.SIGKILL)
            pod.finish(10)


def play(
    config: SmokeConfig,
    gang: ElasticGang,
    *,
    observer: CheckpointStore,
    report: SmokeReport,
    progress: Progress,
) -> None:
    """Each of :func:`scenarios` in turn, judged into ``report``; :class:`Abandoned` when
    the gang cannot go on. Before each, the last pod's worker is held at the step the
    interruption is placed at (its agent runs on): the gang steps together, so a trainer
    of fast steps is interrupted there, on a loaded machine as on an idle one."""
    size = gang.size
    plan = scenarios(size)
    progress(f"interrupted gang: {' -> '.join(plan)}")
    schedule = random.Random(config.schedule_seed)
    resumed = _agreed(gang.resumed([1] * size, report), report)
    # The workers' holders in ring order; pod 1's holder is a worker too from 4 pods on.
    holder = replica_holders([""] * size, [""] * size)[1]
    for scenario in plan:
        target = placed(resumed, config.interval, schedule)
        if target >= config.total_steps - 1:
            report.failures.append(f"TOTAL_STEPS too small to {scenario} at step {target}")
            raise Abandoned
        last = gang.pods[-1]
        if last.run_until(_from_now_on(last, target), timeout=STEP_WAIT_SECONDS) is None:
            report.failures.append(
                f"pod {last.index} ended before step {target}: {last_words(last)}"
            )
            raise Abandoned
        lost = {ONE_NODE: [size - 1], RECLAIMED: [size - 1], WITH_HOLDER: [1, holder]}.get(
            scenario, [0]
        )
        kind = "preemption" if scenario == RECLAIMED else "hard-kill"
        interrupted_at = last.now()  # the notice or the loss: a reclaim's stall includes its save
        record = Interruption(kind, gang.started, round(interrupted_at, 3), target)
        lives = gang.lives()
        kept = [pod for k, pod in enumerate(gang.pods) if k not in lost]
        _strike(gang, lost, config, record)
        record.at_step = gang.step
        for pod in kept:
            pod.release()
        newest = observer.committed_steps()
        record.newest_committed = newest[-1] if newest else None
        if scenario == LEADER:
            codes = _torn_down(kept, record)
            gang.restart_all()
            lives = [0] * size
        else:
            codes = []
            for k in lost:
                gang.replace(k)
                lives[k] = 0
        events = gang.resumed([life + 1 for life in lives], report)
        resumed = _agreed(events, report)
        tiers = [str(event.get("tier", "")) for event in events]
        record.resumed_from, record.resumed_tiers = resumed, tiers
        record.replaced = list(range(size)) if scenario == LEADER else sorted(lost)
        record.steps_lost = max(0, record.at_step - resumed)
        stall = _next_step_seconds(gang, lives) - interrupted_at
        record.stall_seconds = round(stall, 3)
        _judge(scenario, record, config, report, lost=lost, kept=kept, codes=codes, gang=gang)
        report.interruptions.append(record)
        survivors = (
            "none kept"
            if scenario == LEADER
            else f"pods {sorted(set(range(size)) - set(lost))} kept"
        )
        progress(
            f"  {scenario} at step {record.at_step} (bucket's newest: "
            f"{record.newest_committed}): {survivors}, the gang resumed from {resumed}, read "
            f"from {', '.join(tiers)}; {record.steps_lost} steps lost; next step "
            f"{stall:.2f} s after the {'notice' if kind == 'preemption' else 'loss'}"
        )


def _from_now_on(pod: TrainerProcess, step: int) -> Callable[[Event], bool]:
    """Matches a ``step`` event at or past ``step`` that ``pod`` has not written yet: one
    of its present worker's, not of a worker its agent has since replaced."""
    written = {id(event) for _, event in pod.events}

    def match(event: Event) -> bool:
        return (
            id(event) not in written
            and event.get("event") == "step"
            and int(event.get("step", 0)) >= step
        )

    return match


def _strike(gang: ElasticGang, lost: list[int], config: SmokeConfig, record: Interruption) -> None:
    """End the ``lost`` pods: reclaimed along the configured path (a ``preemption``,
    whose final save is timed), or killed with their nodes."""
    if record.kind == "preemption":
        [victim] = [gang.pods[k] for k in lost]
        victim.release()  # a reclaimed node trains on through its notice
        record.grace_seconds = reclaim([victim], config, record)
        record.exit_code = victim.finish(record.grace_seconds + LEAVE_SECONDS)
        finals = [e for e in victim.of("checkpoint") if e.get("kind") == "final"]
        if finals:
            record.final_save_seconds = float(finals[-1].get("since_signal", finals[-1]["seconds"]))
        return
    for k in lost:
        gang.pods[k].send(signal.SIGKILL)
    for k in lost:
        gang.pods[k].finish()


def _agreed(events: list[Event], report: SmokeReport) -> int:
    steps = [int(event["step"]) for event in events]
    if len(set(steps)) != 1:
        report.failures.append(f"the pods resumed from different steps {steps}")
    return min(steps)


def _torn_down(pods: list[TrainerProcess], record: Interruption) -> list[int | None]:
    """The JobSet's restart after the leader's Job failed: every other pod deleted. First
    each pod's agent must have failed (the store went with the leader) while its launch
    script still holds that failure back, waiting for the teardown; a pod gone on its own,
    or whose agent never failed, is named in ``record.peers_not_waiting``."""
    deadline = time.monotonic() + LEAVE_SECONDS
    agents = list(pods)
    while agents and time.monotonic() < deadline:
        agents = [pod for pod in agents if pod.popen.poll() is None and agent_running(pod)]
        time.sleep(0.2)
    for pod in pods:
        if pod in agents or pod.popen.poll() is not None:
            record.peers_not_waiting.append(pod.index)
        pod.send(signal.SIGTERM)
    return finish_all(pods, LEAVE_SECONDS)


def _next_step_seconds(gang: ElasticGang, lives: list[int]) -> float:
    """When the slowest pod took its first step after this resumption (seconds since
    origin): the gang's next step."""
    latest = 0.0
    for pod, life in zip(gang.pods, lives, strict=True):
        resumed = [t for t, e in pod.events if e.get("event") == "resumed"][life]
        pod.wait_for(lambda e: e["event"] == "step", timeout=60)  # one at least follows
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            after = [t for t, e in pod.events if e.get("event") == "step" and t >= resumed]
            if after:
                latest = max(latest, after[0])
                break
            time.sleep(0.05)
    return latest


def _judge(
    scenario: str,
    record: Interruption,
    config: SmokeConfig,
    report: SmokeReport,
    *,
    lost: list[int],
    kept: list[TrainerProcess],
    codes: list[int | None],
    gang: ElasticGang,
) -> None:
    tiers = record.resumed_tiers
    if scenario != LEADER:
        gone = [pod.index for pod in kept if pod.popen.poll() is not None]
        if gone:
            report.failures.append(
                f"{scenario}: pod(s) {gone} that should have kept running were replaced"
            )
    bucket = record.newest_committed
    if scenario == ONE_NODE:
        expected = [PEER if k in lost else MEMORY for k in range(gang.size)]
        record.max_steps_lost = 2 * config.interval
        if tiers != expected:
            report.failures.append(
                f"{scenario}: the gang read its shards from {tiers}, expected {expected} "
                "(survivors from their own memory, the replacement from its holder)"
            )
        if bucket is not None and (record.resumed_from or 0) < bucket:
            report.failures.append(
                f"{scenario}: resumed from {record.resumed_from}, older than the bucket's "
                f"newest {bucket}"
            )
    elif scenario == RECLAIMED:
        record.max_steps_lost = 0
        if record.exit_code != exit_codes.PREEMPTED:
            report.failures.append(
                f"{scenario}: the reclaimed pod exited {record.exit_code}, expected "
                f"{exit_codes.PREEMPTED} (which its Job ignores)"
            )
        if record.final_save_seconds is None:
            report.failures.append(
                f"{scenario}: the final checkpoint of step {record.at_step} did not commit "
                f"within the {record.grace_seconds or 0:g} s grace"
            )
    else:
        record.max_steps_lost = (PERSIST_EVERY + 1) * config.interval
        if bucket is not None and record.resumed_from != bucket:
            report.failures.append(
                f"{scenario}: the gang resumed from {record.resumed_from}, not from the "
                f"bucket's newest committed step {bucket}: memory that did not survive was used"
            )
        if any(tier != BUCKET for tier in tiers):
            report.failures.append(f"{scenario}: shards read from {tiers}, expected the bucket")
    if scenario == LEADER:
        if codes != [exit_codes.PREEMPTED] * len(codes):
            report.failures.append(
                f"{scenario}: the other pods exited {codes} when torn down, expected "
                f"{exit_codes.PREEMPTED} each (their agents' failures held back)"
            )
        if record.peers_not_waiting:
            report.failures.append(
                f"{scenario}: pod(s) {record.peers_not_waiting} were not holding their agent's "
                "failure back when the gang was torn down (gone on their own: on a cluster "
                "that Job's failure would spend a counted restart; or the agent never failed)"
            )
    judge_recovery(scenario, record, report, "the gang")


def completed(gang: ElasticGang, report: SmokeReport) -> Event | None:
    """The gang trained to its end: the ``done`` event every pod agrees on; None, with
    why in ``report``, otherwise."""
    digests = [pod.wait_for(lambda e: e["event"] == "done", timeout=600) for pod in gang.pods]
    codes = finish_all(gang.pods, 60)
    if any(d is None for d in digests) or any(code != exit_codes.COMPLETED for code in codes):
        report.failures.append(
            f"the gang did not complete: exit codes {codes}, "
            f"{'; '.join(last_words(pod) for pod in gang.pods)}"
        )
        return None
    if len({str(d["digest"]) for d in digests if d is not None}) != 1:
        report.failures.append("the pods report different digests")
        return None
    return digests[0]
