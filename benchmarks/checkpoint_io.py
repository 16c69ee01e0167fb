"""Checkpoint save and restore against the limit and PyTorch's own tools, in one run.

    python benchmarks/checkpoint_io.py [--sizes 64,512] [--stores file,s3] [--repeats 5]
                                       [--dir DIR] [--cold auto|fadvise|drop_caches]
                                       [--quick] [--readme docs/performance.md]

For each store and state size (model + Adam state, real tensors), every contender saves or
restores the same state, on the same medium, interleaved round-robin, median of
``--repeats`` rounds. Each round's save is a new checkpoint next to the previous one, which
stays intact (the one before is removed afterwards, untimed), for every contender alike:
overwriting the only checkpoint in place would leave none if the save died halfway.

- **spotproof**: ``StateBuffer.capture`` (its buffer prepared beforehand, as the trainer
  does) + ``CheckpointStore.save`` up to the commit, and, in the same rounds, its final
  save once training has stopped: ``StateBuffer.views`` (no copy of the state first) +
  ``save``, reported as a row of its own; restore is ``load_latest`` with
  the trainer's restore, in place where the runtime has it (``measure.restore_route``). Both include
  everything: the copy out of the model, CRC32C, the manifest commit.
- **DCP**: ``torch.distributed.checkpoint`` ``save`` with ``FileSystemWriter`` (disk) or
  ``FsspecWriter`` (S3) at ``thread_count`` 1 and 4, and ``load`` of each of those
  checkpoints. The readers take no thread count: in torch 2.13
  (``torch/distributed/checkpoint/filesystem.py``) ``FileSystemReader.__init__`` takes only
  the path, and ``read_data`` opens each file in turn in the calling thread; the rows name
  the checkpoint a load reads (1 file or 4), not a thread count.
- **torch.save / torch.load** of the same state dict (fsynced on disk; through s3fs on S3).
- **the limit**: plain I/O of the same number of bytes, the best of one object and 64 MiB
  parts four at a time: ``write`` + ``fsync`` and ``read`` on disk; on S3, botocore
  ``put_object``/``get_object`` moving bytes only (no checksum calculated or validated, see
  :func:`bytes_only_client`). s3fs's ``pipe_file``/``cat_file``, the path DCP and
  torch.save take there, are printed beside them but are not the limit.

The medium is a directory on a disk-backed file system (``medium``), named with its type in
every row. Restores from disk are measured twice: **cold**, each run's files evicted from
the page cache first (the method is printed), and **warm**, after a priming read of them,
for every contender alike. The S3 rows run against moto on loopback: its costs (a Python
server on the same CPUs, objects spooled to its temporary files) are in every contender's
figure, and its storage is not evicted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
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
    state_bytes,
    training_state,
)
from medium import COLD_METHODS, CacheState, Medium, choose_cold_method
from medium import medium as open_medium
from stores import BENCH_BUCKET, PART, S3_LABEL, Store, file_io, s3_io
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

from spotproof.runtime.checkpointer import torch_state
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.smoke.emulation.object_stores import emulated

OURS = "spotproof"
FROM_TENSORS = "spotproof, final save from the tensors"
"""``StateBuffer.views``: what a final save writes once training has stopped, with no copy
of the state first; measured in the same rounds as the captured save, its own row."""
TORCH_LOAD = "torch.load"
# Issue 31's targets, and the S3 ones the README held before it.
LOCAL_SAVE = [Target(1.10, LIMIT)]
LOCAL_RESTORE = [Target(1.0, TORCH_LOAD)]
S3_SAVE = [Target(1.05, LIMIT)]
S3_RESTORE = [Target(1.3, LIMIT)]


def state_dict(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return {"model": model.state_dict(), "optim": optimizer.state_dict()}


def rotating(save: Callable[[int], object], remove: Callable[[int], object]) -> Action:
    """Each round writes a new checkpoint and then removes the one before the previous,
    untimed: every contender keeps its last good checkpoint intact while it writes the
    next one (overwriting it in place would leave nothing if the save died halfway)."""

    def action(round_: int) -> float:
        started = time.perf_counter()
        save(round_)
        elapsed = time.perf_counter() - started
        if round_ >= 2:
            remove(round_ - 2)
        return elapsed

    return action


Contenders = tuple[dict[str, Action], dict[str, Action], dict[str, str]]
"""Save actions, restore actions, and the path each restore reads (for the cache state)."""


def spotproof_contenders(store: Store, model: Any, optimizer: Any) -> Contenders:
    checkpoints = CheckpointStore(store.url("spotproof"), keep=2)
    buffer = torch_state.StateBuffer()
    buffer.prepare(model, optimizer)

    def save(round_: int) -> None:
        blobs = buffer.capture(model, optimizer, round_)
        assert checkpoints.save(round_ + 1, blobs, prune=False).committed

    finals = CheckpointStore(store.url("spotproof-final"), keep=2)

    def save_final(round_: int) -> None:
        blobs = buffer.views(model, optimizer, round_)
        assert finals.save(round_ + 1, blobs, prune=False).committed

    # Retention deletes the same checkpoint the other contenders remove, also untimed.
    saves = {
        OURS: rotating(save, lambda _old: checkpoints.prune()),
        FROM_TENSORS: rotating(save_final, lambda _old: finals.prune()),
    }
    restores = {OURS: lambda _r: restore_latest(checkpoints, model, optimizer)}
    return saves, restores, {OURS: f"{store.root}/spotproof"}


def dcp_contenders(store: Store, model: Any, optimizer: Any, threads: int, last: int) -> Contenders:
    def path(round_: int) -> str:
        return f"{store.root}/dcp-{threads}/{round_}"

    def save(round_: int) -> None:
        kind = FileSystemWriter if store.name == "file" else FsspecWriter
        writer = kind(path(round_), thread_count=threads)
        dcp.save(state_dict(model, optimizer), storage_writer=writer, no_dist=True)

    def restore(_round: int) -> None:
        reader = FileSystemReader(path(last)) if store.name == "file" else FsspecReader(path(last))
        dcp.load(state_dict(model, optimizer), storage_reader=reader, no_dist=True)

    files = "1 file" if threads == 1 else f"{threads} files"
    load = f"DCP load, {files} (written with thread_count={threads})"
    return (
        {f"DCP save, thread_count={threads}": rotating(save, lambda old: store.remove(path(old)))},
        {load: restore},
        {load: path(last)},
    )


def torch_save_contenders(store: Store, model: Any, optimizer: Any, last: int) -> Contenders:
    def path(round_: int) -> str:
        return f"{store.root}/torch/{round_}.pt"

    def save(round_: int) -> None:
        with store.open(path(round_), "wb") as file:
            torch.save(state_dict(model, optimizer), file)
            if store.name == "file":
                file.flush()
                os.fsync(file.fileno())

    def restore(_round: int) -> None:
        with store.open(path(last), "rb") as file:
            loaded = torch.load(file, weights_only=True)
        model.load_state_dict(loaded["model"])
        optimizer.load_state_dict(loaded["optim"])

    return (
        {"torch.save": rotating(save, lambda old: store.remove(path(old)))},
        {TORCH_LOAD: restore},
        {TORCH_LOAD: path(last)},
    )


def plain_contenders(store: Store, payload: bytes, last: int) -> tuple[Contenders, Contenders]:
    """The limit, and on S3 the s3fs path beside it: the same number of bytes as one object
    and as 64 MiB parts written four at a time."""
    parts = [memoryview(payload)[i : i + PART] for i in range(0, len(payload), PART)]
    put, get = (file_io if store.name == "file" else s3_io)(store)

    def one(round_: int) -> str:
        return f"{store.root}/plain-1/{round_}"

    def part(round_: int, index: int) -> str:
        return f"{store.root}/plain-4/{round_}/part-{index}"

    def parallel(action: Callable[[int], object]) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(action, range(len(parts))))

    def put_parts(round_: int) -> None:
        parallel(lambda i: put(part(round_, i), parts[i]))

    def remove_parts(round_: int) -> None:
        parallel(lambda i: store.remove(part(round_, i)))

    unit = "stream" if store.name == "file" else "request, bytes only"
    units = "streams" if store.name == "file" else "requests, bytes only"
    read_1, read_4 = f"plain read, 1 {unit}", f"plain read, 4 {units}"
    limit = (
        {
            f"plain write, 1 {unit}": rotating(
                lambda r: put(one(r), payload), lambda r: store.remove(one(r))
            ),
            f"plain write, 4 {units}": rotating(put_parts, remove_parts),
        },
        {
            read_1: lambda _r: get(one(last)),
            read_4: lambda _r: parallel(lambda i: get(part(last, i))),
        },
        {read_1: one(last), read_4: f"{store.root}/plain-4/{last}"},
    )
    if store.name == "file":
        return limit, ({}, {}, {})
    fs = store.fs()
    return limit, (
        {
            "s3fs pipe_file (default checksums)": rotating(
                lambda r: fs.pipe_file(f"{one(r)}-s3fs", payload),
                lambda r: store.remove(f"{one(r)}-s3fs"),
            )
        },
        {"s3fs cat_file (default checksums)": lambda _r: fs.cat_file(f"{one(last)}-s3fs")},
        {},
    )


def measure(store: Store, megabytes: int, repeats: int) -> tuple[list[Row], list[str]]:
    model, optimizer = training_state(megabytes)
    size = state_bytes(model, optimizer)
    payload = os.urandom(size)
    groups = [
        spotproof_contenders(store, model, optimizer),
        dcp_contenders(store, model, optimizer, 1, repeats),
        dcp_contenders(store, model, optimizer, 4, repeats),
        torch_save_contenders(store, model, optimizer, repeats),
    ]
    limit, aside = plain_contenders(store, payload, repeats)
    saves = {name: a for group in [*groups, limit, aside] for name, a in group[0].items()}
    restores = {name: a for group in [*groups, limit, aside] for name, a in group[1].items()}
    paths = {name: p for group in [*groups, limit] for name, p in group[2].items()}
    peers = groups[1:]
    save_peers = [name for group in peers for name in group[0]]
    restore_peers = [name for group in peers for name in group[1]]
    mib = size / 2**20
    local = store.name == "file"
    save_row = Row(
        f"save {mib:.0f} MiB, {store.label}",
        list(limit[0]),
        save_peers,
        targets=LOCAL_SAVE if local else S3_SAVE,
    )
    timed = interleaved(saves, repeats)
    save_row.seconds = {name: t for name, t in timed.items() if name != FROM_TENSORS}
    final_row = Row(
        f"final save {mib:.0f} MiB from the tensors, {store.label}",
        list(limit[0]),
        save_peers,
        targets=LOCAL_SAVE if local else S3_SAVE,
    )
    final_row.seconds = {**save_row.seconds, OURS: timed[FROM_TENSORS]}
    if not local:
        row = Row(f"restore {mib:.0f} MiB, {store.label}", list(limit[1]), restore_peers)
        row.targets = S3_RESTORE
        row.seconds = interleaved(restores, repeats)
        notes = [f"  limit's S3 requests carrying a checksum: {store.unchecked_requests}"]
        return [save_row, final_row, row], notes
    rows, notes = [save_row, final_row], []
    for cold in (True, False):
        state = CacheState(paths, cold)
        row = Row(
            f"restore {mib:.0f} MiB, {store.label}, {'cold' if cold else 'warm'} page cache",
            list(limit[1]),
            restore_peers,
            targets=LOCAL_RESTORE,
        )
        row.seconds = interleaved(restores, repeats, before=state)
        rows.append(row)
        notes.append(state.describe())
    return rows, notes


def run_store(name: str, sizes: list[int], repeats: int, where: Medium | None) -> list[Row]:
    rows: list[Row] = []

    def show(found: list[Row], notes: list[str]) -> None:
        for row in found:
            print("\n".join(["", *report(row, OURS)]), flush=True)
        print("\n".join(notes), flush=True)
        rows.extend(found)

    if name == "file":
        assert where is not None
        for megabytes in sizes:
            root = where.path / str(megabytes)
            root.mkdir()
            show(*measure(Store("file", str(root), where.label), megabytes, repeats))
            shutil.rmtree(root, ignore_errors=True)
        return rows
    with emulated(name) as bucket, bucket.apply():
        import botocore.session  # noqa: PLC0415

        botocore.session.get_session().create_client("s3").create_bucket(Bucket=BENCH_BUCKET)
        for megabytes in sizes:
            store = Store(name, f"s3://{BENCH_BUCKET}/{megabytes}", S3_LABEL)
            show(*measure(store, megabytes, repeats))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,512", help="state sizes in MiB")
    parser.add_argument("--stores", default="file,s3", help="file and/or s3")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", help="where the file store writes (default: a disk, see medium)")
    parser.add_argument("--cold", default="auto", choices=COLD_METHODS, help="how to evict")
    parser.add_argument("--quick", action="store_true", help="16 MiB, 2 rounds: a check run")
    parser.add_argument(
        "--readme", type=Path, help="replace the checkpoint-io table in this file with the run"
    )
    args = parser.parse_args()
    check_block(args.readme, "checkpoint-io")
    if args.quick:
        args.sizes, args.repeats = "16", 2
    stores = args.stores.split(",")
    if unknown := set(stores) - {"file", "s3"}:
        parser.error(f"--stores {','.join(sorted(unknown))}: allowed are file and s3")
    warnings.filterwarnings("ignore")  # DCP warns that it runs without a process group
    torch.set_num_threads(1)
    choose_cold_method(args.cold)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"checkpoint I/O, {os.cpu_count()} CPUs, median of {args.repeats} interleaved rounds; "
        f"spotproof restores by {RESTORE_ROUTE}"
    )
    rows: list[Row] = []
    with open_medium(args.dir) as where:
        if "file" in stores:
            print(f"file store: {where.describe()}")
        for name in stores:
            rows += run_store(name, sizes, args.repeats, where if name == "file" else None)
    if args.readme:
        replace_block(args.readme, "checkpoint-io", markdown(rows, OURS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
