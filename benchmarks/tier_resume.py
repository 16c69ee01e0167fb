"""A reclaimed rank's restore: from its holder's replica (another node's memory) against
the bucket emulator, the same shard, in the same run.

The state is the smoke trainer's model with its Adam moments (``measure.training_state``),
captured as the trainer captures it (``StateBuffer``). The holder is a separate process
serving its memory (``runtime.storage.peer``), as the surviving rank's node does; the
bucket is moto's S3 on loopback, the emulator the rest of the benchmarks use. Both are
read by the trainer's own restore: ``CheckpointStore.load_latest`` with
``in_place.into(model, optimizer)``, the manifest, then every part straight into the
model's tensors, verified against its CRC32C. Medians of ``--rounds`` interleaved rounds,
alternating which goes first. The replica lives in the
holder's tmpfs, as in production; moto keeps its objects in its own process's memory, so
neither is read from a disk, and the bucket figure is a floor for a real bucket.

Target (issue 31): from a peer at least 3x faster than from the bucket emulator at
512 MiB. Run: ``python benchmarks/tier_resume.py --sizes 64 512 2048`` (the model's state in MiB).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

from measure import training_state

from spotproof.runtime.checkpointer import in_place, torch_state
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.storage.peer import PeerStore, ReplicaServer
from spotproof.smoke.emulators import emulated

TARGET = 3.0
PART_BYTES = 64 << 20


def _holder(directory: str, pipe: Connection) -> None:
    """The surviving rank's node: serves its memory until told to stop."""
    with ReplicaServer(directory) as server:
        pipe.send(server.url("rank-00001"))
        pipe.recv()
    shutil.rmtree(directory, ignore_errors=True)


def _timed_restore(store: CheckpointStore, model: Any, optimizer: Any) -> float:
    started = time.perf_counter()
    loaded = store.load_latest(restore=in_place.into(model, optimizer))
    seconds = time.perf_counter() - started
    assert loaded is not None and loaded.step == 1
    return seconds


def measure(megabytes: int, rounds: int, peer_url: str, bucket_url: str) -> tuple[float, float]:
    model, optimizer = training_state(megabytes)
    blobs = torch_state.StateBuffer().capture(model, optimizer, 1)
    peer_url = f"{peer_url}/{megabytes}"
    peer = CheckpointStore(peer_url, store=PeerStore(peer_url), part_bytes=PART_BYTES, keep=1)
    bucket = CheckpointStore(f"{bucket_url}/{megabytes}", part_bytes=PART_BYTES, keep=1)
    for store in (peer, bucket):
        assert store.save(1, blobs).committed
    del blobs
    times: dict[str, list[float]] = {"peer": [], "bucket": []}
    for round_ in range(rounds):
        order = [("peer", peer), ("bucket", bucket)]
        for name, store in order if round_ % 2 == 0 else reversed(order):
            times[name].append(_timed_restore(store, model, optimizer))
    return statistics.median(times["peer"]), statistics.median(times["bucket"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512], help="MiB")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    memory = tempfile.mkdtemp(
        prefix="holder-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    ours, theirs = multiprocessing.Pipe()
    holder = multiprocessing.get_context("spawn").Process(target=_holder, args=(memory, theirs))
    holder.start()
    peer_url = ours.recv()
    columns = [
        "restore of one rank's shard",
        "from its holder's replica",
        "from the bucket emulator",
    ]
    print("| " + " | ".join([*columns, "bucket / peer"]) + " |")
    print("| --- | --- | --- | --- |")
    verdicts = []
    try:
        with emulated("s3") as bucket, bucket.apply():
            for megabytes in args.sizes:
                peer_s, bucket_s = measure(megabytes, args.rounds, peer_url, bucket.prefix("tiers"))
                ratio = bucket_s / peer_s
                print(f"| {megabytes} MiB | {peer_s:.3g} s | {bucket_s:.3g} s | **{ratio:.2f}x** |")
                if megabytes == 512:
                    met = "met" if ratio >= TARGET else f"missed by {TARGET - ratio:.2f}"
                    verdicts.append(
                        f"peer restore {ratio:.2f}x faster than the bucket at 512 MiB "
                        f"(target {TARGET:g}x: {met})"
                    )
    finally:
        ours.send("stop")
        holder.join(10)
    for verdict in verdicts:
        print(verdict)


if __name__ == "__main__":
    main()
