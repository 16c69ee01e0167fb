"""Final save and restore of a large checkpoint against the plain transfer of its bytes.

    python benchmarks/checkpoint_io.py [--mb 512] [--stores file,s3] [--repeats 3]

"Plain upload" is one fsspec ``pipe_file`` of the same bytes to the same store: what any
tool would pay to move them, with no parts, hashes or manifest. "Final save" is
``CheckpointStore.save`` (parts in parallel, sha256 of each, create-only manifest), the
work between SIGTERM and "committed" once the state is in memory. The trainer row is a
real SIGTERM to the smoke trainer holding that much state, end to end: it finishes the
step in flight, copies the state into its buffer and commits it.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable

from spotproof.runtime.checkpoint import CheckpointStore
from spotproof.runtime.storage import open_store
from spotproof.smoke.emulators import emulated
from spotproof.smoke.process import TrainerProcess


def best_of(repeats: int, action: Callable[[int], object]) -> float:
    """Median of ``repeats`` timed runs after one untimed warm-up (first-touch memory costs
    are large and erratic on small VMs)."""
    action(repeats)
    times = []
    for attempt in range(repeats):
        started = time.perf_counter()
        action(attempt)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def trainer_final_save(url: str, megabytes: int) -> tuple[float, int]:
    """SIGTERM a real trainer holding ``megabytes`` of state; seconds until committed."""
    env = {
        "CHECKPOINT_URL": url,
        "CHECKPOINT_INTERVAL": "1000000",
        "TOTAL_STEPS": "1000000",
        "MODEL_MB": str(megabytes),
        "EMIT_STEPS": "1",
    }
    process = TrainerProcess(env, time.monotonic())
    process.wait_for(lambda e: e["event"] == "step" and e["step"] >= 2, timeout=600)
    process.send(signal.SIGTERM)
    process.finish(timeout=600)
    final = next(e for e in process.of("checkpoint") if e["kind"] == "final")
    return float(final["since_signal"]), int(final["bytes"])


def measure(store_name: str, megabytes: int, repeats: int) -> None:
    payload = os.urandom(megabytes * 2**20)
    with emulated(store_name) as bucket, bucket.apply():
        plain = open_store(bucket.prefix("plain"))
        checkpoints = CheckpointStore(bucket.prefix("checkpoints"), keep=repeats + 2)

        upload = best_of(repeats, lambda i: plain.fs.pipe_file(plain.path(f"blob-{i}"), payload))
        if store_name == "file":

            def durable(i: int) -> None:
                with open(plain.path(f"durable-{i}"), "wb") as file:
                    file.write(payload)
                    file.flush()
                    os.fsync(file.fileno())

            durable_upload = best_of(repeats, durable)
        save = best_of(repeats, lambda i: checkpoints.save(i + 10, {"state": payload}))
        download = best_of(repeats, lambda i: plain.fs.cat_file(plain.path(f"blob-{i}")))
        restore = best_of(repeats, lambda _i: checkpoints.load_latest())
        sigterm, state_bytes = trainer_final_save(bucket.prefix("trainer"), megabytes)

    rate = megabytes / upload
    print(f"\n{store_name}: {megabytes} MiB, median of {repeats}")
    print(f"  plain upload      {upload:7.2f} s  ({rate:6.0f} MiB/s)")
    if store_name == "file":
        print(f"  plain + fsync     {durable_upload:7.2f} s")
    print(f"  final save        {save:7.2f} s  ratio {save / upload:5.2f}x plain upload", end="")
    print(f", {save / durable_upload:5.2f}x plain + fsync" if store_name == "file" else "")
    print(
        f"  trainer SIGTERM   {sigterm:7.2f} s  ratio {sigterm / upload:5.2f}x plain upload "
        f"(step finished, {state_bytes / 2**20:.0f} MiB captured and committed)"
    )
    print(f"  plain download    {download:7.2f} s")
    print(f"  verified restore  {restore:7.2f} s  ratio {restore / download:5.2f}x plain download")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--stores", default="file,s3")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"checkpoint I/O, {os.cpu_count()} CPUs")
    for store in args.stores.split(","):
        measure(store, args.mb, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
