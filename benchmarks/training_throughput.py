"""Training throughput with periodic asynchronous checkpoints, against none, in one run.

    python benchmarks/training_throughput.py [--model-mb 64] [--steps 200] [--interval 20]
                                             [--store file|s3] [--rounds 10] [--dir DIR]
                                             [--quick] [--readme docs/performance.md]

Four loops of the smoke trainer's model and data, in this process, one torch thread (the
other CPU is free for the upload, as a GPU host's CPUs would be), interleaved round by
round with a rotating start, each after a ``sync``, so drift and one loop's writeback hit
all alike:

- **no checkpoints**, twice: the limit, and an identical run beside it whose "loss" against
  the first is the noise floor of this machine, printed beside the figures;
- **spotproof**: the same loop inside ``spotproof.training`` (``KEEP_CHECKPOINTS=2``), as a
  user writes it: a periodic save every ``--interval`` steps, in the background; timed to
  the end of the last step (the completed state's save after it is outside the window, as
  the runs without checkpoints save nothing there);
- **spotproof, memory tier**: ``AsyncCheckpointer.save_async`` through a ``TieredGangStore``
  (``runtime.checkpointer.tiers``): each save committed to this node's memory (a tmpfs
  directory), replicated to a holder (another process serving its own tmpfs, as another
  node would), and every ``PERSIST_EVERY``-th save also to the medium below. The holder
  shares this machine's CPUs, which another node would not: a pessimistic figure. From
  the checkpointer's pieces, not ``training()``: there a memory tier needs a gang of
  training ranks, whose second trainer on these two cores would measure the contention
  between trainers rather than the saver;
- **DCP async_save**: ``torch.distributed.checkpoint.async_save`` every ``--interval``
  steps, waiting for the previous save's future first (as torchtitan does), the checkpoint
  before the previous one removed when a save completes, in DCP's thread: the peer.

Both checkpointers write to the same medium: with ``--store file`` one directory on a
disk-backed file system (``medium``; spotproof through a ``file://`` ``CheckpointStore``,
DCP through ``FileSystemWriter``), with ``--store s3`` the S3 emulator (``FsspecWriter``
for DCP). Two figures per checkpointer:

- **throughput lost**: 1 - (steps/s with saves) / (steps/s of the same round's run without
  checkpoints), the median over rounds, with the range; the target is 2% (issue 31);
- **blocked per save**: the time the loop was held up at each save (spotproof's
  ``SaveResult.blocked_seconds``; around DCP's call), as a share of the interval. Blocked
  time is a floor on the loss, not the loss: the upload also takes CPU and memory
  bandwidth from the loop.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from measure import check_block, replace_block
from medium import medium as open_medium
from stores import replica_holder
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

from spotproof.runtime.checkpointer import torch_state
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore, SaveResult
from spotproof.runtime.checkpointer.gang import new_gang_id
from spotproof.runtime.checkpointer.tiers import MemoryTier, TieredGangStore
from spotproof.runtime.loop import training
from spotproof.runtime.storage import open_store
from spotproof.runtime.storage.peer import PeerStore
from spotproof.smoke.data_parallel import Alone
from spotproof.smoke.emulation.object_stores import emulated
from spotproof.smoke.train import TrainConfig, batch, build

Saver = Callable[[int, torch.nn.Module, torch.optim.Optimizer], None]
Loop = Callable[[str], tuple[Saver | None, Callable[[], Any]]]
"""Given a fresh location for this run, its saver (None: no checkpoints) and its finish."""
BASE, AGAIN, OURS, PEER = "no checkpoints", "no checkpoints, again", "spotproof", "DCP async_save"
TIERS = "spotproof, memory tier"
PERSIST_EVERY = 4
TARGET_LOSS = 0.02


def _warm(config: TrainConfig) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable]:
    """The model, its optimizer, and one training step of it, warmed up untimed."""
    model, _, optimizer = build(config, Alone())
    width = model[0].in_features
    loss_fn = torch.nn.MSELoss()

    def train_step(step: int) -> None:
        inputs, targets = batch(config, step, width)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), targets).backward()
        optimizer.step()

    for step in range(3):
        inputs, targets = batch(config, step, width)
        loss_fn(model(inputs), targets).backward()
    return model, optimizer, train_step


def run(config: TrainConfig, interval: int, save: Saver | None, finish: Callable[[], Any]) -> float:
    model, optimizer, train_step = _warm(config)
    started = time.perf_counter()
    for step in range(1, config.total_steps + 1):
        train_step(step)
        if save is not None and (step == 1 or step % interval == 0):
            save(step, model, optimizer)
    elapsed = time.perf_counter() - started
    finish()
    return elapsed


def through_training(config: TrainConfig, interval: int, url: str, blocked: list[float]) -> float:
    """The same loop inside ``training()``, to the end of its last step; the time each
    periodic save held it up, from the run's own events."""
    model, optimizer, train_step = _warm(config)
    events = Path(tempfile.mkdtemp(prefix="spotproof-bench-")) / "events.jsonl"
    os.environ.update(SPOTPROOF_EVENTS=str(events), SPOTPROOF_LOG="off", KEEP_CHECKPOINTS="2")
    with training(model, optimizer, url=url, interval=interval) as run:
        started = time.perf_counter()
        for step in run.steps(config.total_steps):
            train_step(step + 1)
            if step + 1 == config.total_steps:
                elapsed = time.perf_counter() - started
    said = [json.loads(line) for line in events.read_text().splitlines()]
    blocked.extend(
        e["blocked_seconds"] for e in said if e["event"] == "checkpoint" and e["kind"] == "periodic"
    )
    shutil.rmtree(events.parent)
    return elapsed


def tiered_saver(url: str, blocked: list[float], holder: str) -> tuple[Saver, Callable[[], Any]]:
    """Saves through a memory tier replicated to ``holder`` (a replica server's URL)."""
    results: list[SaveResult] = []
    store = tiered_store(url, holder)
    saver = AsyncCheckpointer(store, on_done=lambda r, _k: results.append(r))
    buffer = torch_state.StateBuffer()

    def save(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if step == 1:  # the trainer prepares its buffer after the first step
            buffer.prepare(model, optimizer)
            return
        saver.save_async(step, lambda: buffer.capture(model, optimizer, step), {})

    def finish() -> None:
        saver.wait()
        blocked.extend(r.blocked_seconds for r in results)
        # Free both nodes' memory for the next loop.
        assert store.replica is not None
        store.replica.store.delete_prefix("steps")
        store.replica.store.delete_prefix("manifests")
        store.close()
        shutil.rmtree(store.tier.directory, ignore_errors=True)

    return save, finish


def tiered_store(url: str, holder: str) -> TieredGangStore:
    """Rank 0 of a gang of one whose replica goes to ``holder``: a gang of two would wait
    for the other rank's shard at each persisted save, and this loop is alone."""
    memory = tempfile.mkdtemp(prefix="tier-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    tier = MemoryTier(memory, persist_every=PERSIST_EVERY)
    store = TieredGangStore(
        url, rank=0, world_size=1, gang=new_gang_id(), tier=tier, exchange=lambda v: [v], keep=2
    )
    peer = f"{holder}/{os.path.basename(memory)}"
    store.replica = CheckpointStore(peer, keep=2, writer_id=store.writer_id, store=PeerStore(peer))
    return store


def dcp_saver(
    root: str, blocked: list[float], remove: Callable[[str], None]
) -> tuple[Saver, Callable[[], Any]]:
    pending: list[Future[Any]] = []
    written: list[str] = []
    kind = FileSystemWriter if "://" not in root else FsspecWriter

    def save(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if step == 1:
            return
        started = time.perf_counter()
        if pending:
            pending.pop().result()
        state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
        written.append(f"{root}/{step}")
        future = dcp.async_save(state, storage_writer=kind(written[-1]), no_dist=True)
        assert isinstance(future, Future)
        if len(written) > 2:  # keep 2, as spotproof does; removed off the training thread
            old = written.pop(0)
            future.add_done_callback(lambda _done, old=old: remove(old))
        pending.append(future)
        blocked.append(time.perf_counter() - started)

    def finish() -> None:
        for future in pending:
            future.result()

    return save, finish


def loops(
    store: str, blocked: dict[str, list[float]], remove: Callable[[str], None], holder: str
) -> dict:
    def nothing(config: TrainConfig, interval: int, _where: str) -> float:
        return run(config, interval, None, lambda: None)

    def ours(config: TrainConfig, interval: int, where: str) -> float:
        url = f"file://{where}/spotproof" if store == "file" else f"{where}/spotproof"
        return through_training(config, interval, url, blocked[OURS])

    def tiers(config: TrainConfig, interval: int, where: str) -> float:
        url = f"file://{where}/tiers" if store == "file" else f"{where}/tiers"
        return run(config, interval, *tiered_saver(url, blocked[TIERS], holder))

    def peer(config: TrainConfig, interval: int, where: str) -> float:
        return run(config, interval, *dcp_saver(f"{where}/dcp", blocked[PEER], remove))

    return {BASE: nothing, AGAIN: nothing, OURS: ours, TIERS: tiers, PEER: peer}


def measure(args: argparse.Namespace, root: str, url: str, remove: Callable[[str], None]) -> dict:
    """Seconds of each loop per round, and each checkpointer's blocked time per save."""
    times: dict[str, list[float]] = {name: [] for name in (BASE, AGAIN, OURS, TIERS, PEER)}
    blocked: dict[str, list[float]] = {OURS: [], TIERS: [], PEER: []}
    config = TrainConfig(total_steps=args.steps, model_mb=args.model_mb)
    with replica_holder() as holder:
        contenders = loops(args.store, blocked, remove, holder)
        names = list(contenders)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                where = f"{root}/round-{round_}-{names.index(name)}"
                os.sync()
                times[name].append(contenders[name](config, args.interval, where))
                remove(where)
    return {"times": times, "blocked": blocked}


def summary(args: argparse.Namespace, found: dict, medium: str) -> tuple[list[str], list[str]]:
    """Printed lines, and the markdown rows for the README."""
    times, blocked = found["times"], found["blocked"]
    base = times[BASE]

    def losses(name: str) -> list[float]:
        # Within a round the loops ran back to back: the pairing cancels slow drift.
        return [1 - plain / value for value, plain in zip(times[name], base, strict=True)]

    saves = args.steps // args.interval  # step 1 prepares the buffer; it saves nothing
    interval = statistics.median(base) * args.interval / args.steps
    noise = losses(AGAIN)
    floor = statistics.median(abs(x) for x in noise)
    lines = [
        f"training throughput, {args.model_mb:g} MiB of state, {args.steps} steps, a save every "
        f"{args.interval} steps ({saves} a run, {interval:.2f} s apart), {medium}, "
        f"{args.rounds} interleaved rounds",
        f"  {BASE:<22} {args.steps / statistics.median(base):7.2f} steps/s",
        f"  noise: an identical run without checkpoints differs from it by {100 * floor:.1f}%"
        f" (median |difference|; range {100 * min(noise):+.1f}%..{100 * max(noise):+.1f}%):"
        " a smaller loss is not resolved here",
    ]
    rows = []
    for name in (OURS, TIERS, PEER):
        lost, held = losses(name), blocked[name]
        loss, per_save = statistics.median(lost), statistics.median(held)
        met = "met" if loss <= TARGET_LOSS else f"MISSED by {100 * (loss - TARGET_LOSS):.1f} points"
        if floor >= TARGET_LOSS:
            met += f", unresolved: the noise floor {100 * floor:.1f}% is over the target"
        elif abs(loss - TARGET_LOSS) < floor:
            met += f", within the noise ({100 * floor:.1f}%)"
        lines += [
            f"  {name:<22} {args.steps / statistics.median(times[name]):7.2f} steps/s, "
            f"throughput lost {100 * loss:+.1f}% (median of {len(lost)} paired rounds, range "
            f"{100 * min(lost):+.1f}%..{100 * max(lost):+.1f}%)",
            f"  {'':<22} blocked {per_save * 1000:.1f} ms a save (median of {len(held)}, max "
            f"{max(held) * 1000:.1f} ms) = {100 * per_save / interval:.2f}% of the interval",
            f"  {'':<22} target: throughput lost <= {100 * TARGET_LOSS:.0f}%: {met}",
        ]
        rows.append(
            f"| {name}, {args.model_mb:g} MiB every {args.interval} steps ({interval:.2f} s), "
            f"{medium} | **{100 * loss:.1f}%** ({100 * min(lost):.1f}..{100 * max(lost):.1f}) | "
            f"{per_save * 1000:.1f} ms = {100 * per_save / interval:.2f}% | "
            f"{100 * floor:.1f}% | <= 2%: {met} |"
        )
    ours, peer = (statistics.median(losses(n)) for n in (OURS, PEER))
    held = [statistics.median(blocked[n]) for n in (OURS, PEER)]
    lines.append(
        f"  => spotproof loses {100 * ours:.1f}% to DCP async_save's {100 * peer:.1f}%, and is "
        f"blocked {held[0] / held[1]:.2f}x as long a save"
    )
    header = [
        "| periodic saves | throughput lost (range) | blocked per save | noise floor | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    return lines, header + rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-mb", type=float, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--interval", type=int, default=20)
    parser.add_argument("--store", default="file", choices=("file", "s3"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--dir", help="where --store file writes (default: a disk, see medium)")
    parser.add_argument("--quick", action="store_true", help="16 MiB, 60 steps, 3 rounds")
    parser.add_argument("--readme", type=Path, help="replace the training-throughput table")
    args = parser.parse_args()
    check_block(args.readme, "training-throughput")
    if args.quick:
        args.model_mb, args.steps, args.interval, args.rounds = 16, 60, 20, 3
    warnings.filterwarnings("ignore")  # DCP warns that it runs without a process group
    torch.set_num_threads(1)
    if args.store == "file":
        with open_medium(args.dir) as where:
            print(f"checkpoints to {where.describe()}", flush=True)

            def remove(path: str) -> None:
                shutil.rmtree(path, ignore_errors=True)

            found = measure(args, str(where.path), f"file://{where.path}", remove)
            label = where.label
    else:
        with emulated(args.store) as bucket, bucket.apply():
            fs = open_store(bucket.url).fs

            def remove(path: str) -> None:
                if fs.exists(path.removeprefix("s3://")):
                    fs.rm(path.removeprefix("s3://"), recursive=True)

            found = measure(args, bucket.url, bucket.url, remove)
            label = "S3 emulator (moto, loopback)"
    lines, table = summary(args, found, label)
    print("\n".join(lines))
    if args.readme:
        replace_block(args.readme, "training-throughput", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
