"""The smoke-test batch worker: ``python -m spotproof.smoke.batch_worker``.

A queue-fed worker (``spotproof.runtime.batch``) whose ``process`` is deterministic: the
result of an item is its payload hashed ``ROUNDS`` times, after ``ITEM_SECONDS`` of
"inference", so any number of workers, interrupted any way, must end with the results of
a plain loop over the items.

Configuration (environment):

================== =================================================== ========= =============
QUEUE_URL          the work queue (``sqs://``, ``pubsub://``,           required
                   ``azqueue://``)
RESULTS_URL        where results go (file://, s3://, gs://, az://)      required
GRACE_SECONDS      budget from SIGTERM to SIGKILL                       15        1 to 86400
ITEM_SECONDS       time each item takes                                 0.05      0 to 86400
LEASE_SECONDS      whole seconds a pulled item stays hidden, extended   10        1 to 43200
                   while held (SQS's visibility timeout ends at 43200)
BATCH_SIZE         items pulled at a time                               4         1 to 1000
STOP_WHEN_IDLE     exit 0 after the queue has been empty this long      (never)   0 to 86400
STOP_AFTER_STORED  SIGSTOP itself once its Nth result is stored,        (never)   1 to 10^9
                   before the ack
RESULTS_TABLE      also UPSERT results into this table (sqlite:///,     (none)
                   postgresql://)
MAX_DELIVERIES     the queue's dead-letter limit, to count dead-        (unknown) 1 to 1000
                   lettered items
PROGRESS_SECONDS   how often a ``progress`` line gives the counts       30        1 to 86400
================== =================================================== ========= =============

Numbers are read strictly (``spotproof.runtime.variables``): a value outside its range,
or one that is not a plain number (a fraction where whole seconds are meant), stops the
worker before it starts, with exit 2 and one line naming it.

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
from spotproof.runtime.failures import Failure, classify
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.messages import first_line, redacted
from spotproof.runtime.storage import StorageError, StorageURLError, open_store
from spotproof.runtime.variables import ConfigError, Variables

ROUNDS = 1000
MAX_SECONDS = 86400
MAX_LEASE_SECONDS = 43200
"""SQS's largest visibility timeout (Pub/Sub's ack deadline stops at 600 and is clamped
there by ``pubsub``; Azure's visibility timeout goes to 7 days)."""


def result_of(item: WorkItem) -> bytes:
    """The deterministic answer for ``item``."""
    digest = item.payload.encode()
    for _ in range(ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return f"{item.id}:{digest.hex()}".encode()


def main() -> int:
    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    read = Variables(os.environ)
    queue_url = ""
    try:
        queue_url = read.required("QUEUE_URL", "an sqs://, pubsub:// or azqueue:// URL")
        results_url = read.required("RESULTS_URL", "a file://, s3://, gs:// or az:// URL")
        grace = read.number("GRACE_SECONDS", 15.0, 1, MAX_SECONDS)
        item_seconds = read.number("ITEM_SECONDS", 0.05, 0, MAX_SECONDS)
        lease = read.whole("LEASE_SECONDS", 10, 1, MAX_LEASE_SECONDS)
        batch = read.whole("BATCH_SIZE", 4, 1, 1000)
        idle = read.optional_number("STOP_WHEN_IDLE", 0, MAX_SECONDS)
        stop_after = read.optional_whole("STOP_AFTER_STORED", 1, 10**9) or 0
        deliveries = read.optional_whole("MAX_DELIVERIES", 1, 1000)
        progress = read.number("PROGRESS_SECONDS", 30.0, 1, MAX_SECONDS)
        table_url = read.text("RESULTS_TABLE")
        queue = open_queue(queue_url)
        results = ResultStore(open_store(results_url))
        table = open_table(table_url) if table_url else None
    except (ConfigError, QueueURLError, StorageURLError, TableURLError) as error:
        print(f"batch worker: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    except (StorageError, TableUnavailable) as error:
        print(f"batch worker: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.STORAGE_UNAVAILABLE
    except Exception as error:
        return _queue_failed(queue_url, error)

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
        try:
            report = run_worker(
                queue,
                results,
                process,
                guard=guard,
                batch_size=batch,
                lease_seconds=lease,
                stop_when_idle=idle,
                table=table,
                max_deliveries=deliveries,
                progress_seconds=progress,
                events=events,
            )
        except Exception as error:
            return _queue_failed(queue_url, error)
    return report.exit_code


def _queue_failed(queue_url: str, error: Exception) -> int:
    """An SDK's failure to reach the queue, as one line and an exit code: a queue that
    does not exist fails the worker for good (2); anything else may pass (1: the
    Deployment restarts it). An error no SDK raised is a bug, and keeps its traceback."""
    failure = classify(error)
    if failure is Failure.OTHER:
        raise error
    what = "does not exist" if failure is Failure.NOT_FOUND else failure.value
    print(
        f"batch worker: queue {redacted(queue_url)}: {what}: {first_line(error)}", file=sys.stderr
    )
    return exit_codes.BAD_CONFIG if failure is Failure.NOT_FOUND else exit_codes.STORAGE_UNAVAILABLE


if __name__ == "__main__":
    sys.exit(main())
