"""A served process reads every counter and histogram at zero in its first scrape, and only
then counts: Managed Service for Prometheus drops a series' first sample and stores the rest
less it (GoogleCloudPlatform/prometheus-engine v0.15.3 ``pkg/export/series_cache.go``,
``getResetAdjusted``), so a resume counted before the first scrape would read 0 there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotproof.runtime import metrics
from spotproof.runtime.metrics import Served, TrainerMetrics, WorkerMetrics, names
from spotproof.smoke.emulation.object_stores import free_port
from tests.test_trainer_metrics import Samples, scrape

PERIODIC = {"checkpoint": "periodic"}


def _scrape(served: Served) -> Samples:
    return scrape(served.endpoint.port)


def _value(scraped: Samples, family: names.Family, suffix: str = "", **labels: str) -> float:
    return scraped[(family.name + suffix, tuple(sorted(labels.items())))]


def _served(families: tuple[names.Family, ...]) -> Served:
    served = metrics.served({"METRICS_PORT": str(free_port())}, families)
    assert served is not None
    return served


@pytest.fixture
def trainer() -> Iterator[tuple[Served, TrainerMetrics]]:
    served = _served(names.TRAINER)
    yield served, TrainerMetrics(served.registry, interval_steps=10)
    served.endpoint.close()


def _resumed(recorder: TrainerMetrics) -> None:
    recorder.observe(
        {"event": "resumed", "step": 40, "checkpoint": "periodic", "restore_seconds": 2.0}
    )


def test_a_resume_counted_before_the_first_scrape_is_read_at_zero_then_at_one(
    trainer: tuple[Served, TrainerMetrics],
) -> None:
    served, recorder = trainer
    _resumed(recorder)
    first, second = _scrape(served), _scrape(served)
    assert _value(first, names.RESUMES, **PERIODIC) == 0
    assert _value(second, names.RESUMES, **PERIODIC) == 1


def test_an_observation_before_the_first_scrape_waits_for_it_as_a_count_does(
    trainer: tuple[Served, TrainerMetrics],
) -> None:
    served, recorder = trainer
    _resumed(recorder)
    first, second = _scrape(served), _scrape(served)
    assert _value(first, names.RESTORE_SECONDS, "_count") == 0
    assert _value(second, names.RESTORE_SECONDS, "_count") == 1
    assert _value(second, names.RESTORE_SECONDS, "_sum") == 2.0


def test_gauges_are_read_as_they_are_from_the_first_scrape(
    trainer: tuple[Served, TrainerMetrics],
) -> None:
    """GMP stores a gauge's every sample as scraped, the first included."""
    served, recorder = trainer
    _resumed(recorder)
    assert _value(_scrape(served), names.STEP) == 40


def test_after_the_first_scrape_a_count_is_read_at_the_next(
    trainer: tuple[Served, TrainerMetrics],
) -> None:
    served, recorder = trainer
    _scrape(served)
    recorder.observe({"event": "preempted", "step": 41, "signal": "SIGTERM"})
    assert _value(_scrape(served), names.STOP_SIGNALS) == 1


def test_a_process_leaving_before_any_scrape_shows_its_counts_to_its_last_one(
    trainer: tuple[Served, TrainerMetrics],
) -> None:
    """A plain Prometheus reads them there; GMP, dropping the first sample, cannot."""
    served, recorder = trainer
    _resumed(recorder)
    served.endpoint.await_scrape(0)
    assert _value(_scrape(served), names.RESUMES, **PERIODIC) == 1


def test_a_workers_counts_wait_for_the_first_scrape_too() -> None:
    served = _served(names.BATCH)
    recorder = WorkerMetrics(served.registry)
    recorder.observe({"event": "rejected", "dead_lettered": True})
    first, second = _scrape(served), _scrape(served)
    served.endpoint.close()
    assert _value(first, names.ITEMS_DEAD_LETTERED) == 0
    assert _value(second, names.ITEMS_DEAD_LETTERED) == 1
