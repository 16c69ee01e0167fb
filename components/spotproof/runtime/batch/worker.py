"""The worker loop: lease, look, compute, store, acknowledge; hand back on SIGTERM.

The package docstring gives the protocol. Threads: the main one computes items one by
one; a heartbeat extends every lease the worker holds each third of ``lease_seconds``, and
on SIGTERM hands back what has not been started and decides about the item in flight:
it is finished if the items done so far say it will end within the grace left, else it
is handed back too and the process exits at once (nothing it has half done is durable:
the result write is one create-only object).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spotproof.runtime import exit_codes
from spotproof.runtime.batch.items import Lease, WorkItem, WorkQueue
from spotproof.runtime.batch.results import ResultStore
from spotproof.runtime.batch.table import ResultTable
from spotproof.runtime.failures import Failure, classify
from spotproof.runtime.guard import PreemptionGuard

Events = Callable[[dict[str, Any]], None]
PULL_ATTEMPTS = 4
PULL_BACKOFF_SECONDS = 1.0
"""Pause before the second pull attempt; doubled before each one after."""
FINISH_MARGIN_SECONDS = 1.0
"""Grace kept back after the item in flight, for its result write and acknowledgement."""


@dataclass
class WorkerReport:
    done: int = 0
    """Results this worker stored."""
    already_done: int = 0
    """Deliveries whose result was already stored: acknowledged without computing."""
    duplicates: int = 0
    """Computed, but another delivery had stored the result first (work wasted)."""
    redelivered: int = 0
    """Deliveries after the first (a lease ran out, or a worker handed the item back)."""
    handed_back: int = 0
    failed: int = 0
    """Deliveries whose ``process`` raised: handed back for another try."""
    ack_failed: int = 0
    """Acknowledgements refused (the item comes back, its result already stored)."""
    dead_lettered: int = 0
    """Failures on an item's last allowed delivery: the queue dead-letters it."""
    rejected: int = 0
    """Deliveries of messages that are no work item: handed back untouched, so that the
    queue dead-letters them alone (``items.Lease.rejected``)."""
    exit_code: int = exit_codes.COMPLETED
    durations: list[float] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "done": self.done,
            "already_done": self.already_done,
            "duplicates": self.duplicates,
            "redelivered": self.redelivered,
            "handed_back": self.handed_back,
            "failed": self.failed,
            "ack_failed": self.ack_failed,
            "dead_lettered": self.dead_lettered,
            "rejected": self.rejected,
        }

    def summary(self) -> dict[str, Any]:
        return {"event": "summary", **self.counts(), "exit_code": self.exit_code}


class _Held:
    """The leases a worker holds, and which one it is computing; one lock for both."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: list[Lease] = []
        self.in_flight: Lease | None = None
        self.started = 0.0
        self.stopping = False

    def all(self) -> list[Lease]:
        return [*self.waiting, *([self.in_flight] if self.in_flight else [])]

    def next(self) -> Lease | None:
        with self.lock:
            if self.stopping or not self.waiting:
                return None
            self.in_flight = self.waiting.pop(0)
            self.started = time.monotonic()
            return self.in_flight


def run_worker(
    queue: WorkQueue,
    results: ResultStore,
    process: Callable[[WorkItem], bytes],
    *,
    guard: PreemptionGuard,
    batch_size: int = 4,
    lease_seconds: int = 30,
    stop_when_idle: float | None = None,
    table: ResultTable | None = None,
    max_deliveries: int | None = None,
    progress_seconds: float = 30.0,
    events: Events = lambda _event: None,
    before_exit: Callable[[], None] = lambda: None,
) -> WorkerReport:
    """Work until SIGTERM, or until the queue has been empty for ``stop_when_idle``
    seconds (None: never, as a Deployment's workers do).

    ``table``: also UPSERT each result there before acknowledging. ``max_deliveries``:
    the queue's dead-letter limit, so a failure on the last delivery is counted as
    dead-lettered. Every ``progress_seconds`` a ``progress`` event gives the counts so far
    and the items held (``in_flight``). ``before_exit``: called, within the grace, before
    the process exits at once on a SIGTERM whose item in flight cannot finish in time (the
    worker's metrics wait there for a last scrape)."""
    worker = _Worker(
        queue,
        results,
        process,
        guard,
        lease_seconds,
        events,
        table=table,
        max_deliveries=max_deliveries,
        progress_seconds=progress_seconds,
        before_exit=before_exit,
    )
    threading.Thread(target=worker.heartbeat, daemon=True).start()
    return worker.run(batch_size, stop_when_idle)


@dataclass
class _Worker:
    queue: WorkQueue
    results: ResultStore
    process: Callable[[WorkItem], bytes]
    guard: PreemptionGuard
    lease_seconds: int
    events: Events
    table: ResultTable | None = None
    max_deliveries: int | None = None
    progress_seconds: float = 30.0
    before_exit: Callable[[], None] = lambda: None
    report: WorkerReport = field(default_factory=WorkerReport)
    held: _Held = field(default_factory=_Held)

    def run(self, batch_size: int, stop_when_idle: float | None) -> WorkerReport:
        held, report = self.held, self.report
        idle_since: float | None = None
        while not self.guard.preempted:
            leases = self.pull(batch_size)
            if not leases:
                idle_since = idle_since or time.monotonic()
                if stop_when_idle is not None and time.monotonic() - idle_since >= stop_when_idle:
                    break
                continue
            idle_since = None
            self.reject([lease for lease in leases if lease.rejected])
            leases = [lease for lease in leases if not lease.rejected]
            if not leases:
                continue
            with held.lock:
                if held.stopping:  # SIGTERM came during the pull: these were never started
                    self.queue.release(leases)
                    report.handed_back += len(leases)
                    self.events(
                        {"event": "handed_back", "ids": [lease.item.id for lease in leases]}
                    )
                    break
                held.waiting = list(leases)
            self.events({"event": "leased", "ids": [lease.item.id for lease in leases]})
            while (lease := held.next()) is not None:
                self.work(lease)
                with held.lock:
                    held.in_flight = None
        with held.lock:
            held.stopping = True
        report.exit_code = exit_codes.PREEMPTED if self.guard.preempted else exit_codes.COMPLETED
        self.events(report.summary())
        return report

    def pull(self, batch_size: int) -> list[Lease]:
        """A pull, tried again after a transient failure (no answer, a server error) up
        to :data:`PULL_ATTEMPTS` times, with growing pauses; then the failure is raised."""
        for attempt in range(PULL_ATTEMPTS):
            try:
                return self.queue.pull(batch_size, self.lease_seconds)
            except Exception as error:
                transient = classify(error) in (Failure.UNREACHABLE, Failure.SERVER)
                if not transient or attempt == PULL_ATTEMPTS - 1 or self.guard.preempted:
                    raise
                self.events({"event": "pull_failed", "error": type(error).__name__})
                self.guard.wait(PULL_BACKOFF_SECONDS * 2**attempt)
        return []

    def reject(self, leases: list[Lease]) -> None:
        """Hand messages that are no work item back untouched: each goes to the queue's
        dead-letter path on its own deliveries, taking no good item with it."""
        if not leases:
            return
        with self.held.lock:
            self.queue.release(leases)
        for lease in leases:
            last = self.max_deliveries is not None and lease.attempt >= self.max_deliveries
            self.report.rejected += 1
            self.report.dead_lettered += last
            self.events(
                {
                    "event": "rejected",
                    "message": lease.item.id,
                    "attempt": lease.attempt,
                    "dead_lettered": last,
                    "reason": lease.rejected,
                }
            )

    def work(self, lease: Lease) -> None:
        item, report = lease.item, self.report
        if lease.attempt > 1:
            report.redelivered += 1
        if self.results.exists(item.id):
            if self.table is not None:  # the row may be what the earlier delivery missed
                self.table.upsert(item.id, self.results.get(item.id))
            self.acknowledge(lease)
            report.already_done += 1
            self.events({"event": "already_done", "id": item.id, "attempt": lease.attempt})
            return
        started = time.monotonic()
        try:
            result = self.process(item)
        except Exception as error:
            # Handed back, it is delivered again, and after the queue's limit of deliveries
            # it goes to the dead-letter queue: a poison item stops there.
            with self.held.lock:
                self.queue.release([lease])
            report.failed += 1
            last = self.max_deliveries is not None and lease.attempt >= self.max_deliveries
            report.dead_lettered += last
            self.events(
                {
                    "event": "failed",
                    "id": item.id,
                    "attempt": lease.attempt,
                    "dead_lettered": last,
                    "error": f"{type(error).__name__}: {error}",
                }
            )
            return
        stored = self.results.put(item.id, result)
        self.events({"event": "stored" if stored else "stored_before", "id": item.id})
        if self.table is not None:
            # The stored bytes, not ours: a duplicate may differ from the winner's result.
            self.table.upsert(item.id, result if stored else self.results.get(item.id))
        self.acknowledge(lease)
        report.durations.append(time.monotonic() - started)
        if stored:
            report.done += 1
        else:
            report.duplicates += 1
        self.events(
            {
                "event": "done" if stored else "duplicate",
                "id": item.id,
                "attempt": lease.attempt,
                "seconds": round(report.durations[-1], 3),
            }
        )

    def acknowledge(self, lease: Lease) -> None:
        """Acknowledge, never concurrently with an extension of the same lease. A failed
        acknowledgement (the lease ran out, a stale receipt) costs a redelivery that finds
        the result stored, so it is reported and the worker goes on."""
        try:
            with self.held.lock:
                self.queue.ack(lease)
        except Exception as error:
            self.report.ack_failed += 1
            self.events({"event": "ack_failed", "id": lease.item.id, "error": type(error).__name__})

    def heartbeat(self) -> None:
        held = self.held
        period = max(min(self.lease_seconds / 3, self.progress_seconds), 0.2)
        last_progress = time.monotonic()
        while True:
            signalled = self.guard.wait(period)
            if time.monotonic() - last_progress >= self.progress_seconds:
                last_progress = time.monotonic()
                with held.lock:
                    in_flight = len(held.all())
                self.events({"event": "progress", **self.report.counts(), "in_flight": in_flight})
            # Under the lock: some queues (Azure) give a new receipt on every extension,
            # and an acknowledgement with the one it replaced would fail.
            with held.lock:
                if signalled and not held.stopping:
                    held.stopping = True
                    self.hand_back()
                leases = held.all()
                if leases:
                    self.queue.extend(leases, self.lease_seconds)

    def hand_back(self) -> None:
        """On SIGTERM, with ``held.lock`` taken: release what was not started; keep the
        item in flight only if it is expected to finish within the grace left."""
        held, report = self.held, self.report
        waiting, held.waiting = held.waiting, []
        if waiting:
            self.queue.release(waiting)
            report.handed_back += len(waiting)
        lease = held.in_flight
        if waiting:
            self.events({"event": "handed_back", "ids": [w.item.id for w in waiting]})
        if lease is None:
            return
        elapsed = time.monotonic() - held.started
        expected = statistics.median(report.durations) if report.durations else None
        left = self.guard.remaining() - FINISH_MARGIN_SECONDS
        if expected is not None and expected - elapsed < left:
            self.events({"event": "finishing", "id": lease.item.id})
            return
        self.queue.release([lease])
        report.handed_back += 1
        report.exit_code = exit_codes.PREEMPTED
        self.events({"event": "handed_back", "ids": [lease.item.id], "in_flight": True})
        self.events(report.summary())
        sys.stdout.flush()
        self.before_exit()
        os._exit(exit_codes.PREEMPTED)  # the computation in flight cannot be stopped otherwise
