"""``spotproof smoke --batch``: queue-fed workers preempted and killed on purpose.

Against a real queue emulator (moto server's SQS, the Cloud SDK's Pub/Sub emulator,
Azurite's queue service; ``smoke.emulation.queues``), the harness publishes ``items`` work
items (twice: the second publication must add nothing), computes the expected results with
a plain loop, and runs ``workers`` worker processes (``python -m spotproof.runtime.batch``,
a stack's default worker, serving the reference work of ``batch_work``) the way a
Deployment on spot nodes would, starting a replacement for each one stopped. While they
work it:

- **preempts** workers (SIGTERM): a worker hands back what it has not started at once and
  must exit ``PREEMPTED``;
- **kills** workers (SIGKILL) at random moments, and once **between "result written"
  and "ack"**: the worker freezes itself right after storing a result
  (``STOP_AFTER_STORED``) and is killed frozen, so the item is redelivered with its result
  already stored and must be acknowledged without being stored twice.

It passes only when every item has exactly one result, equal to the plain loop's; the
queue and its dead-letter queue are empty (nothing lost, nothing poisoned); and every
preempted worker exited ``PREEMPTED``. Work done twice is counted and reported.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from spotproof.runtime import exit_codes, settings
from spotproof.runtime.batch import ResultStore, WorkItem, WorkQueue, open_queue
from spotproof.runtime.batch.producer import publish
from spotproof.runtime.batch.table import open_table
from spotproof.runtime.metrics import Registry, WorkerMetrics
from spotproof.runtime.storage import open_store
from spotproof.smoke.batch_work import WORKER_COMMAND, result_of
from spotproof.smoke.emulation.databases import result_table
from spotproof.smoke.emulation.queues import emulated_queue
from spotproof.smoke.processes.trainer_process import TrainerProcess, container_exit_code
from spotproof.smoke.reports.records import Progress, last_words

QUEUE_NAME = "spotproof-batch"
MAX_RECEIVES = 5
"""Deliveries before the redrive policy moves an item to the dead-letter queue."""


@dataclass(frozen=True)
class BatchConfig:
    queue: str = "sqs"
    items: int = 40
    workers: int = 3
    preemptions: int = 2
    hard_kills: int = 2
    item_seconds: float = 0.05
    lease_seconds: int | None = None
    """Default: 3, or 10 on Pub/Sub, whose ack deadlines start at 10 s."""
    grace_seconds: float = 5.0
    seed: int = 0
    table: str = "sqlite"
    """Where results are also UPSERTed: ``sqlite``, ``postgres`` (a local server) or
    ``none``; the table must end with exactly the stored results."""


@dataclass
class BatchReport:
    config: BatchConfig
    failures: list[str] = field(default_factory=list)
    results: int = 0
    published_again: int = 0
    interruptions: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    """Counted from every worker's events, the killed ones' included: done, already done,
    computed twice, redelivered, handed back, acknowledgements refused."""
    dead_lettered: int = 0
    table_rows: int | None = None
    """Rows in the result table at the end (None: no table)."""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        return {
            "config": dataclasses.asdict(self.config),
            "passed": self.passed,
            "failures": self.failures,
            "results": self.results,
            "totals": self.totals,
            "dead_lettered": self.dead_lettered,
            "table_rows": self.table_rows,
            "interruptions": self.interruptions,
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        totals = ", ".join(f"{k} {v}" for k, v in sorted(self.totals.items()))
        verdict = "PASSED" if self.passed else "FAILED: " + "; ".join(self.failures)
        table = (
            f", {self.table_rows} rows in the {self.config.table} table"
            if self.table_rows is not None
            else ""
        )
        return (
            f"{self.results}/{self.config.items} results{table}, {totals}, dead-lettered "
            f"{self.dead_lettered}, in {self.seconds:.1f} s\n{verdict}"
        )


def items_of(config: BatchConfig) -> list[WorkItem]:
    return [WorkItem(f"item-{n:05d}", f"payload {config.seed}/{n}") for n in range(config.items)]


def lease_of(config: BatchConfig) -> int:
    return config.lease_seconds or (10 if config.queue == "pubsub" else 3)


def run_batch_smoke(
    config: BatchConfig, progress: Progress = print, metrics: Registry | None = None
) -> BatchReport:
    """The batch rehearsal; with ``metrics``, every worker's events are recorded as the
    worker's own metrics (``runtime.metrics``), one recorder per process as each pod has."""
    report = BatchReport(config)
    started = time.monotonic()
    lease = lease_of(config)
    with (
        tempfile.TemporaryDirectory(prefix="spotproof-batch-") as scratch,
        result_table(config.table, scratch) as table_url,
        emulated_queue(config.queue) as service,
        service.apply(),
    ):
        url, dead_url = service.create(QUEUE_NAME, MAX_RECEIVES)
        queue = open_queue(url)
        results_url = service.bucket.prefix("batch")
        store = open_store(results_url)
        results = ResultStore(store)
        items = items_of(config)
        first = publish(queue, store, results, items)
        again = publish(queue, store, results, items)
        report.published_again = again.published
        progress(
            f"queue: {config.queue} ({url}), results in {results_url}; published "
            f"{first.published} items, then {again.published}"
        )
        if again.published:
            report.failures.append(f"publishing again added {again.published} item(s)")
        expected = {item.id: result_of(item) for item in items}
        env = {
            **service.env,
            settings.QUEUE_URL.name: url,
            settings.RESULTS_URL.name: results_url,
            settings.GRACE_SECONDS.name: str(config.grace_seconds),
            settings.ITEM_SECONDS.name: str(config.item_seconds),
            settings.LEASE_SECONDS.name: str(lease),
            # Longer than a lease: a killed worker's items come back within one.
            settings.STOP_WHEN_IDLE.name: str(lease + 3),
            settings.MAX_DELIVERIES.name: str(MAX_RECEIVES),
            settings.PROGRESS_SECONDS.name: "2",
            **({settings.RESULTS_TABLE.name: table_url} if table_url else {}),
        }
        fleet = _Fleet(env, config, report, progress, metrics)
        fleet.run()
        if fleet.frozen_item is None:
            report.failures.append("no worker was killed between a result's write and its ack")
        _judge(report, results, expected, (queue, open_queue(dead_url)), fleet.started)
        if table_url:
            _judge_table(report, table_url, expected)
    report.seconds = time.monotonic() - started
    return report


class _Fleet:
    """The workers, kept at ``config.workers`` until the interruptions are all played."""

    def __init__(
        self,
        env: dict[str, str],
        config: BatchConfig,
        report: BatchReport,
        progress: Progress,
        metrics: Registry | None = None,
    ) -> None:
        self.env, self.config, self.report, self.progress = env, config, report, progress
        self.metrics = metrics
        self.origin = time.monotonic()
        self.started: list[TrainerProcess] = []
        schedule = random.Random(config.seed)
        kinds = ["preemption"] * config.preemptions + ["hard-kill"] * config.hard_kills
        schedule.shuffle(kinds)
        self.plan = kinds
        self.schedule = schedule
        self.frozen_item: str | None = None

    def start(self, **extra: str) -> TrainerProcess:
        recorder = WorkerMetrics(self.metrics) if self.metrics else None
        worker = TrainerProcess(
            {**self.env, **extra},
            self.origin,
            index=len(self.started),
            argv=WORKER_COMMAND,
            on_event=recorder.observe if recorder else None,
            on_end=recorder.gone if recorder else None,
        )
        self.started.append(worker)
        return worker

    def run(self) -> None:
        # The first worker freezes between its third stored result and that ack.
        aimed = self.start(**{settings.STOP_AFTER_STORED.name: "3"})
        running = [aimed, *(self.start() for _ in range(self.config.workers - 1))]
        if aimed.wait_for(lambda e: e["event"] == "stored", 60) is not None:
            self._frozen_kill(aimed)
            running[0] = self.start()
        for kind in self.plan:
            time.sleep(self.schedule.uniform(0.2, 0.6))
            victim = self.schedule.choice([w for w in running if w.popen.poll() is None] or running)
            self._interrupt(victim, kind)
            running[running.index(victim)] = self.start()
        for worker in running:
            code = worker.finish(timeout=120)
            if code != exit_codes.COMPLETED:
                self.report.failures.append(
                    f"worker {worker.index} ended with {code}: {last_words(worker)}"
                )

    def _frozen_kill(self, worker: TrainerProcess) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _state(worker.popen.pid) != "T":
            time.sleep(0.01)
        stored = worker.of("stored")
        worker.send(signal.SIGKILL)
        code = worker.finish()
        self.frozen_item = stored[-1]["id"] if stored else None
        self._record("hard-kill", worker, code, between_write_and_ack=bool(stored))

    def _interrupt(self, worker: TrainerProcess, kind: str) -> None:
        if kind == "preemption":
            worker.send(signal.SIGTERM)
            code = worker.finish(timeout=self.config.grace_seconds + 5)
            if code is None:
                worker.send(signal.SIGKILL)
                code = worker.finish()
            # SIGTERM before the worker set its handler also reads 143 to the runtime.
            reported = container_exit_code(code)
            if reported != exit_codes.PREEMPTED:
                self.report.failures.append(
                    f"preempted worker {worker.index} exited {reported}, not "
                    f"{exit_codes.PREEMPTED}: {last_words(worker)}"
                )
        else:
            worker.send(signal.SIGKILL)
            code = worker.finish()
        self._record(kind, worker, code)

    def _record(self, kind: str, worker: TrainerProcess, code: int | None, **extra: Any) -> None:
        handed = sum(len(e.get("ids", [])) for e in worker.of("handed_back"))
        entry = {
            "kind": kind,
            "worker": worker.index,
            "at": round(worker.now(), 3),
            "exit_code": code,
            "done": len(worker.of("done")),
            "handed_back": handed,
            **extra,
        }
        self.report.interruptions.append(entry)
        self.progress(
            f"  {kind} of worker {worker.index} at {entry['at']:.1f} s: exit {code}, "
            f"{entry['done']} done, {handed} handed back"
            + (" (frozen between result and ack)" if extra.get("between_write_and_ack") else "")
        )


def _state(pid: int) -> str:
    """The process state letter from ``/proc`` (``T``: stopped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


def _judge(
    report: BatchReport,
    results: ResultStore,
    expected: dict[str, bytes],
    queues: tuple[WorkQueue, WorkQueue],
    workers: list[TrainerProcess],
) -> None:
    stored = {item_id: results.get(item_id) for item_id in expected if results.exists(item_id)}
    report.results = len(stored)
    missing = sorted(set(expected) - set(stored))
    if missing:
        report.failures.append(f"{len(missing)} item(s) without a result, e.g. {missing[0]}")
    wrong = sorted(i for i, result in stored.items() if result != expected[i])
    if wrong:
        report.failures.append(f"{len(wrong)} result(s) differ from the plain loop's: {wrong[0]}")
    keys = results.store.list("results")
    if len(keys) != len(expected):
        report.failures.append(f"{len(keys)} result objects for {len(expected)} items")
    left, dead = (len(_waiting(q)) for q in queues)
    report.dead_lettered = dead
    for name, count in (("queue", left), ("dead-letter queue", dead)):
        if count:
            report.failures.append(f"{count} item(s) left on the {name}")
    events = [e for worker in workers for _, e in worker.events]
    outcomes = [e for e in events if e["event"] in ("done", "already_done", "duplicate")]
    report.totals = {
        "done": sum(e["event"] == "done" for e in outcomes),
        "already_done": sum(e["event"] == "already_done" for e in outcomes),
        "computed_twice": sum(e["event"] == "duplicate" for e in outcomes),
        "redelivered": sum(int(e.get("attempt", 1)) > 1 for e in outcomes),
        "handed_back": sum(len(e.get("ids", [])) for e in events if e["event"] == "handed_back"),
        "ack_failed": sum(e["event"] == "ack_failed" for e in events),
    }
    # A worker killed right after a write may not have told: fewer reports than results
    # is possible, more never (each create-only write succeeds once per item).
    writes = sum(e["event"] == "stored" for e in events)
    if writes > len(stored):
        report.failures.append(f"{writes} result writes succeeded for {len(stored)} results")


def _judge_table(report: BatchReport, url: str, expected: dict[str, bytes]) -> None:
    table = open_table(url)
    try:
        rows = table.rows()
    finally:
        table.close()
    report.table_rows = len(rows)
    if set(rows) != set(expected):
        missing, extra = set(expected) - set(rows), set(rows) - set(expected)
        report.failures.append(
            f"result table: {len(missing)} item(s) without a row, {len(extra)} unknown row(s)"
        )
    wrong = sorted(i for i, row in rows.items() if i in expected and row != expected[i])
    if wrong:
        report.failures.append(f"result table: {len(wrong)} row(s) differ, e.g. {wrong[0]}")


def _waiting(queue: WorkQueue) -> set[str]:
    """The ids still on ``queue``: pulled (and left leased) until two pulls come back empty."""
    seen: set[str] = set()
    empty = 0
    while empty < 2:
        leases = queue.pull(10, 30)
        empty = 0 if leases else empty + 1
        seen.update(lease.item.id for lease in leases)
    return seen
