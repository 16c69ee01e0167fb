"""Real processes, real kills, every store: kill -9 at random points (inside uploads
included), SIGTERM with a replacement racing the old process, and the run still ends with
the digest of a run that was never interrupted."""

from __future__ import annotations

import os

import boto3
import pytest

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.smoke.emulation.object_stores import Bucket
from spotproof.smoke.reports.records import SmokeConfig, SmokeReport
from spotproof.smoke.runs.solo import run_smoke

pytestmark = pytest.mark.processes

STORES = ("s3", "gcs", "azure")
"""The object stores. The file store's run of the same kills (aimed inside an upload
included) is ``spotproof smoke``'s own, in test_smoke_cli.py and test_rehearsal.py."""
_REPORTS: dict[str, SmokeReport] = {}


def _report(store: str) -> SmokeReport:
    """One interrupted run per store, shared by the assertions below."""
    if store not in _REPORTS:
        config = SmokeConfig(
            store=store, preemptions=2, hard_kills=2, total_steps=140, interval=20, model_mb=2
        )
        _REPORTS[store] = run_smoke(config, progress=lambda _line: None)
    return _REPORTS[store]


@pytest.mark.parametrize("store", STORES)
def test_interrupted_run_ends_with_the_reference_digest(store: str) -> None:
    report = _report(store)
    assert report.failures == []
    assert report.digest == report.reference_digest is not None


@pytest.mark.parametrize("store", STORES)
def test_a_hard_kill_lands_between_payload_writes_and_the_manifest(store: str) -> None:
    kills = [i for i in _report(store).interruptions if i.kind == "hard-kill"]
    assert len(kills) == 2
    assert any(i.kill_point == "in-upload" for i in kills)


@pytest.mark.parametrize("store", STORES)
def test_graceful_preemption_loses_no_step(store: str) -> None:
    preemptions = [i for i in _report(store).interruptions if i.kind == "preemption"]
    assert len(preemptions) == 2
    for record in preemptions:
        assert record.exit_code == 143 and not record.sigkilled_after_grace
        assert record.final_save_seconds is not None and record.final_save_seconds < 15
        if not record.replacement_overlapped:
            assert record.steps_lost == 0
    assert any(record.replacement_overlapped for record in preemptions)


@pytest.mark.parametrize("store", STORES)
def test_hard_kill_loses_at_most_one_interval_beyond_the_upload_in_flight(store: str) -> None:
    for record in _report(store).interruptions:
        if record.kind == "hard-kill":
            in_flight = record.upload_step if record.kill_point != "after-commit" else None
            allowed = 20 + (record.at_step - in_flight if in_flight is not None else 0)
            assert record.steps_lost is not None and record.steps_lost <= allowed, record


@pytest.mark.parametrize("store", STORES)
def test_no_replacement_resumes_behind_a_committed_step(store: str) -> None:
    for record in _report(store).interruptions:
        if not record.replacement_overlapped and record.newest_committed is not None:
            assert record.resumed_from is not None
            assert record.resumed_from >= record.newest_committed


def test_no_committed_manifest_is_ever_written_twice(emulators: dict[str, Bucket]) -> None:
    """On versioned S3, a second version of a manifest would be an overwrite."""
    bucket = emulators["s3"]
    with bucket.apply():
        store = CheckpointStore(bucket.prefix("versions"), part_bytes=32 * 1024)
        rival = CheckpointStore(bucket.prefix("versions"), part_bytes=32 * 1024)
        for step in (1, 2, 3):
            store.save(step, {"state": os.urandom(100_000)})
            rival.save(step, {"state": os.urandom(100_000)})
        client = boto3.client("s3", endpoint_url=bucket.env["AWS_ENDPOINT_URL"])
        listing = client.list_object_versions(
            Bucket="spotproof-smoke", Prefix="versions/manifests/"
        )
    versions = [v["Key"] for v in listing.get("Versions", [])]
    assert sorted(versions) == [f"versions/manifests/{s:012d}.json" for s in (1, 2, 3)]
