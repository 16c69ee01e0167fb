"""Prometheus metrics of the trainer and the batch worker.

``names`` defines every metric once; ``recorders`` turns the events the processes already
emit into those metrics; ``endpoint`` serves them at ``/metrics`` and waits for a last
scrape before a preempted process leaves. A process serves metrics only where its
environment sets ``METRICS_PORT`` (the components render it, with the pod's scrape
configuration, when the stack's monitoring is on); unset, nothing is imported and
prometheus-client (the ``metrics`` extra) is not needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from spotproof.runtime import settings
from spotproof.runtime.metrics.endpoint import Endpoint
from spotproof.runtime.metrics.names import Family
from spotproof.runtime.metrics.recorders import (
    Registry,
    TrainerMetrics,
    WorkerMetrics,
    resumed_fields,
    save_metadata,
)
from spotproof.runtime.settings import ConfigError

__all__ = [
    "EXIT_MARGIN_SECONDS",
    "EXIT_MARGIN_SHARE",
    "Endpoint",
    "Registry",
    "Served",
    "TrainerMetrics",
    "WorkerMetrics",
    "last_scrape_budget",
    "resumed_fields",
    "save_metadata",
    "served",
]

EXIT_MARGIN_SECONDS = 3.0
"""The least grace kept back from the wait for a last scrape: the process must exit on its
own, with its code (143), before the kubelet's SIGKILL (137) would count it as a failure. A
trainer's interpreter teardown with torch loaded took 1.1 s on a quiet 2-core machine and
over 2.5 s with the test suite running beside it (the smoke trainer now skips it when
preempted; ``training()`` leaves through ``SystemExit``, so the user's code can clean up)."""
EXIT_MARGIN_SHARE = 0.2
"""The share of the whole grace kept back, where that is more than
:data:`EXIT_MARGIN_SECONDS`: the guard stamps the signal when Python's handler runs, which
a long call in C (a CUDA synchronisation, a collective) delays, so the grace left may be
less than the guard counts; the margin grows with the grace rather than staking all of
it on that stamp."""


class Countdown(Protocol):
    grace_seconds: float

    def remaining(self) -> float: ...


def last_scrape_budget(guard: Countdown) -> float:
    """Seconds a leaving process may wait for a last scrape: what is left of its grace,
    less the larger of the two margins."""
    margin = max(EXIT_MARGIN_SECONDS, EXIT_MARGIN_SHARE * guard.grace_seconds)
    return guard.remaining() - margin


@dataclass(frozen=True)
class Served:
    """A registry and the endpoint serving it."""

    registry: Registry
    endpoint: Endpoint


def served(env: Mapping[str, str], families: Iterable[Family]) -> Served | None:
    """``families`` served on ``METRICS_PORT``; None when it is unset. Counts and
    observations wait for the first scrape to have read every series at zero
    (``recorders.Registry``, ``held_until_scraped``), so that Managed Service for
    Prometheus, which drops a series' first sample, sees them too. A port that cannot
    be served, or prometheus-client missing, is the process's configuration error (exit 2):
    the manifest asked for metrics the image cannot give."""
    port = settings.METRICS_PORT.read(env)
    if port is None:
        return None
    try:
        registry = Registry(families, held_until_scraped=True)
    except ModuleNotFoundError:
        raise ConfigError(
            f"{settings.METRICS_PORT.name}={port}: serving metrics needs prometheus-client; "
            "allowed: install spotproof[metrics] in the image, or leave it unset"
        ) from None
    try:
        endpoint = Endpoint(registry.registry, port, scraped=registry.release)
    except OSError as error:
        raise ConfigError(
            f"{settings.METRICS_PORT.name}={port}: cannot serve on it ({error.strerror}); "
            "allowed: a port no other container of the pod uses"
        ) from None
    return Served(registry, endpoint)
