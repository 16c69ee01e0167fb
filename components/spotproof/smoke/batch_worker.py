"""The smoke-test batch worker: ``python -m spotproof.smoke.batch_worker``.

A queue-fed worker (``spotproof.runtime.batch``) whose ``process`` is deterministic: the
result of an item is its payload hashed ``ROUNDS`` times, after ``ITEM_SECONDS`` of
"inference", so any number of workers, interrupted any way, must end with the results of
a plain loop over the items.

Configuration (environment), each variable defined in ``spotproof.runtime.settings`` with
its meaning, default and range: ``QUEUE_URL`` and ``RESULTS_URL`` (required),
``GRACE_SECONDS``, ``ITEM_SECONDS``, ``LEASE_SECONDS``, ``BATCH_SIZE``, ``STOP_WHEN_IDLE``,
``STOP_AFTER_STORED``, ``RESULTS_TABLE``, ``MAX_DELIVERIES`` and ``PROGRESS_SECONDS``. A
value outside its range, or one that is not a plain number (a fraction where whole seconds
are meant), stops the worker before it starts, with exit 2 and one line naming it.

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

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.batch import ResultStore, WorkItem, open_queue, run_worker
from spotproof.runtime.batch.items import QueueURLError
from spotproof.runtime.batch.table import TableUnavailable, TableURLError, open_table
from spotproof.runtime.failures import Failure, classify
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.messages import first_line, redacted
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage import StorageError, StorageURLError, open_store

ROUNDS = 1000


def result_of(item: WorkItem) -> bytes:
    """The deterministic answer for ``item``."""
    digest = item.payload.encode()
    for _ in range(ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return f"{item.id}:{digest.hex()}".encode()


def main() -> int:
    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    env = os.environ
    queue_url = ""
    try:
        queue_url = settings.QUEUE_URL.read(env)
        results_url = settings.RESULTS_URL.read(env)
        grace = settings.GRACE_SECONDS.read(env)
        item_seconds = settings.ITEM_SECONDS.read(env)
        lease = settings.LEASE_SECONDS.read(env)
        batch = settings.BATCH_SIZE.read(env)
        idle = settings.STOP_WHEN_IDLE.read(env)
        stop_after = settings.STOP_AFTER_STORED.read(env) or 0
        deliveries = settings.MAX_DELIVERIES.read(env)
        progress = settings.PROGRESS_SECONDS.read(env)
        table_url = settings.RESULTS_TABLE.read(env)
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
