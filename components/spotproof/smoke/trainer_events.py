"""The smoke trainer's events: one JSON object per line on stdout, and the same events as
the trainer's Prometheus metrics where ``METRICS_PORT`` asks for them (``runtime.metrics``).

One trainer per process, so the module holds its printer and its recorder; the upload
thread's events and the main thread's are printed and recorded under one lock.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from spotproof.runtime import metrics, settings
from spotproof.runtime.guard import PreemptionGuard

_print_lock = threading.Lock()
_served: metrics.Served | None = None
_recorder: metrics.TrainerMetrics | None = None
"""Set where ``METRICS_PORT`` asks for metrics: every event is recorded as it is emitted."""


def emit(event: str, printed: bool = True, **fields: Any) -> None:
    """One event: recorded as metrics where they are served, printed unless ``printed`` is
    false (a step without ``EMIT_STEPS``)."""
    record = {"event": event, **fields}
    with _print_lock:
        if _recorder is not None:
            _recorder.observe(record)
        if printed:
            print(json.dumps(record), flush=True)


def serve_metrics(interval: int, env: Mapping[str, str]) -> None:
    """Serve the trainer's metrics where ``METRICS_PORT`` asks for them."""
    global _served, _recorder  # noqa: PLW0603 (one trainer per process, as emit is)
    _served = metrics.served(env, metrics.names.TRAINER)
    if _served is not None:
        speaks_for_run = settings.RANK.read(env) == 0  # a gang's rank 0 (recorders' docstring)
        _recorder = metrics.TrainerMetrics(
            _served.registry, interval, speaks_for_run=speaks_for_run
        )


def await_last_scrape(guard: PreemptionGuard) -> None:
    """Leaving after a notice: wait, within the grace left, for Prometheus to read the
    counts of this process's last moments (``runtime.metrics.endpoint``)."""
    if _served is not None:
        _served.endpoint.await_scrape(metrics.last_scrape_budget(guard))
