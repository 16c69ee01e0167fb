"""Events to metrics: what the trainer and the batch worker record, in one place.

The trainers and the worker already say what happens as events, one dict each (the smoke
trainer prints them as JSON lines, the worker hands them to its ``events`` callback). A
recorder turns those same events into the metrics of ``runtime.metrics.names``, so that a
process counting its own events and the rehearsal's harness counting the events it reads
from its trainers' output serve the same series by construction.

Trainer events read (fields beyond ``event``; optional ones in brackets):

- ``resumed``: ``step`` [``restore_seconds``, ``bytes``, ``checkpoint`` "final", "periodic"
  or "unknown" (saved before the kind was recorded), ``committed_at`` unix seconds] — the
  checkpoint resumed from, if any;
- ``step``: ``step`` (when it came is the last step's time);
- ``preempted``: ``step``, ``signal`` ("a peer's" when a peer's notice stopped the rank);
- ``checkpoint`` (committed): ``step``, ``kind``, ``seconds``, ``bytes`` [``blocked_seconds``];
- ``final_save``: ``step``, ``outcome`` ("committed": the step is durable, by this save or
  one before it; "refused"; "late"; "unknown": no answer to the commit) [``grace_left``].

A gang's ranks each restore and each save their shard, but the run resumes and leaves once:
only the recorder of the rank that speaks for the run (rank 0) counts resumes, final
outcomes and lost steps, so a dashboard's sums count runs, not ranks; every rank counts its
own signal, saves, bytes and stalls. Events arrive from more than one thread (the upload's,
the heartbeat's): each recorder takes them one at a time.

Worker events: ``leased`` (``ids``), ``done`` / ``duplicate`` (``seconds``),
``already_done``, ``failed`` and ``rejected`` (``dead_lettered``), ``handed_back``
(``ids``), ``progress`` (``in_flight``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spotproof.runtime.checkpointer.tiers import HELD_TIERS
from spotproof.runtime.metrics import names
from spotproof.runtime.metrics.names import Family, Kind

Event = Mapping[str, Any]


def save_metadata(kind: str) -> dict[str, Any]:
    """What a save records for the process that resumes from it: a ``final`` save or a
    ``periodic`` one, and when the state was captured (:func:`resumed_fields` reads it)."""
    return {"kind": kind, "saved_at": round(time.time(), 3)}


def resumed_fields(blobs: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The ``resumed`` event's fields for a restored checkpoint: its bytes, its kind
    ("unknown" when saved before kinds were recorded) and when it was saved."""
    return {
        "bytes": sum(len(blob) for blob in blobs.values()),
        "checkpoint": metadata.get("kind", "unknown"),
        "committed_at": metadata.get("saved_at"),
    }


class Registry:
    """One process's metrics: a prometheus-client registry holding ``families``, with every
    labelled series created at zero, so that ``increase()`` sees the first event.

    ``held_until_scraped``: whether counts and observations wait until a scrape has served
    every counter and histogram at zero (:meth:`release`). A process counts some events
    before its first scrape, a resume at start above all, and Managed Service for
    Prometheus drops the first sample it sees of every counter and histogram series and
    stores the later ones less that first value (GoogleCloudPlatform/prometheus-engine
    v0.15.3, b07ac7e, ``pkg/export/series_cache.go`` ``getResetAdjusted``, called for
    counters and each histogram series by ``pkg/export/transform.go``; gauges are sent as
    they are): a counter first seen at 1 reads 0 there for good. Served at 0 first, it
    reads the same under GMP as in a plain Prometheus, one sample later. The same zero
    tells a plain Prometheus that a container restarted in its pod (same series) counted
    again. Gauges are never held: they are stored as scraped everywhere."""

    def __init__(self, families: Iterable[Family], *, held_until_scraped: bool = False) -> None:
        import prometheus_client  # noqa: PLC0415

        # A ``_created`` gauge beside every counter and histogram doubles the series for a
        # time no rule reads (resets are seen by rate() and increase() themselves).
        prometheus_client.disable_created_metrics()
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self._metrics: dict[str, Any] = {}
        constructors = {
            Kind.COUNTER: prometheus_client.Counter,
            Kind.GAUGE: prometheus_client.Gauge,
            Kind.HISTOGRAM: prometheus_client.Histogram,
        }
        for family in families:
            extra = {"buckets": family.buckets} if family.buckets else {}
            metric = constructors[family.kind](
                family.base_name,
                family.help,
                family.labels,
                registry=self.registry,
                **extra,
            )
            for value in _LABEL_VALUES.get(family.name, ()):
                metric.labels(value)
            self._metrics[family.name] = metric
        self._lock = threading.Lock()
        self._held: list[Callable[[], None]] | None = [] if held_until_scraped else None

    def __call__(self, family: Family, *labels: str) -> Any:
        metric = self._metrics[family.name]
        series = metric.labels(*labels) if labels else metric
        if family.kind is Kind.GAUGE or self._held is None:
            return series
        return _Held(self, series)

    def release(self) -> None:
        """Apply what was held and hold nothing more: a scrape has read every counter and
        histogram at its starting value (``Endpoint`` calls it after each scrape it serves
        in full, and before a leaving process waits for its last one). Counts and
        observations commute, so the order they are applied in does not matter."""
        with self._lock:
            held, self._held = self._held, None
        for change in held or ():
            change()

    def _apply(self, change: Callable[[], None]) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(change)
                return
        change()


class _Held:
    """A counter's or a histogram's series whose changes wait for :meth:`Registry.release`."""

    def __init__(self, registry: Registry, series: Any) -> None:
        self._registry, self._series = registry, series

    def inc(self, amount: float = 1) -> None:
        self._registry._apply(lambda: self._series.inc(amount))

    def observe(self, value: float) -> None:
        self._registry._apply(lambda: self._series.observe(value))


_LABEL_VALUES = {
    names.FINAL_SAVES.name: names.FINAL_OUTCOMES,
    names.SAVES.name: names.SAVE_KINDS,
    names.SAVE_SECONDS.name: names.SAVE_KINDS,
    names.SAVE_BYTES.name: names.SAVE_KINDS,
    names.RESUMES.name: names.RESUME_SOURCES,
}


class TrainerMetrics:
    """A trainer's events as metrics. ``count_lost_steps``: whether this recorder counts
    the steps a preempted process's final save fails to keep; the rehearsal's harness
    counts every interruption's loss itself (it also sees kills no process survives).
    ``speaks_for_run``: false on a gang's ranks other than 0 (see the module docstring)."""

    def __init__(
        self,
        registry: Registry,
        interval_steps: int,
        count_lost_steps: bool = True,
        speaks_for_run: bool = True,
    ):
        self.metrics = registry
        self.interval_steps = interval_steps
        self.count_lost_steps = count_lost_steps and speaks_for_run
        self.speaks_for_run = speaks_for_run
        self._committed: int | None = None
        self._signalled = False
        self._first_step: tuple[float, int] | None = None
        self._lock = threading.Lock()
        registry(names.INTERVAL_STEPS).set(interval_steps)

    def observe(self, event: Event) -> None:
        handler = getattr(self, f"_on_{event.get('event')}", None)
        if handler is not None:
            with self._lock:
                handler(event)

    def lost(self, steps: int) -> None:
        """``steps`` trained past the newest committed checkpoint and lost."""
        if steps > 0:
            self.metrics(names.STEPS_LOST).inc(steps)

    def _on_resumed(self, event: Event) -> None:
        metric, step = self.metrics, int(event["step"])
        metric(names.STEP).set(step)
        metric(names.LAST_STEP_TIME).set(time.time())
        self._first_step, self._signalled = None, False
        source = event.get("checkpoint")
        if source is None:  # a fresh start: nothing was restored
            return
        if self.speaks_for_run and source in names.RESUME_SOURCES:
            metric(names.RESUMES, source).inc()
        metric(names.RESTORE_SECONDS).observe(float(event.get("restore_seconds", 0.0)))
        metric(names.RESTORE_BYTES).inc(int(event.get("bytes", 0)))
        if event.get("tier") in HELD_TIERS:  # read from memory: the bucket has older
            return
        self._committed = step
        metric(names.LAST_COMMITTED_STEP).set(step)
        if event.get("committed_at") is not None:
            metric(names.LAST_COMMIT_TIME).set(float(event["committed_at"]))

    def _on_step(self, event: Event) -> None:
        step, now = int(event["step"]), time.monotonic()
        self.metrics(names.STEP).set(step)
        self.metrics(names.LAST_STEP_TIME).set(time.time())
        self.metrics(names.STEPS).inc()
        if self._first_step is None:
            self._first_step = (now, step)
        elif step > self._first_step[1]:
            per_step = (now - self._first_step[0]) / (step - self._first_step[1])
            self.metrics(names.INTERVAL_SECONDS).set(per_step * self.interval_steps)

    def _on_preempted(self, event: Event) -> None:
        if event.get("signal") != "a peer's":
            self._signalled = True
            self.metrics(names.STOP_SIGNALS).inc()

    def _on_checkpoint(self, event: Event) -> None:
        metric, kind, step = self.metrics, str(event["kind"]), int(event["step"])
        metric(names.SAVES, kind).inc()
        metric(names.SAVE_SECONDS, kind).observe(float(event["seconds"]))
        metric(names.SAVE_BYTES, kind).inc(int(event.get("bytes", 0)))
        if kind == "periodic" and "blocked_seconds" in event:
            metric(names.STALL_SECONDS).observe(float(event["blocked_seconds"]))
        if self._committed is None or step >= self._committed:
            self._committed = step
            metric(names.LAST_COMMITTED_STEP).set(step)
            metric(names.LAST_COMMIT_TIME).set(time.time())

    def _on_final_save(self, event: Event) -> None:
        outcome, step = str(event["outcome"]), int(event["step"])
        if outcome == "committed" and self._signalled and "grace_left" in event:
            self.metrics(names.FINAL_SAVE_GRACE_LEFT).observe(float(event["grace_left"]))
        if not self.speaks_for_run:
            return
        self.metrics(names.FINAL_SAVES, outcome).inc()
        if outcome in ("refused", "late") and self.count_lost_steps:
            self.lost(step - (self._committed or 0))


class WorkerMetrics:
    """A batch worker's events as metrics. Several recorders may share one registry (the
    rehearsal's workers, served as one): each moves the in-flight gauge by its own
    changes, so the gauge is their sum."""

    def __init__(self, registry: Registry) -> None:
        self.metrics = registry
        self._in_flight = 0
        self._lock = threading.Lock()

    def observe(self, event: Event) -> None:
        with self._lock:
            self._observe(event)

    def _observe(self, event: Event) -> None:
        kind, metric = event.get("event"), self.metrics
        if kind == "leased":
            metric(names.ITEMS_LEASED).inc(len(event["ids"]))
            self._held(len(event["ids"]))
        elif kind in ("done", "duplicate"):
            metric(names.ITEMS_DONE if kind == "done" else names.ITEMS_DUPLICATE).inc()
            metric(names.ITEM_SECONDS).observe(float(event.get("seconds", 0.0)))
            self._held(-1)
        elif kind == "already_done":
            metric(names.ITEMS_ALREADY_DONE).inc()
            self._held(-1)
        elif kind in ("failed", "rejected"):
            if kind == "failed":
                metric(names.ITEMS_FAILED).inc()
                self._held(-1)
            if event.get("dead_lettered"):
                metric(names.ITEMS_DEAD_LETTERED).inc()
        elif kind == "handed_back":
            metric(names.ITEMS_HANDED_BACK).inc(len(event["ids"]))
            self._held(-len(event["ids"]))
        elif kind == "progress":
            self._held(int(event["in_flight"]) - self._in_flight)

    def gone(self) -> None:
        """The worker's process has ended: what it held is no longer in flight here (a
        killed pod's series simply vanish; a registry shared by many workers must be told)."""
        with self._lock:
            self._held(-self._in_flight)

    def _held(self, change: int) -> None:
        held = max(0, self._in_flight + change)
        self.metrics(names.ITEMS_IN_FLIGHT).inc(held - self._in_flight)
        self._in_flight = held
