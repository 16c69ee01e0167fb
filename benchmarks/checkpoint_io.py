"""Checkpoint save and restore against the limit and PyTorch's own tools, in one run.

    python benchmarks/checkpoint_io.py [--sizes 64,512] [--stores file,s3] [--repeats 5]
                                       [--markdown FILE]

For each store and state size (model + Adam state, real tensors), every contender saves or
restores the same state, interleaved round-robin, median of ``--repeats`` rounds:

- **spotproof**: ``StateBuffer.capture`` (its buffer prepared beforehand, as the trainer
  does) + ``CheckpointStore.save`` up to the commit; ``load_latest`` + ``restore`` into
  the model. Both include everything: the copy out of the model, CRC32C, the manifest
  commit. Retention (deleting the checkpoint before last) runs after, untimed.
- **DCP**: ``torch.distributed.checkpoint`` ``save``/``load``, with ``FileSystemWriter`` on
  disk and ``FsspecWriter`` on S3, at 1 and 4 threads (single process, ``no_dist``).
- **torch.save / torch.load** of the same state dict (fsynced on disk; through s3fs on S3).
- **the limit**: plain I/O of the same number of bytes, the best of one stream and four
  parallel ones: ``write`` + ``fsync``, ``read``; botocore ``put_object``/``get_object``
  (and s3fs, the peer tools' own path).

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
from measure import Action, Row, interleaved, markdown, report, state_bytes, training_state
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

from spotproof.runtime import torch_state
from spotproof.runtime.checkpoint import CheckpointStore
from spotproof.runtime.storage import open_store
from spotproof.smoke.emulators import emulated

OURS = "spotproof"
PART = 64 << 20
BENCH_BUCKET = "spotproof-bench"  # unversioned, so overwritten rounds free their memory


class Store:
    """Where one store's contenders write: a local directory or the emulator's bucket."""

    def __init__(self, name: str, root: str) -> None:
        self.name, self.root = name, root

    def url(self, prefix: str) -> str:
        return f"file://{self.root}/{prefix}" if self.name == "file" else f"{self.root}/{prefix}"


def state_dict(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return {"model": model.state_dict(), "optim": optimizer.state_dict()}


def spotproof_contenders(store: Store, model: Any, optimizer: Any) -> tuple[Action, Action]:
    checkpoints = CheckpointStore(store.url("spotproof"), keep=2)
    buffer = torch_state.StateBuffer()
    buffer.prepare(model, optimizer)

    def save(round_: int) -> float:
        """Live model to committed checkpoint; retention runs after, untimed, as it does
        in the trainer (after reporting a periodic commit, never after a final one)."""
        started = time.perf_counter()
        result = checkpoints.save(round_ + 1, buffer.capture(model, optimizer, round_), prune=False)
        elapsed = time.perf_counter() - started
        assert result.committed
        checkpoints.prune()
        return elapsed

    def restore(_round: int) -> None:
        latest = checkpoints.load_latest()
        assert latest is not None
        torch_state.restore(model, optimizer, latest.blobs)

    return save, restore


def dcp_contenders(store: Store, model: Any, optimizer: Any, threads: int) -> tuple[Action, Action]:
    path = store.url(f"dcp-{threads}") if store.name != "file" else f"{store.root}/dcp-{threads}"

    def writer() -> Any:
        if store.name == "file":
            return FileSystemWriter(path, thread_count=threads)
        return FsspecWriter(path, thread_count=threads)

    def save(_round: int) -> None:
        dcp.save(state_dict(model, optimizer), storage_writer=writer(), no_dist=True)

    def restore(_round: int) -> None:
        reader = FileSystemReader(path) if store.name == "file" else FsspecReader(path)
        dcp.load(state_dict(model, optimizer), storage_reader=reader, no_dist=True)

    return save, restore


def torch_save_contenders(store: Store, model: Any, optimizer: Any) -> tuple[Action, Action]:
    if store.name == "file":
        path = f"{store.root}/torch.pt"

        def save(_round: int) -> None:
            with open(path, "wb") as file:
                torch.save(state_dict(model, optimizer), file)
                file.flush()
                os.fsync(file.fileno())

        def opened() -> Any:
            return open(path, "rb")
    else:
        fs = open_store(store.url("torch")).fs
        path = f"{store.root.removeprefix('s3://')}/torch/torch.pt"

        def save(_round: int) -> None:
            with fs.open(path, "wb") as file:
                torch.save(state_dict(model, optimizer), file)

        def opened() -> Any:
            return fs.open(path, "rb")

    def restore(_round: int) -> None:
        with opened() as file:
            loaded = torch.load(file, weights_only=True)
        model.load_state_dict(loaded["model"])
        optimizer.load_state_dict(loaded["optim"])

    return save, restore


def plain_contenders(store: Store, payload: bytes) -> tuple[dict[str, Action], dict[str, Action]]:
    """The limit: the same number of bytes, one stream and four parallel ones."""
    parts = [memoryview(payload)[i : i + PART] for i in range(0, len(payload), PART)]
    if store.name == "file":
        return _plain_file(store.root, payload, parts)
    return _plain_s3(store, payload, parts)


def _plain_file(
    root: str, payload: bytes, parts: list[memoryview]
) -> tuple[dict[str, Action], dict[str, Action]]:
    def write(path: str, data: memoryview | bytes) -> None:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view, done = memoryview(data), 0
            while done < len(view):
                done += os.write(descriptor, view[done:])
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def read(path: str) -> bytes:
        with open(path, "rb", buffering=0) as file:
            return file.read()

    names = [f"{root}/plain-part-{i}" for i in range(len(parts))]

    def parallel(action: Callable[[int], object]) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(action, range(len(parts))))

    saves = {
        "plain write + fsync, 1 stream": lambda _r: write(f"{root}/plain", payload),
        "plain write + fsync, 4 streams": lambda _r: parallel(lambda i: write(names[i], parts[i])),
    }
    restores = {
        "plain read, 1 stream": lambda _r: read(f"{root}/plain"),
        "plain read, 4 streams": lambda _r: parallel(lambda i: read(names[i])),
    }
    return saves, restores


def _plain_s3(
    store: Store, payload: bytes, parts: list[memoryview]
) -> tuple[dict[str, Action], dict[str, Action]]:
    import botocore.session  # noqa: PLC0415
    from botocore.config import Config  # noqa: PLC0415

    client = botocore.session.get_session().create_client(
        "s3", config=Config(max_pool_connections=16)
    )
    fs = open_store(store.url("plain")).fs
    chunks = [bytes(p) for p in parts]

    def parallel(action: Callable[[int], object]) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(action, range(len(chunks))))

    def put(key: str, data: bytes) -> None:
        client.put_object(Bucket=BENCH_BUCKET, Key=key, Body=data)

    def get(key: str) -> bytes:
        return client.get_object(Bucket=BENCH_BUCKET, Key=key)["Body"].read()

    saves = {
        "botocore put_object, 1 stream": lambda _r: put("plain/whole", payload),
        "botocore put_object, 4 streams": lambda _r: parallel(
            lambda i: put(f"plain/part-{i}", chunks[i])
        ),
        "s3fs pipe_file": lambda _r: fs.pipe_file(f"{BENCH_BUCKET}/plain/s3fs", payload),
    }
    restores = {
        "botocore get_object, 1 stream": lambda _r: get("plain/whole"),
        "botocore get_object, 4 streams": lambda _r: parallel(lambda i: get(f"plain/part-{i}")),
        "s3fs cat_file": lambda _r: fs.cat_file(f"{BENCH_BUCKET}/plain/s3fs"),
    }
    return saves, restores


def measure(store: Store, megabytes: int, repeats: int) -> list[Row]:
    model, optimizer = training_state(megabytes)
    size = state_bytes(model, optimizer)
    payload = os.urandom(size)
    where = "local disk" if store.name == "file" else "S3 emulator"
    ours = spotproof_contenders(store, model, optimizer)
    others = {
        "DCP, 1 thread": dcp_contenders(store, model, optimizer, 1),
        "DCP, 4 threads": dcp_contenders(store, model, optimizer, 4),
        "torch.save / torch.load": torch_save_contenders(store, model, optimizer),
    }
    plain_saves, plain_restores = plain_contenders(store, payload)
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
    parser.add_argument("--markdown", type=Path, help="also write the README table here")
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
    if args.markdown:
        args.markdown.write_text("\n".join(markdown(rows, OURS)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
