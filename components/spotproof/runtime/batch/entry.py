"""A batch worker process: its environment, its queue, store and table, and the loop.

:func:`serve` is a whole worker. It reads its configuration from the environment
(:class:`WorkerConfig`: ``QUEUE_URL`` and ``RESULTS_URL``, required; ``GRACE_SECONDS``,
``LEASE_SECONDS``, ``BATCH_SIZE``, ``STOP_WHEN_IDLE``, ``STOP_AFTER_STORED``,
``MAX_DELIVERIES``, ``PROGRESS_SECONDS`` and ``RESULTS_TABLE``, each defined with its
meaning, default and range in ``spotproof.runtime.settings``), asks ``work`` for the
function that computes a result, opens the queue, the result store and the table, and runs
:func:`~spotproof.runtime.batch.worker.run_worker` under a :class:`PreemptionGuard` until
SIGTERM (or until the queue has been idle for ``STOP_WHEN_IDLE``).

A value out of its range or not a plain number (a fraction where whole seconds are meant),
a URL that cannot be opened and a queue that does not exist stop the worker at once: exit 2
(``BAD_CONFIG``), one line naming what is wrong. A store, table or queue that cannot be
reached now exits 1 (``STORAGE_UNAVAILABLE``: the Deployment restarts it). Output: one JSON
object per line (``started``, ``done``, ``already_done``, ``duplicate``, ``handed_back``,
``summary``...). ``python -m spotproof.runtime.batch MODULE:FUNCTION`` serves the work
that reference names (``__main__``, :func:`load_work`).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.runtime import exit_codes, metrics, settings
from spotproof.runtime.batch.items import QueueURLError, WorkItem
from spotproof.runtime.batch.queues import open_queue
from spotproof.runtime.batch.results import ResultStore
from spotproof.runtime.batch.table import TableUnavailable, TableURLError, open_table
from spotproof.runtime.batch.worker import run_worker
from spotproof.runtime.failures import Failure, classify
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.messages import first_line, redacted
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage import StorageError, StorageURLError, open_store

Process = Callable[[WorkItem], bytes]
Work = Callable[[Mapping[str, str]], Process]
"""Given the worker's environment, the function that computes an item's result. Called
once, before the queue is opened, so that what it loads is ready for the first item; a
``ConfigError`` it raises (a variable of its own that is wrong) exits 2 like the worker's."""


WORK_REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
"""``package.module:function``, as a worker's command names its work."""


def load_work(reference: str) -> Work:
    """The work factory ``reference`` (``package.module:function``) names, imported;
    :class:`ConfigError` when it is malformed, cannot be imported or is not callable."""
    if not WORK_REFERENCE.match(reference):
        raise ConfigError(
            f"work {reference!r} is not a reference; allowed: package.module:function, "
            "e.g. spotproof.smoke.batch_work:reference_work"
        )
    module_name, _, function = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigError(f"work {reference!r}: cannot import {module_name}: {error}") from None
    work = getattr(module, function, None)
    if not callable(work):
        raise ConfigError(f"work {reference!r}: {module_name} has no function {function}")
    return work


@dataclass(frozen=True)
class WorkerConfig:
    """A worker's configuration; each field is the variable of the same name in
    ``spotproof.runtime.settings``."""

    queue_url: str
    results_url: str
    grace_seconds: float
    lease_seconds: int
    batch_size: int
    stop_when_idle: float | None
    stop_after_stored: int | None
    max_deliveries: int | None
    progress_seconds: float
    results_table: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerConfig:
        """The configuration from ``env``; :class:`ConfigError` names the first variable
        that is missing, malformed or out of its range, and the range."""
        return cls(
            queue_url=settings.QUEUE_URL.read(env),
            results_url=settings.RESULTS_URL.read(env),
            grace_seconds=settings.GRACE_SECONDS.read(env),
            lease_seconds=settings.LEASE_SECONDS.read(env),
            batch_size=settings.BATCH_SIZE.read(env),
            stop_when_idle=settings.STOP_WHEN_IDLE.read(env),
            stop_after_stored=settings.STOP_AFTER_STORED.read(env),
            max_deliveries=settings.MAX_DELIVERIES.read(env),
            progress_seconds=settings.PROGRESS_SECONDS.read(env),
            results_table=settings.RESULTS_TABLE.read(env),
        )


def serve(work: Work, env: Mapping[str, str] = os.environ) -> int:
    """Run a worker configured by ``env`` until it stops; its exit code."""

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    try:
        config = WorkerConfig.from_env(env)
        served = metrics.served(env, metrics.names.BATCH)
        process = work(env)
    except ConfigError as error:
        print(f"batch worker: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    except Exception as error:
        return _work_failed(error)
    queue_url = config.queue_url
    try:
        queue = open_queue(config.queue_url)
        results = ResultStore(open_store(config.results_url))
        table = open_table(config.results_table) if config.results_table else None
    except (ConfigError, QueueURLError, StorageURLError, TableURLError) as error:
        print(f"batch worker: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    except (StorageError, TableUnavailable) as error:
        print(f"batch worker: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.STORAGE_UNAVAILABLE
    except Exception as error:
        return _queue_failed(queue_url, error)

    stored = 0
    recorder = metrics.WorkerMetrics(served.registry) if served else None

    def events(event: dict[str, Any]) -> None:
        nonlocal stored
        if recorder is not None:
            recorder.observe(event)
        emit(event)
        if event["event"] == "stored":
            stored += 1
            if stored == config.stop_after_stored:
                os.kill(os.getpid(), signal.SIGSTOP)  # frozen between the write and the ack

    emit({"event": "started", "pid": os.getpid()})
    with PreemptionGuard(config.grace_seconds) as guard:
        try:
            report = run_worker(
                queue,
                results,
                process,
                guard=guard,
                batch_size=config.batch_size,
                lease_seconds=config.lease_seconds,
                stop_when_idle=config.stop_when_idle,
                table=table,
                max_deliveries=config.max_deliveries,
                progress_seconds=config.progress_seconds,
                events=events,
                before_exit=lambda: last_scrape(served, guard),
            )
        except Exception as error:
            return _queue_failed(queue_url, error)
        if guard.preempted:
            last_scrape(served, guard)
    return report.exit_code


def last_scrape(served: metrics.Served | None, guard: PreemptionGuard) -> None:
    """The counts of a preempted worker's last moments, read before it leaves, within the
    grace left (``runtime.metrics.endpoint``)."""
    if served is not None:
        served.endpoint.await_scrape(metrics.last_scrape_budget(guard))


def _work_failed(error: Exception) -> int:
    """The work's own start-up failing (loading a model, say), told apart from the queue's:
    a store or service it could not reach may pass (1: the Deployment restarts the worker);
    an error no SDK raised is a bug in the work, and keeps its traceback."""
    if classify(error) is Failure.OTHER:
        raise error
    print(f"batch worker: work could not start: {first_line(error)}", file=sys.stderr)
    return exit_codes.STORAGE_UNAVAILABLE


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
