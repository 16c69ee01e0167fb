"""How much state a real preemption can save: the largest state that commits within the
notice, measured by growing it until a save misses.

    python benchmarks/capacity.py [--stores file,s3] [--notice 15] [--start-mb 256]
                                  [--max-mb 8192]

Each trial starts the smoke trainer (``python -m spotproof.smoke.train``) with
``MODEL_MB`` of model + Adam state, lets it train two steps, sends SIGTERM and reads how
long it took from the signal to the committed final checkpoint (``since_signal``: the
step in flight finished, the state copied out, every part and the manifest written). The
state doubles until a trial misses ``--notice`` seconds (GKE's 15 s by default), then the
boundary is bisected twice. The figure is printed with the commit rate it implies, and
what that rate fits in each cloud's grace period.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time

from spotproof.catalog import GRACE_PERIOD_SECONDS
from spotproof.smoke.emulators import emulated
from spotproof.smoke.process import TrainerProcess


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
    final = next(e for e in process.of("checkpoint") if e["kind"] == "final")
    return float(final["since_signal"])


def largest_within(url_for: str, notice: float, start: int, ceiling: int) -> tuple[int, float]:
    """(MiB, seconds) of the largest state that committed within ``notice``."""
    trials: dict[int, float] = {}

    def trial(megabytes: int) -> bool:
        trials[megabytes] = sigterm_to_commit(f"{url_for}/cap-{megabytes}", megabytes)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="file,s3")
    parser.add_argument("--notice", type=float, default=15.0)
    parser.add_argument("--start-mb", type=int, default=256)
    parser.add_argument("--max-mb", type=int, default=8192)
    args = parser.parse_args()
    print(f"largest state committed within {args.notice:g} s of SIGTERM")
    for store in args.stores.split(","):
        with emulated(store) as bucket, bucket.apply(), tempfile.TemporaryDirectory():
            print(f"{store}:", flush=True)
            megabytes, seconds = largest_within(bucket.url, args.notice, args.start_mb, args.max_mb)
        if not megabytes:
            print(f"  => even {args.start_mb} MiB missed {args.notice:g} s")
            continue
        rate = megabytes / seconds
        fits = ", ".join(
            f"{cloud.value} {grace} s: ~{rate * grace:,.0f} MiB"
            for cloud, grace in GRACE_PERIOD_SECONDS.items()
        )
        print(f"  => {megabytes} MiB in {seconds:.1f} s ({rate:.0f} MiB/s); at that rate {fits}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
