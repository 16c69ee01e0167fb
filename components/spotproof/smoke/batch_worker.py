"""The smoke-test batch worker: ``python -m spotproof.smoke.batch_worker``.

A queue-fed worker (``spotproof.runtime.batch``) whose ``process`` is deterministic: the
result of an item is its payload hashed ``ROUNDS`` times, after ``ITEM_SECONDS`` of
"inference", so any number of workers, interrupted any way, must end with the results of
a plain loop over the items.

Configuration (environment):

================== ========================================================== =========
QUEUE_URL          the work queue (``sqs://``, ``pubsub://``, ``azqueue://``)   required
RESULTS_URL        where results go (file://, s3://, gs://, az://)              required
GRACE_SECONDS      budget from SIGTERM to SIGKILL                               15
ITEM_SECONDS       time each item takes                                          0.05
LEASE_SECONDS      how long a pulled item stays hidden, extended while held      10
BATCH_SIZE         items pulled at a time                                        4
STOP_WHEN_IDLE     exit 0 after the queue has been empty this long (seconds)     (never)
STOP_AFTER_STORED  SIGSTOP itself once its Nth result is stored, before the ack  (never)
RESULTS_TABLE      also UPSERT results into this table (sqlite:///, postgresql://) (none)
MAX_DELIVERIES     the queue's dead-letter limit, to count dead-lettered items     (unknown)
PROGRESS_SECONDS   how often a ``progress`` line gives the counts                  30
================== ========================================================== =========

Output: one JSON object per line (``done``, ``already_done``, ``duplicate``,
``handed_back``, ``summary``...). Exit codes: ``spotproof.runtime.exit_codes``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from typing import Any

from spotproof.runtime import exit_codes
from spotproof.runtime.batch import ResultStore, WorkItem, open_queue, run_worker
from spotproof.runtime.batch.queues import QueueURLError
from spotproof.runtime.batch.table import TableUnavailable, TableURLError, open_table
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.storage import StorageError, StorageURLError, open_store

ROUNDS = 1000


def result_of(item: WorkItem) -> bytes:
    """The deterministic answer for ``item``."""
    digest = item.payload.encode()
    for _ in range(ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return f"{item.id}:{digest.hex()}".encode()


def _number(name: str, default: float | None) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = float(raw)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{name}={raw!r}; allowed: a finite number of 0 or more")
    return value


def main() -> int:
    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    try:
        queue_url, results_url = os.environ["QUEUE_URL"], os.environ["RESULTS_URL"]
        grace = _number("GRACE_SECONDS", 15.0) or 15.0
        item_seconds = _number("ITEM_SECONDS", 0.05) or 0.0
        lease = int(_number("LEASE_SECONDS", 10) or 10)
        batch = max(1, int(_number("BATCH_SIZE", 4) or 4))
        idle = _number("STOP_WHEN_IDLE", None)
        stop_after = int(_number("STOP_AFTER_STORED", 0) or 0)
        deliveries = _number("MAX_DELIVERIES", None)
        progress = _number("PROGRESS_SECONDS", 30.0) or 30.0
        queue = open_queue(queue_url)
        results = ResultStore(open_store(results_url))
        table_url = os.environ.get("RESULTS_TABLE")
        table = open_table(table_url) if table_url else None
    except KeyError as missing:
        print(f"batch worker: {missing.args[0]} is required", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    except (ValueError, QueueURLError, StorageURLError, TableURLError) as error:
        print(f"batch worker: {error}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    except (StorageError, TableUnavailable) as error:
        print(f"batch worker: {error}", file=sys.stderr)
        return exit_codes.STORAGE_UNAVAILABLE

    stored = 0

    def events(event: dict[str, Any]) -> None:
        nonlocal stored
        emit(event)
        if event["event"] == "stored":
            stored += 1
            if stored == stop_after:
                os.kill(os.getpid(), signal.SIGSTOP)  # frozen between the write and the ack

    def process(item: WorkItem) -> bytes:
        time.sleep(item_seconds)
        return result_of(item)

    emit({"event": "started", "pid": os.getpid()})
    with PreemptionGuard(grace) as guard:
        report = run_worker(
            queue,
            results,
            process,
            guard=guard,
            batch_size=batch,
            lease_seconds=lease,
            stop_when_idle=idle,
            table=table,
            max_deliveries=int(deliveries) if deliveries else None,
            progress_seconds=progress,
            events=events,
        )
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
