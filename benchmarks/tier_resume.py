"""A reclaimed rank's resume: from its holder's replica (another node's memory) against the
bucket emulator, in the same run.

Two measurements, each with its method:

- **restore** (``--sizes``): the smoke trainer's model with its Adam moments
  (``measure.training_state``), captured as the trainer captures it (``StateBuffer``), saved
  to a holder, a separate process serving its tmpfs (``runtime.storage.peer``) as the
  surviving rank's node does, and to moto's S3 on loopback, the emulator the rest of the
  benchmarks use, each in parts sized as the trainer sizes them (``transfer.plan``). Both
  are read by the trainer's own restore: ``load_latest`` with
  ``in_place.into(model, optimizer)``, the manifest, then every part straight into the
  model's tensors, verified against its CRC32C. The limit is the same bytes read from the
  holder with plain ranged requests into a buffer already in memory, nothing verified.
  Medians of ``--rounds`` interleaved rounds, alternating which goes first. Moto keeps its
  objects in its own process's memory on this host, so it is a far faster bucket than a
  regional one over a node's network, and the peer's advantage a floor.
- **resume in a gang** (``--gang-sizes``): ``spotproof smoke --nodes 2 --tiers`` (the
  harness in this process, the ranks real processes, S3 emulator): in the same run, the
  replacement of a rank whose node was lost, which reads its shard from its holder, and
  the replacements after every node was lost, which read from the bucket; each from its
  start to its first step (interpreter, torch, rendezvous and restore), with the steps
  each loss cost.

Target (issue 31): a reclaimed rank resumes from a peer at least 3x faster than from the
bucket emulator at 512 MiB. Run: ``python benchmarks/tier_resume.py --sizes 64 512 2048
--gang-sizes 64 512`` (the model's state in MiB).
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from measure import check_block, replace_block, training_state
from stores import replica_holder

from spotproof.runtime.checkpointer import in_place, torch_state
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.storage.peer import PeerStore
from spotproof.smoke.emulation.object_stores import emulated
from spotproof.smoke.reports.records import SmokeConfig
from spotproof.smoke.runs.tiered import run_tiered_smoke

TARGET = 3.0
THREADS = 4


def _timed_restore(store: CheckpointStore, model: Any, optimizer: Any) -> float:
    started = time.perf_counter()
    loaded = store.load_latest(restore=in_place.into(model, optimizer))
    seconds = time.perf_counter() - started
    assert loaded is not None and loaded.step == 1
    return seconds


def _timed_plain_read(peer: PeerStore, buffer: memoryview) -> float:
    """The limit: every stored object of the replica into ``buffer``, ranged, unverified."""
    started = time.perf_counter()
    sizes = sorted(peer.sizes_under("steps").items())
    jobs, offset = [], 0
    for key, size in sizes:
        jobs.append((key, buffer[offset : offset + size]))
        offset += size
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda job: peer.read_into(job[0], job[1]), jobs))
    return time.perf_counter() - started


def restores(megabytes: int, rounds: int, holder: str, bucket_url: str) -> dict[str, float]:
    model, optimizer = training_state(megabytes)
    blobs = torch_state.StateBuffer().capture(model, optimizer, 1)
    size = sum(len(b) for b in blobs.values())
    url = f"{holder}/{megabytes}"
    peer = CheckpointStore(url, store=PeerStore(url), keep=1)
    bucket = CheckpointStore(f"{bucket_url}/{megabytes}", keep=1)
    for store in (peer, bucket):
        assert store.save(1, blobs).committed
    del blobs
    warm = memoryview(bytearray(size))
    contenders = {
        "peer": lambda: _timed_restore(peer, model, optimizer),
        "bucket": lambda: _timed_restore(bucket, model, optimizer),
        "limit": lambda: _timed_plain_read(PeerStore(url), warm),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(contenders[name]())
    return {name: statistics.median(values) for name, values in times.items()}


def restore_table(sizes: list[int], rounds: int) -> list[str]:
    lines = [
        "| restore of one rank's shard, into the model | from its holder's replica | "
        "from the bucket emulator | the limit: plain reads from the holder | "
        "bucket / peer | peer / limit |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    verdict = f"Target: from a peer {TARGET:g}x faster than from the bucket at 512 MiB: not run."
    with replica_holder() as url, emulated("s3") as bucket, bucket.apply():
        for megabytes in sizes:
            found = restores(megabytes, rounds, url, bucket.prefix("tiers"))
            peer, store, limit = found["peer"], found["bucket"], found["limit"]
            lines.append(
                f"| {megabytes} MiB | {peer:.3g} s | {store:.3g} s | {limit:.3g} s | "
                f"**{store / peer:.2f}x** | {peer / limit:.2f}x |"
            )
            if megabytes == 512:
                ratio = store / peer
                met = "met" if ratio >= TARGET else f"MISSED by {TARGET - ratio:.2f}"
                verdict = (
                    f"Target: from a peer {TARGET:g}x faster than from the bucket at "
                    f"512 MiB: {ratio:.2f}x, {met}."
                )
    return [*lines, "", verdict]


def gang_table(sizes: list[int]) -> list[str]:
    """``spotproof smoke --nodes 2 --tiers`` at each size: where each interruption's gang
    resumed from, and its stall (the interruption to the gang's next step, with the
    rehearsal's emulated one-second pod start)."""
    lines = [
        "| gang of 2, state | worker's node lost: read from | stall | steps lost "
        "| worker reclaimed: stall | steps lost | leader's node lost: read from | stall "
        "| steps lost |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for megabytes in sizes:
        config = SmokeConfig(
            store="s3", model_mb=megabytes, total_steps=200, interval=10, step_seconds=0
        )
        report = run_tiered_smoke(config, 2, progress=lambda _line: None)
        if report.failures:
            lines.append(f"| {megabytes} MiB | failed: {'; '.join(report.failures)[:200]} |")
            continue
        lost, reclaimed, leader = report.interruptions
        lines.append(
            f"| {megabytes} MiB | {', '.join(lost.resumed_tiers)} | {lost.stall_seconds:.1f} s "
            f"| {lost.steps_lost} | {reclaimed.stall_seconds:.1f} s | {reclaimed.steps_lost} "
            f"| {', '.join(leader.resumed_tiers)} | {leader.stall_seconds:.1f} s "
            f"| {leader.steps_lost} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[64, 512], help="MiB")
    parser.add_argument("--gang-sizes", type=int, nargs="*", default=[], help="MiB")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--readme", type=Path, help="replace the tier-resume tables there")
    args = parser.parse_args()
    check_block(args.readme, "tier-resume")
    lines: list[str] = []
    if args.sizes:
        lines += restore_table(args.sizes, args.rounds)
        print("\n".join(lines), flush=True)
    if args.gang_sizes:
        gang = gang_table(args.gang_sizes)
        print("\n".join(gang))
        lines += ["", *gang]
    if args.readme:
        replace_block(args.readme, "tier-resume", lines)


if __name__ == "__main__":
    main()
