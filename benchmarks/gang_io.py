"""Sharded checkpoints of a gang of 2 ranks against the limit and PyTorch's own, in one run.

    python benchmarks/gang_io.py [--sizes 64,256] [--stores file,s3] [--repeats 3]
                                 [--dir DIR] [--cold auto|fadvise|drop_caches] [--quick]
                                 [--readme docs/performance.md]

Two processes form a gang over ``torch.distributed`` (gloo) exactly as the smoke trainer
does (``spotproof.smoke.data_parallel.DataParallel``): each owns half of the parameters of a model
whose weights and Adam state take ``--sizes`` MiB, so each saves a shard of half that. Every
contender is timed from a barrier before it to a barrier after it on rank 0, i.e. until
the slower rank is done; the contenders run interleaved, median of ``--repeats`` rounds:

- **spotproof**: ``StateBuffer.capture`` of the shard + ``GangCheckpointStore.save`` until
  the gang's manifest is committed (rank 0 waits for both shard records); restore is
  ``load_latest`` with the ranks agreeing on the step and ``torch_state.restore`` as the
  trainer calls it (``measure.restore_latest``);
- **DCP**: ``torch.distributed.checkpoint.save``/``load`` over the same process group, each
  rank's shard under its own keys (``FileSystemWriter`` on disk, ``FsspecWriter`` on S3, at
  their default ``thread_count=1``: one file a rank; the readers take no thread count);
- **DCP async_save** (thread), until its future resolves;
- **the limit**: each rank writes (``write`` + ``fsync``, or a bytes-only ``put_object``:
  ``checkpoint_io.bytes_only_client``) and reads the bytes spotproof writes for its shard
  as one object.

Every contender writes to the same medium: a directory on a disk-backed file system
(``medium``), named in the rows, or the S3 emulator. Restores from disk are measured cold
(rank 0 evicts the files the run reads before it starts) and warm (after a priming read).

A third row measures what an asynchronous save costs training, the time until the call
returns: ``AsyncCheckpointer.save_async`` against DCP's ``async_save``, with a copy of
the shard's bytes in memory (one tensor copy) as the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from measure import (
    LIMIT,
    RESTORE_ROUTE,
    Action,
    Row,
    Target,
    check_block,
    interleaved,
    markdown,
    replace_block,
    report,
    restore_latest,
)
from medium import COLD_METHODS, CacheState, choose_cold_method
from medium import medium as open_medium
from stores import BENCH_BUCKET, S3_LABEL, Store, file_io, s3_io
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

from spotproof.runtime.checkpointer import torch_state
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.gang import GangCheckpointStore
from spotproof.runtime.group import Gang
from spotproof.smoke.data_parallel import DataParallel
from spotproof.smoke.emulation.object_stores import emulated, free_port
from spotproof.smoke.train import TrainConfig, batch, build

OURS = "spotproof"
RANKS = 2
DCP_LOAD = "DCP load, 1 file a rank"
# Issue 31's targets for a gang on local disk.
LOCAL_SAVE = [Target(1.10, LIMIT)]
LOCAL_RESTORE = [Target(1.0, DCP_LOAD)]


def shard_state(megabytes: float, gang: Gang) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """This rank's half of the smoke model after one step: its parameters and their Adam
    moments, as the gang trainer holds them."""
    config = TrainConfig(total_steps=1, model_mb=megabytes)
    model, owned, optimizer = build(config, DataParallel(gang.rank, gang.world_size))
    inputs, targets = batch(config, 0, model[0].in_features)
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
    return owned, optimizer


def gang_timed(
    gang: Gang, run: Callable[[int], object], untimed: Callable[[int], object]
) -> Action:
    """``run`` on every rank between two barriers (the gang's time), then ``untimed``. The
    first barrier also waits for rank 0's ``before`` (the cache state) to be done."""

    def action(round_: int) -> float:
        dist.barrier()
        started = time.perf_counter()
        run(round_)
        dist.barrier()
        elapsed = time.perf_counter() - started
        untimed(round_)
        dist.barrier()
        return elapsed

    return action


def measure(store: Store, megabytes: int, repeats: int, gang: Gang) -> tuple[list[Row], list[str]]:
    owned, optimizer = shard_state(megabytes, gang)
    buffer = torch_state.StateBuffer()
    shard_bytes = buffer.prepare(owned, optimizer)
    rank = gang.rank
    ours = GangCheckpointStore(
        store.url("spotproof"), rank=rank, world_size=RANKS, gang=gang.gang_id, keep=2
    )
    saver = AsyncCheckpointer(ours)
    # DCP's async_save runs collectives from its own thread: on the group the barriers use,
    # the two would interleave. A second gloo group, as PyTorch advises for async_save.
    async_group = dist.new_group(backend="gloo")

    def capture() -> dict[str, Any]:
        return buffer.capture(owned, optimizer, 0)

    def spotproof_save(round_: int) -> None:
        assert ours.save(round_ + 1, capture(), prune=False).committed

    def spotproof_restore(_round: int) -> None:
        restore_latest(ours, owned, optimizer, agree=gang.agree)

    def dcp_path(kind: str, round_: int) -> str:
        return f"{store.root}/{kind}/{round_}"

    def sharded() -> dict[str, Any]:
        # Keys of their own per rank: DCP deduplicates a key that several ranks hold.
        return {f"rank{rank}": {"model": owned.state_dict(), "optim": optimizer.state_dict()}}

    def writer(path: str) -> Any:
        return FileSystemWriter(path) if store.name == "file" else FsspecWriter(path)

    def reader(path: str) -> Any:
        return FileSystemReader(path) if store.name == "file" else FsspecReader(path)

    put, get = (file_io if store.name == "file" else s3_io)(store)

    def remove(kind: str) -> Callable[[int], None]:
        def untimed(round_: int) -> None:
            if rank == 0 and round_ >= 2:
                store.remove(dcp_path(kind, round_ - 2))

        return untimed

    payload = b"".join(bytes(blob) for blob in capture().values())
    copy_source = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    copy_target = torch.empty_like(copy_source)
    saves = {
        OURS: gang_timed(gang, spotproof_save, lambda _r: ours.prune()),
        "DCP save, thread_count=1": gang_timed(
            gang,
            lambda r: dcp.save(sharded(), storage_writer=writer(dcp_path("dcp", r))),
            remove("dcp"),
        ),
        "DCP async_save, until done": gang_timed(
            gang,
            lambda r: dcp.async_save(
                sharded(),
                storage_writer=writer(dcp_path("dcp-async", r)),
                process_group=async_group,
            ).result(),
            remove("dcp-async"),
        ),
        "plain write, 1 object a rank": gang_timed(
            gang, lambda r: put(f"{dcp_path('plain', r)}/rank{rank}", payload), remove("plain")
        ),
    }
    last = repeats
    restores = {
        OURS: gang_timed(gang, spotproof_restore, lambda _r: None),
        DCP_LOAD: gang_timed(
            gang,
            lambda _r: dcp.load(sharded(), storage_reader=reader(dcp_path("dcp", last))),
            lambda _r: None,
        ),
        "plain read, 1 object a rank": gang_timed(
            gang, lambda _r: get(f"{dcp_path('plain', last)}/rank{rank}"), lambda _r: None
        ),
    }
    pending: list[Any] = []
    blocking = {
        OURS: gang_timed(
            gang,
            lambda r: saver.save_async(1000 + r, capture, {}),
            lambda _r: saver.wait(),
        ),
        "DCP async_save, until it returns": gang_timed(
            gang,
            lambda r: pending.append(
                dcp.async_save(
                    sharded(),
                    storage_writer=writer(dcp_path("dcp-blocking", r)),
                    process_group=async_group,
                )
            ),
            lambda _r: pending.pop().result(),
        ),
        "copy the shard in memory": gang_timed(
            gang, lambda _r: copy_target.copy_(copy_source), lambda _r: None
        ),
    }
    mib = RANKS * shard_bytes / 2**20
    local = store.name == "file"
    save_row = Row(
        f"save {mib:.0f} MiB as 2 shards, {store.label}",
        ["plain write, 1 object a rank"],
        ["DCP save, thread_count=1", "DCP async_save, until done"],
        targets=LOCAL_SAVE if local else [],
    )
    blocking_row = Row(
        f"training held up by an async save of {mib:.0f} MiB, {store.label}",
        ["copy the shard in memory"],
        ["DCP async_save, until it returns"],
    )
    save_row.seconds = interleaved(saves, repeats)
    blocking_row.seconds = interleaved(blocking, repeats)
    restore_limit, notes = ["plain read, 1 object a rank"], []
    if not local:
        row = Row(f"restore {mib:.0f} MiB as 2 shards, {store.label}", restore_limit, [DCP_LOAD])
        row.seconds = interleaved(restores, repeats)
        notes.append(f"  limit's S3 requests carrying a checksum: {store.unchecked_requests}")
        return [save_row, row, blocking_row], notes
    paths = {
        OURS: f"{store.root}/spotproof",
        DCP_LOAD: dcp_path("dcp", last),
        "plain read, 1 object a rank": dcp_path("plain", last),
    }
    rows = [save_row]
    for cold in (True, False):
        state = CacheState(paths, cold)
        cache = "cold" if cold else "warm"
        row = Row(
            f"restore {mib:.0f} MiB as 2 shards, {store.label}, {cache} page cache",
            restore_limit,
            [DCP_LOAD],
            targets=LOCAL_RESTORE,
        )
        # Rank 0 sets the cache state for both: the page cache is the machine's.
        row.seconds = interleaved(restores, repeats, before=state if rank == 0 else None)
        rows.append(row)
        if rank == 0:
            notes.append(state.describe())
    return [*rows, blocking_row], notes


def rank_main(args: argparse.Namespace) -> int:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    choose_cold_method(args.cold)
    rank = int(os.environ["RANK"])
    # Joined as training() joins a gang of its own (``spotproof.runtime.group``), then the
    # gang made over it; MASTER_ADDR and MASTER_PORT come from ``launch``.
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    gang = Gang(rank, RANKS, tier=None)
    try:
        for megabytes in [int(s) for s in args.sizes.split(",")]:
            root = os.environ["BENCH_ROOT"]
            store = Store(args.store, f"{root}/{megabytes}", os.environ["BENCH_LABEL"])
            rows, notes = measure(store, megabytes, args.repeats, gang)
            if gang.rank != 0:
                continue
            for row in rows:
                print("\n".join(["", *report(row, OURS)]), flush=True)
                with args.rows.open("a") as found:
                    targets = [[t.ratio, t.against] for t in row.targets]
                    record = [row.title, row.limit, row.peer, row.seconds, targets]
                    found.write(json.dumps(record) + "\n")
            print("\n".join(notes), flush=True)
    finally:
        gang.close()
    return 0


def launch(store: str, args: argparse.Namespace, env: dict[str, str]) -> int:
    """Start the two ranks; rank 0 prints the rows."""
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--store",
                store,
                "--sizes",
                args.sizes,
                "--repeats",
                str(args.repeats),
                "--cold",
                args.cold,
                "--rows",
                str(args.rows),
            ],
            env={
                **os.environ,
                **env,
                "RANK": str(rank),
                "WORLD_SIZE": str(RANKS),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
            },
            stdout=None if rank == 0 else subprocess.DEVNULL,
        )
        for rank in range(RANKS)
    ]
    return max(process.wait() for process in ranks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,256", help="whole state sizes in MiB")
    parser.add_argument("--stores", default="file,s3", help="file and/or s3")
    parser.add_argument("--store", help=argparse.SUPPRESS)  # a rank's own store
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", help="where the file store writes (default: a disk, see medium)")
    parser.add_argument("--cold", default="auto", choices=COLD_METHODS, help="how to evict")
    parser.add_argument("--quick", action="store_true", help="16 MiB, 2 rounds: a check run")
    parser.add_argument(
        "--readme", type=Path, help="replace the gang-io table in this README with the run"
    )
    parser.add_argument("--rows", type=Path, help=argparse.SUPPRESS)  # rank 0 appends here
    args = parser.parse_args()
    if "RANK" in os.environ:
        return rank_main(args)
    check_block(args.readme, "gang-io")
    if args.quick:
        args.sizes, args.repeats = "16", 2
    if unknown := set(args.stores.split(",")) - {"file", "s3"}:
        parser.error(f"--stores {','.join(sorted(unknown))}: allowed are file and s3")
    print(
        f"sharded checkpoint I/O, {RANKS} ranks, {os.cpu_count()} CPUs, "
        f"median of {args.repeats} interleaved rounds; spotproof restores by {RESTORE_ROUTE}"
    )
    code = 0
    args.rows = Path(tempfile.mkstemp(prefix="gang-io-", suffix=".jsonl")[1])
    for store in args.stores.split(","):
        if store == "file":
            with open_medium(args.dir, prefix="spotproof-gang-bench-") as where:
                print(f"file store: {where.describe()}", flush=True)
                env = {"BENCH_ROOT": str(where.path), "BENCH_LABEL": where.label}
                code |= launch(store, args, env)
            continue
        with emulated(store) as bucket, bucket.apply():
            import botocore.session  # noqa: PLC0415

            botocore.session.get_session().create_client("s3").create_bucket(Bucket=BENCH_BUCKET)
            env = {**bucket.env, "BENCH_ROOT": f"s3://{BENCH_BUCKET}", "BENCH_LABEL": S3_LABEL}
            code |= launch(store, args, env)
    rows = []
    for line in args.rows.read_text().splitlines():
        title, limit, peer, seconds, targets = json.loads(line)
        rows.append(Row(title, limit, peer, seconds, [Target(r, a) for r, a in targets]))
    args.rows.unlink()
    if args.readme and not code:
        replace_block(args.readme, "gang-io", markdown(rows, OURS))
    return code


if __name__ == "__main__":
    sys.exit(main())
