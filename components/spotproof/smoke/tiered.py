"""``spotproof smoke --nodes N --tiers``: a gang whose periodic saves are held in memory
and replicated to a peer (``runtime.checkpointer.tiers``), and whose nodes vanish.

Each rank runs on a node of its own, played by a directory that stands for the node's
memory (``MEMORY_TIER_DIR``) and its own replica server on loopback. A node that is lost
takes its directory with it: the rank's replacement starts on a fresh one, as a pod the
JobSet recreates lands on a new node, while the surviving ranks' replacements find their
node's memory as they left it. Every ``PERSIST_EVERY``-th periodic save and every final
save also goes to the bucket. The harness plays, each without notice (SIGKILL), and
restarts the whole gang after each, as a JobSet's failure policy does:

1. **one node lost**: the last rank's node. Its replacement must resume from its holder's
   replica (tier ``peer``), at a step no older than the bucket's newest: memory saved
   what the bucket had not yet got;
2. **a node and the holder of its replica lost** (3 nodes or more): the replica is gone
   with its holder, so the gang must resume from the bucket's newest committed step;
3. **every node lost**: nothing in memory survives; the gang resumes from the bucket.

The run passes only if every restart resumes as above, loses at most two checkpoint
intervals when a replica serves it (the save in flight, and the one before) and at most
``PERSIST_EVERY`` + 1 when the bucket does, and the restarted gang ends with the digest of
a gang of the same size, with the same tiers, that was never interrupted. A gang that
resumed from memory persists its next save, so the bucket is never further behind.
"""

from __future__ import annotations

import random
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.tiers import PEER, replica_holders
from spotproof.smoke.emulators import emulated
from spotproof.smoke.gang_faults import LEAVE_SECONDS, tear_down
from spotproof.smoke.multinode import (
    GangProcesses,
    agreed,
    complete,
    judge_digest,
    run_reference,
)
from spotproof.smoke.process import TrainerProcess
from spotproof.smoke.records import (
    Interruption,
    Progress,
    SmokeConfig,
    SmokeReport,
    attempt_of,
    judge_recovery,
    trainer_env,
)

PERSIST_EVERY = 3
"""The rehearsal persists every third periodic save: most kills then find memory ahead
of the bucket."""
ONE_NODE, WITH_HOLDER, EVERY_NODE = (
    "one node lost",
    "a node and its replica's holder lost",
    "every node lost",
)


class Nodes:
    """The directory standing for each rank's node; a lost node's is deleted."""

    def __init__(self, root: Path, size: int) -> None:
        self.root, self.generation = root, [0] * size
        self.secret = root / "replica-secret"  # the one Secret every pod of the gang mounts
        root.mkdir(parents=True, exist_ok=True)
        self.secret.write_text(secrets.token_hex(32))

    def memory(self, rank: int) -> Path:
        return self.root / f"node-{rank}.{self.generation[rank]}"

    def env(self, rank: int) -> dict[str, str]:
        return {
            settings.MEMORY_TIER_DIR.name: str(self.memory(rank)),
            settings.PERSIST_EVERY.name: str(PERSIST_EVERY),
            settings.REPLICA_PORT.name: "0",
            settings.REPLICA_SECRET_FILE.name: str(self.secret),
            settings.NODE_NAME.name: self.memory(rank).name,
        }

    def lose(self, rank: int) -> None:
        shutil.rmtree(self.memory(rank), ignore_errors=True)
        self.generation[rank] += 1


def scenarios(nodes: int) -> list[str]:
    return [ONE_NODE, WITH_HOLDER, EVERY_NODE] if nodes >= 3 else [ONE_NODE, EVERY_NODE]


def run_tiered_smoke(config: SmokeConfig, nodes: int, progress: Progress = print) -> SmokeReport:
    """The reference gang, then the one whose nodes are lost; see the module docstring."""
    if nodes < 2:
        raise ValueError(f"nodes = {nodes}: peer replicas need a gang of at least 2")
    report = SmokeReport(config)
    with emulated(config.store) as bucket, tempfile.TemporaryDirectory() as scratch:
        progress(
            f"store: {config.store} ({bucket.url}); gang of {nodes} ranks over gloo, saves "
            f"held in memory and replicated to a peer, every {PERSIST_EVERY}rd persisted"
        )
        memory = Nodes(Path(scratch) / "reference", nodes)
        env = trainer_env(config, bucket, "reference")
        run_reference(env, nodes, report, progress, node_env=memory.env)
        memory = Nodes(Path(scratch) / "interrupted", nodes)
        env = trainer_env(config, bucket, "interrupted")
        with bucket.apply():
            observer = CheckpointStore(env[settings.CHECKPOINT_URL.name])
        _lose_nodes(config, env, observer=observer, nodes=memory, report=report, progress=progress)
    judge_digest(report)
    return report


def _lose_nodes(
    config: SmokeConfig,
    env: dict[str, str],
    *,
    observer: CheckpointStore,
    nodes: Nodes,
    report: SmokeReport,
    progress: Progress,
) -> None:
    size = len(nodes.generation)
    plan = scenarios(size)
    progress(f"interrupted gang: {' -> '.join(plan)}")
    schedule = random.Random(config.schedule_seed)
    origin = time.monotonic()
    gang = GangProcesses(env, size, origin, 0, node_env=nodes.env)
    gangs = [gang]
    resumed = agreed(gang, report)
    holder = replica_holders([""] * size, [""] * size)[size - 1]
    for scenario in plan:
        # Past two intervals, so at least one save since the restart has been replicated.
        low = 2 * config.interval + 1
        target = resumed + schedule.randint(low, low + config.interval)
        if not gang.reaches(target, config.total_steps, scenario, report):
            break
        lost = {ONE_NODE: [size - 1], WITH_HOLDER: [size - 1, holder]}.get(scenario, range(size))
        record = Interruption("hard-kill", gang.index, round(time.monotonic() - origin, 3), target)
        for rank in lost:
            gang.ranks[rank].send(signal.SIGKILL)
        for rank in lost:
            gang.ranks[rank].finish()
            nodes.lose(rank)
        record.at_step = max(rank.last_step for rank in gang.ranks)
        survivors = [r for i, r in enumerate(gang.ranks) if i not in lost]
        codes = tear_down(survivors, LEAVE_SECONDS, record) if survivors else []
        newest = observer.committed_steps()
        record.newest_committed = newest[-1] if newest else None
        gang = GangProcesses(env, size, origin, gang.index + 1, node_env=nodes.env)
        gangs.append(gang)
        resumed = agreed(gang, report)
        tiers = [str((r.first("resumed") or {}).get("tier", "")) for r in gang.ranks]
        record.resume_seconds = [_start_to_first_step(r) for r in gang.ranks]
        # A replica is at most the save in flight and the one before behind; the bucket,
        # PERSIST_EVERY saves and the one in flight.
        intervals = 2 if scenario == ONE_NODE else PERSIST_EVERY + 1
        record.resumed_from, record.max_steps_lost = resumed, intervals * config.interval
        record.steps_lost = max(0, record.at_step - resumed)
        record.resumed_tiers = tiers
        _judge(scenario, codes, record, tiers, report)
        report.interruptions.append(record)
        progress(
            f"  {scenario} at step {record.at_step} (bucket's newest: "
            f"{record.newest_committed}): the gang resumed from {resumed}, read from "
            f"{', '.join(tiers)}; {record.steps_lost} steps lost; the last rank trained again "
            f"{record.resume_seconds[-1]:.2f} s after it started"
        )
    report.digest = complete(gang, report)
    report.interrupted_seconds = time.monotonic() - origin
    report.attempts = [attempt_of(rank) for started in gangs for rank in started.ranks]


def _start_to_first_step(rank: TrainerProcess) -> float:
    """Seconds from the replacement's start to its first step: what resuming cost it."""
    rank.wait_for(lambda e: e["event"] == "step")
    first = next((t for t, e in rank.events if e.get("event") == "step"), None)
    return round(first - rank.started, 3) if first is not None else float("nan")


def _judge(
    scenario: str,
    codes: list[int | None],
    record: Interruption,
    tiers: list[str],
    report: SmokeReport,
) -> None:
    if any(code != exit_codes.PEER_LOST for code in codes):
        report.failures.append(
            f"{scenario}: surviving ranks exited {codes}, expected {exit_codes.PEER_LOST} each"
        )
    bucket = record.newest_committed
    if scenario == ONE_NODE:
        if tiers[-1] != PEER:
            report.failures.append(
                f"{scenario}: the lost rank's replacement read its shard from {tiers[-1]!r}, "
                "not from its holder's replica"
            )
    elif bucket is not None and record.resumed_from != bucket:
        report.failures.append(
            f"{scenario}: the gang resumed from {record.resumed_from}, not from the bucket's "
            f"newest committed step {bucket}: memory that did not survive was used"
        )
    judge_recovery(scenario, record, report, "the gang")
