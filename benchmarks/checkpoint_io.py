"""Checkpoint save and restore against the limit and PyTorch's own tools, in one run.

    python benchmarks/checkpoint_io.py [--sizes 64,512] [--stores file,s3] [--repeats 5]
                                       [--readme README.md]

For each store and state size (model + Adam state, real tensors), every contender saves or
restores the same state, interleaved round-robin, median of ``--repeats`` rounds. Each
round's save is a new checkpoint next to the previous one, which stays intact (the one
before is removed afterwards, untimed), for every contender alike: overwriting the only
checkpoint in place would leave none if the save died halfway.

- **spotproof**: ``StateBuffer.capture`` (its buffer prepared beforehand, as the trainer
  does) + ``CheckpointStore.save`` up to the commit; ``load_latest`` + ``restore`` into
  the model. Both include everything: the copy out of the model, CRC32C, the manifest
  commit. Retention is the untimed removal.
- **DCP**: ``torch.distributed.checkpoint`` ``save``/``load``, with ``FileSystemWriter`` on
  disk and ``FsspecWriter`` on S3, at 1 and 4 threads (single process, ``no_dist``).
- **torch.save / torch.load** of the same state dict (fsynced on disk; through s3fs on S3).
- **the limit**: plain I/O of the same number of bytes, the best of one object and 64 MiB
  parts four at a time: ``write`` + ``fsync`` and ``read`` on disk, botocore
  ``put_object``/``get_object`` on S3 (and s3fs, the path DCP and torch.save take there).

On disk, saves are durable (fsynced) and restores read from a warm page cache, for every
contender alike. The S3 rows run against moto on loopback: its costs (a Python server on
the same two CPUs) are in every contender's figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from measure import (
    Action,
    Row,
    interleaved,
    markdown,
    replace_block,
    report,
    state_bytes,
    training_state,
)
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

from spotproof.runtime.checkpointer import torch_state
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.storage import open_store
from spotproof.smoke.emulators import emulated

OURS = "spotproof"
PART = 64 << 20
BENCH_BUCKET = "spotproof-bench"  # unversioned, so removed rounds free moto's memory


class Store:
    """Where one store's contenders write: a local directory or the emulator's bucket."""

    def __init__(self, name: str, root: str) -> None:
        self.name, self.root = name, root

    def url(self, prefix: str) -> str:
        return f"file://{self.root}/{prefix}" if self.name == "file" else f"{self.root}/{prefix}"

    def fs(self) -> Any:
        return open_store(self.url("any")).fs

    def client(self) -> Any:
        import botocore.session  # noqa: PLC0415
        from botocore.config import Config  # noqa: PLC0415

        config = Config(max_pool_connections=16)
        return botocore.session.get_session().create_client("s3", config=config)

    def open(self, path: str, mode: str) -> Any:
        if self.name == "file":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return open(path, mode)
        return self.fs().open(path.removeprefix("s3://"), mode)

    def remove(self, path: str) -> None:
        if self.name == "file":
            target = Path(path)
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        else:
            self.fs().rm(path.removeprefix("s3://"), recursive=True)


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


def spotproof_contenders(store: Store, model: Any, optimizer: Any) -> tuple[Action, Action]:
    checkpoints = CheckpointStore(store.url("spotproof"), keep=2)
    buffer = torch_state.StateBuffer()
    buffer.prepare(model, optimizer)

    def save(round_: int) -> None:
        blobs = buffer.capture(model, optimizer, round_)
        assert checkpoints.save(round_ + 1, blobs, prune=False).committed

    def restore(_round: int) -> None:
        latest = checkpoints.load_latest()
        assert latest is not None
        torch_state.restore(model, optimizer, latest.blobs)

    # Retention deletes the same checkpoint the other contenders remove, also untimed.
    return rotating(save, lambda _old: checkpoints.prune()), restore


def dcp_contenders(
    store: Store, model: Any, optimizer: Any, threads: int, last: int
) -> tuple[Action, Action]:
    def path(round_: int) -> str:
        return f"{store.root}/dcp-{threads}/{round_}"

    def save(round_: int) -> None:
        writer = (
            FileSystemWriter(path(round_), thread_count=threads)
            if store.name == "file"
            else FsspecWriter(path(round_), thread_count=threads)
        )
        dcp.save(state_dict(model, optimizer), storage_writer=writer, no_dist=True)

    def restore(_round: int) -> None:
        reader = FileSystemReader(path(last)) if store.name == "file" else FsspecReader(path(last))
        dcp.load(state_dict(model, optimizer), storage_reader=reader, no_dist=True)

    return rotating(save, lambda old: store.remove(path(old))), restore


def torch_save_contenders(
    store: Store, model: Any, optimizer: Any, last: int
) -> tuple[Action, Action]:
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

    return rotating(save, lambda old: store.remove(path(old))), restore


def plain_contenders(
    store: Store, payload: bytes, last: int
) -> tuple[dict[str, Action], dict[str, Action]]:
    """The limit: the same number of bytes as one object and as 64 MiB parts written four
    at a time; on S3 also through s3fs, the path DCP and torch.save take there."""
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

    streams = "stream" if store.name == "file" else "request"
    saves = {
        f"plain write, 1 {streams}": rotating(
            lambda r: put(one(r), payload), lambda r: store.remove(one(r))
        ),
        f"plain write, 4 {streams}s": rotating(put_parts, remove_parts),
    }
    restores = {
        f"plain read, 1 {streams}": lambda _r: get(one(last)),
        f"plain read, 4 {streams}s": lambda _r: parallel(lambda i: get(part(last, i))),
    }
    if store.name != "file":
        fs = store.fs()
        saves["s3fs pipe_file"] = rotating(
            lambda r: fs.pipe_file(f"{one(r)}-s3fs", payload),
            lambda r: store.remove(f"{one(r)}-s3fs"),
        )
        restores["s3fs cat_file"] = lambda _r: fs.cat_file(f"{one(last)}-s3fs")
    return saves, restores


def file_io(store: Store) -> tuple[Callable[[str, Any], None], Callable[[str], bytes]]:
    def put(path: str, data: memoryview | bytes) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view, done = memoryview(data), 0
            while done < len(view):
                done += os.write(descriptor, view[done:])
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def get(path: str) -> bytes:
        with open(path, "rb", buffering=0) as file:
            return file.read()

    return put, get


def s3_io(store: Store) -> tuple[Callable[[str, Any], None], Callable[[str], bytes]]:
    client = store.client()

    def put(path: str, data: memoryview | bytes) -> None:
        bucket, key = path.removeprefix("s3://").split("/", 1)
        client.put_object(Bucket=bucket, Key=key, Body=bytes(data))

    def get(path: str) -> bytes:
        bucket, key = path.removeprefix("s3://").split("/", 1)
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()

    return put, get


def measure(store: Store, megabytes: int, repeats: int) -> list[Row]:
    model, optimizer = training_state(megabytes)
    size = state_bytes(model, optimizer)
    payload = os.urandom(size)
    where = "local disk" if store.name == "file" else "S3 emulator"
    ours = spotproof_contenders(store, model, optimizer)
    others = {
        "DCP, 1 thread": dcp_contenders(store, model, optimizer, 1, repeats),
        "DCP, 4 threads": dcp_contenders(store, model, optimizer, 4, repeats),
        "torch.save / torch.load": torch_save_contenders(store, model, optimizer, repeats),
    }
    plain_saves, plain_restores = plain_contenders(store, payload, repeats)
    saves = {OURS: ours[0], **{name: pair[0] for name, pair in others.items()}, **plain_saves}
    restores = {OURS: ours[1], **{name: pair[1] for name, pair in others.items()}}
    restores |= plain_restores
    mib = size / 2**20
    rows = [
        Row(f"save {mib:.0f} MiB, {where}", list(plain_saves), list(others)),
        Row(f"restore {mib:.0f} MiB, {where}", list(plain_restores), list(others)),
    ]
    rows[0].seconds = interleaved(saves, repeats)
    rows[1].seconds = interleaved(restores, repeats)
    return rows


def run_store(name: str, sizes: list[int], repeats: int) -> list[Row]:
    rows: list[Row] = []
    if name == "file":
        root = tempfile.mkdtemp(prefix="spotproof-bench-", dir=os.environ.get("BENCH_DIR"))
        try:
            for megabytes in sizes:
                Path(root, str(megabytes)).mkdir()
                rows += measure(Store("file", f"{root}/{megabytes}"), megabytes, repeats)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return rows
    with emulated(name) as bucket, bucket.apply():
        import botocore.session  # noqa: PLC0415

        botocore.session.get_session().create_client("s3").create_bucket(Bucket=BENCH_BUCKET)
        for megabytes in sizes:
            rows += measure(Store(name, f"s3://{BENCH_BUCKET}/{megabytes}"), megabytes, repeats)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,512", help="state sizes in MiB")
    parser.add_argument("--stores", default="file,s3", help="file and/or s3")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--readme", type=Path, help="replace the checkpoint-io table in this README with the run"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # DCP warns that it runs without a process group
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"checkpoint I/O, {os.cpu_count()} CPUs, median of {args.repeats} interleaved rounds")
    rows: list[Row] = []
    for name in args.stores.split(","):
        for row in run_store(name, sizes, args.repeats):
            print("\n".join(["", *report(row, OURS)]), flush=True)
            rows.append(row)
    if args.readme:
        replace_block(args.readme, "checkpoint-io", markdown(rows, OURS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
