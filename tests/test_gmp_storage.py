"""The tests' model of what GKE's Managed Service for Prometheus stores
(``tests.promtool_cases.as_gmp_stores``), against what its exporter does: the first sample
of a counter or histogram series dropped, later ones stored less it until the series
decreases, gauges stored as scraped, no staleness markers (GoogleCloudPlatform/
prometheus-engine v0.15.3, ``pkg/export/series_cache.go`` ``getResetAdjusted`` and
``pkg/export/transform.go``)."""

from __future__ import annotations

import pytest

from spotproof.runtime.metrics import names
from tests.promtool_cases import as_gmp_stores, expand


def _stored(name: str, values: str) -> str:
    (stored,) = as_gmp_stores([{"series": f'{name}{{pod="p"}}', "values": values}])
    return stored["values"]


def test_promtools_notation_is_read_one_entry_per_sample() -> None:
    assert expand("_x2 1+2x2 3x1 stale 4-1x1 _") == [
        None, None, 1, 3, 5, 3, 3, "stale", 4, 3, None,
    ]  # fmt: skip


def test_a_counters_first_sample_is_dropped_and_the_rest_are_stored_less_it() -> None:
    assert _stored(names.RESUMES.name, "_x2 3 4 6") == "_ _ _ 1 3"


def test_a_counter_first_seen_counting_reads_zero_for_good() -> None:
    """The resume a trainer counted before its first scrape, served as it was."""
    assert _stored(names.RESUMES.name, "1x3") == "_ 0 0 0"


def test_a_counter_first_seen_at_zero_keeps_every_later_count() -> None:
    assert _stored(names.RESUMES.name, "0 1x2") == "_ 1 1 1"


def test_a_counter_that_decreases_is_stored_as_it_comes_from_then_on() -> None:
    """A restarted container, same series: GMP takes the fall for a reset."""
    assert _stored(names.STEPS.name, "5 7 1 2") == "_ 2 1 2"


def test_every_series_of_a_histogram_is_cumulative() -> None:
    for suffix in ("_bucket", "_sum", "_count"):
        assert _stored(names.RESTORE_SECONDS.name + suffix, "2 3") == "_ 1"


def test_a_gauge_is_stored_as_scraped_without_its_staleness_marker() -> None:
    assert _stored(names.STEP.name, "4 5 stale") == "4 5 _"
    assert _stored("up", "1 0") == "1 0"


def test_a_counter_of_another_exporter_is_cumulative_too() -> None:
    assert _stored("kube_pod_container_status_restarts_total", "2 3") == "_ 1"


def test_a_series_of_no_known_type_is_refused() -> None:
    with pytest.raises(ValueError, match="no known type"):
        _stored("node_cpu_seconds_total", "1 2")
