"""How much state a real preemption can save: the largest state that commits within the
notice, measured by growing it until a save misses.

    python benchmarks/capacity.py [--stores file,s3] [--notice 15] [--start-mb 256]
                                  [--max-mb 8192] [--dir DIR] [--quick]
                                  [--readme docs/performance.md]

Each trial starts the smoke trainer (``python -m spotproof.smoke.train``) with
``MODEL_MB`` of model + Adam state, lets it train two steps, sends SIGTERM and reads how
long it took from the signal to the committed final checkpoint (``since_signal``: the
step in flight finished, the state copied out, every part and the manifest written). The
state doubles until a trial misses ``--notice`` seconds (GKE's 15 s by default), then the
boundary is bisected twice. The figure is printed with the commit rate it implies, and
what that rate fits in each cloud's grace period.

``file`` is a directory on a disk-backed file system (``medium``), not the smoke harness's
``file`` store, which lives in ``/dev/shm`` where the machine has it: a "local disk" figure
measured in memory overstated it 2.5x or more. The row names the file system it ran on.
Each trial's checkpoint is deleted after it, so the disk holds one trial at a time.

The limit is the same medium's plain write of the same number of bytes (``write`` +
``fsync`` in 64 MiB pieces; on S3 bytes-only PUTs of 64 MiB parts four at a time, as in
``checkpoint_io``), timed once for the largest state that committed: the final save's
time over it is what the trainer's route (finish the step, copy out, checksum, commit)
costs beyond moving the bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from measure import check_block, replace_block
from medium import medium as open_medium
from stores import PART, Store, s3_io

from spotproof.catalog import GRACE_PERIOD_SECONDS
from spotproof.runtime.storage import open_store
from spotproof.smoke.emulation.object_stores import emulated
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.reports.records import last_words


def sigterm_to_commit(url: str, megabytes: int) -> float:
    env = {
        "CHECKPOINT_URL": url,
        "CHECKPOINT_INTERVAL": "1000000",
        "TOTAL_STEPS": "1000000",
        "MODEL_MB": str(megabytes),
        "GRACE_SECONDS": "600",  # measure how long it takes, not whether a kubelet waits
        "EMIT_STEPS": "1",
    }
    process = TrainerProcess(env, time.monotonic())
    process.wait_for(lambda e: e["event"] == "step" and e["step"] >= 2, timeout=1800)
    process.send(signal.SIGTERM)
    process.finish(timeout=1800)
    final = next((e for e in process.of("checkpoint") if e["kind"] == "final"), None)
    if final is None:  # no final save committed: this size does not fit, whatever the cause
        print(f"  {megabytes:6d} MiB: no final checkpoint ({last_words(process)})", flush=True)
        return float("inf")
    return float(final["since_signal"])


def largest_within(
    url_for: str, notice: float, start: int, ceiling: int, remove: Callable[[str], None]
) -> tuple[int, float]:
    """(MiB, seconds) of the largest state that committed within ``notice``."""
    trials: dict[int, float] = {}

    def trial(megabytes: int) -> bool:
        url = f"{url_for}/cap-{megabytes}"
        try:
            trials[megabytes] = sigterm_to_commit(url, megabytes)
        finally:
            remove(url)
        print(f"  {megabytes:6d} MiB: {trials[megabytes]:6.2f} s", flush=True)
        return trials[megabytes] <= notice

    passed, failed = 0, None
    size = start
    while size <= ceiling:
        if not trial(size):
            failed = size
            break
        passed, size = size, size * 2
    for _ in range(2):
        if failed is None or not passed:
            break
        middle = (passed + failed) // 2
        passed, failed = (middle, failed) if trial(middle) else (passed, middle)
    return passed, trials.get(passed, float("nan"))


def plain_write_seconds(url: str, megabytes: int, remove: Callable[[str], None]) -> float:
    """Seconds to write ``megabytes`` of bytes durably to ``url`` with no checkpointer."""
    piece = bytes(PART)
    pieces = -(-megabytes * 2**20 // PART)
    started = time.perf_counter()
    if url.startswith("file://"):
        path = Path(url.removeprefix("file://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb", buffering=0) as file:
            for _ in range(pieces):
                file.write(piece)
            os.fsync(file.fileno())
    else:
        put, _ = s3_io(Store("s3", url, "S3 emulator"))
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda i: put(f"{url}/part-{i}", piece), range(pieces)))
    elapsed = time.perf_counter() - started
    remove(url)
    return elapsed


@contextlib.contextmanager
def store_root(store: str, where: str | None) -> Iterator[tuple[str, str, Callable[[str], None]]]:
    """(URL root, label naming the medium, remover of one trial's checkpoints)."""
    if store == "file":
        with open_medium(where, prefix="spotproof-capacity-") as medium:
            print(f"file: {medium.describe()}", flush=True)

            def remove_dir(url: str) -> None:
                shutil.rmtree(Path(url.removeprefix("file://")), ignore_errors=True)

            yield f"file://{medium.path}", medium.label, remove_dir
        return
    with emulated(store) as bucket, bucket.apply():
        print(f"{store}: the emulator on loopback", flush=True)
        fs = open_store(bucket.url).fs

        def remove_objects(url: str) -> None:
            with contextlib.suppress(FileNotFoundError):
                fs.rm(url.split("://", 1)[1], recursive=True)

        yield bucket.url, f"{store.upper()} emulator", remove_objects


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="file,s3")
    parser.add_argument("--notice", type=float, default=15.0)
    parser.add_argument("--start-mb", type=int, default=256)
    parser.add_argument("--max-mb", type=int, default=8192)
    parser.add_argument("--dir", help="where the file store writes (default: a disk, see medium)")
    parser.add_argument("--quick", action="store_true", help="32 to 64 MiB within 2 s")
    parser.add_argument("--readme", type=Path, help="replace the capacity table in this file")
    args = parser.parse_args()
    check_block(args.readme, "capacity")
    if args.quick:
        args.notice, args.start_mb, args.max_mb = 2.0, 32, 64
    print(f"largest state committed within {args.notice:g} s of SIGTERM")
    table = [
        f"| medium | largest state committed within {args.notice:g} s of SIGTERM | "
        "SIGTERM to commit | the limit: plain durable write of as many bytes |",
        "| --- | --- | --- | --- |",
    ]
    for store in args.stores.split(","):
        with store_root(store, args.dir) as (url, label, remove):
            megabytes, seconds = largest_within(
                url, args.notice, args.start_mb, args.max_mb, remove
            )
            plain = plain_write_seconds(f"{url}/plain", megabytes, remove) if megabytes else 0
        if not megabytes:
            print(f"  => {label}: even {args.start_mb} MiB missed {args.notice:g} s")
            table.append(f"| {label} | under {args.start_mb} MiB | > {args.notice:g} s | - |")
            continue
        rate = megabytes / seconds
        fits = ", ".join(
            f"{cloud.value} {grace} s: ~{rate * grace:,.0f} MiB"
            for cloud, grace in GRACE_PERIOD_SECONDS.items()
        )
        print(
            f"  => {label}: {megabytes} MiB in {seconds:.1f} s ({rate:.0f} MiB/s); "
            f"at that rate {fits}"
        )
        print(
            f"  => the limit, a plain durable write of {megabytes} MiB there: {plain:.1f} s; "
            f"the final save took {seconds / plain:.2f}x that. No peer runs this trial (DCP has "
            f"no SIGTERM path); issue 31 sets no target for it (the memory tier is its answer)"
        )
        table.append(
            f"| {label} | **{megabytes} MiB** | {seconds:.1f} s ({rate:.0f} MiB/s) | "
            f"{plain:.1f} s ({seconds / plain:.2f}x) |"
        )
    if args.readme:
        replace_block(args.readme, "capacity", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
