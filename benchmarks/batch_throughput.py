"""Queue-fed batch workers: throughput against a plain loop, and work wasted per reclaim.

    python benchmarks/batch_throughput.py [--queue sqs|pubsub|azure] [--items 200]
                                          [--item-ms 20] [--rounds 3]

Against the queue's emulator, with results in its cloud's store emulator:

- **throughput**: the same items, the same ``process`` (``--item-ms`` of "inference"
  plus the reference work's hashing) and the same result writes, done by a plain loop with
  no queue (the limit), by one worker process and by three, rounds interleaved; items/s
  and the ratio to the loop;
- **a reclaim**: one worker holding a batch of 4 items of 0.5 s is stopped after its
  second result, either by SIGTERM (spotproof's hand-back: what was not started is
  released at once, the item in flight finishes within the grace) or by SIGKILL (what a
  worker without a hand-back costs: the held items wait for their lease, the item in
  flight is lost). A replacement starts at once; the figures are the time until it gets
  the first of those items, and the item-seconds of work lost.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
import uuid

from spotproof.runtime.batch import ResultStore, WorkItem, open_queue
from spotproof.runtime.batch.producer import publish
from spotproof.runtime.storage import open_store
from spotproof.smoke.batch_work import WORKER_COMMAND, result_of
from spotproof.smoke.emulation.queues import QueueService, emulated_queue
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.runs.batch import BatchConfig, lease_of

RECLAIM_ITEM_SECONDS = 0.5


def _setup(service: QueueService, count: int) -> tuple[str, ResultStore, list[WorkItem]]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    url, _ = service.create(name, 5)
    results = ResultStore(open_store(service.bucket.prefix(name)))
    items = [WorkItem(f"{name}-{n}", f"payload {n}") for n in range(count)]
    return url, results, items


def _workers(
    service: QueueService, url: str, results: ResultStore, count: int, **env: str
) -> list[TrainerProcess]:
    origin = time.monotonic()
    return [
        TrainerProcess(
            {
                **service.env,
                "QUEUE_URL": url,
                "RESULTS_URL": results.store.url,
                "STOP_WHEN_IDLE": "3",
                **env,
            },
            origin,
            index=n,
            argv=WORKER_COMMAND,
        )
        for n in range(count)
    ]


def plain_loop(service: QueueService, count: int, item_seconds: float) -> float:
    _, results, items = _setup(service, count)
    started = time.monotonic()
    for item in items:
        time.sleep(item_seconds)
        results.put(item.id, result_of(item))
    return count / (time.monotonic() - started)


def queued(service: QueueService, count: int, item_seconds: float, workers: int) -> float:
    url, results, items = _setup(service, count)
    publish(open_queue(url), results.store, results, items)
    started = time.monotonic()
    fleet = _workers(service, url, results, workers, ITEM_SECONDS=str(item_seconds))
    for worker in fleet:
        worker.finish(600)
    # The last worker waits STOP_WHEN_IDLE before it exits; the work ended at its last item.
    ended = max(t for w in fleet for t, e in w.events if e["event"] == "done")
    return count / (ended + fleet[0].origin - started)


def reclaim(service: QueueService, signum: signal.Signals, lease: int) -> tuple[float, float]:
    """(seconds until a held item reached the replacement, item-seconds of work lost)."""
    url, results, items = _setup(service, 4)
    publish(open_queue(url), results.store, results, items)
    env = {
        "ITEM_SECONDS": str(RECLAIM_ITEM_SECONDS),
        "BATCH_SIZE": "4",
        "LEASE_SECONDS": str(lease),
        "GRACE_SECONDS": "5",
    }
    [first] = _workers(service, url, results, 1, **env)
    first.wait_for(lambda e: e["event"] == "done" and len(first.of("done")) >= 2, 60)
    time.sleep(RECLAIM_ITEM_SECONDS / 2)  # halfway into the third item
    stopped = time.monotonic()
    first.send(signum)
    first.finish(30)
    [second] = _workers(service, url, results, 1, **env)
    second.wait_for(lambda e: e["event"] == "leased", 120)
    leased = [t for t, e in second.events if e["event"] == "leased"]
    delay = second.origin + leased[0] - stopped if leased else float("nan")
    second.finish(120)
    # The item in flight started when the previous one was done; it is lost unless its
    # result was stored after the signal.
    done = [first.origin + t for t, e in first.events if e["event"] == "done"]
    lost = 0.0 if any(t > stopped for t in done) else stopped - max(done)
    return delay, lost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", choices=("sqs", "pubsub", "azure"), default="sqs")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--item-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    seconds = args.item_ms / 1000
    lease = lease_of(BatchConfig(queue=args.queue))
    rates: dict[str, list[float]] = {"plain loop": [], "1 worker": [], "3 workers": []}
    with emulated_queue(args.queue) as service, service.apply():
        for _ in range(args.rounds):
            rates["plain loop"].append(plain_loop(service, args.items, seconds))
            rates["1 worker"].append(queued(service, args.items, seconds, 1))
            rates["3 workers"].append(queued(service, args.items, seconds, 3))
        reclaims = {
            "SIGTERM, hand-back": [reclaim(service, signal.SIGTERM, lease) for _ in range(2)],
            "SIGKILL, no hand-back": [reclaim(service, signal.SIGKILL, lease) for _ in range(2)],
        }
    limit = statistics.median(rates["plain loop"])
    print(f"{args.queue}: {args.items} items of {args.item_ms:g} ms, {args.rounds} rounds")
    print("| how | items/s (median) | vs plain loop |")
    print("| --- | --- | --- |")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"| {name} | {rate:.1f} | {rate / limit:.2f}x |")
    print(f"\nreclaim of a worker holding 4 items of {RECLAIM_ITEM_SECONDS} s (lease {lease} s):")
    print("| how | held items back after | item-seconds lost |")
    print("| --- | --- | --- |")
    for name, runs in reclaims.items():
        delays = statistics.median(d for d, _ in runs)
        lost = statistics.median(w for _, w in runs)
        print(f"| {name} | {delays:.2f} s | {lost:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
