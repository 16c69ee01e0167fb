"""The trainer's grant on GKE admits every request a real trainer run sends, and its
listings only under its prefix. fake-gcs-server evaluates no IAM, so a proxy in front of
it refuses what the grant would refuse (a listing outside the prefix, the bucket's
metadata), the runs must still complete, and each request they made is evaluated against
the condition the stack renders, as IAM would."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from spotproof.plan import PlanResult
from spotproof.smoke.emulation.fault_proxy import Fault, emulator_port, fault_proxy, through
from spotproof.smoke.emulation.object_stores import Bucket
from tests.gcs_iam import GcsRequest, requests_of
from tests.support import iam_condition_allows, plan_of, smoke_checkpoint_url, two_trainer_runs

pytestmark = pytest.mark.processes

TRAINER_GRANT = (
    "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gke-dev-checkpoints-trainer-objects",
)
BUCKET_METADATA = "storage.buckets.get"


def _allowed(plan: PlanResult, request: GcsRequest) -> bool:
    condition = plan.recording.one(*TRAINER_GRANT).inputs["condition"]["expression"]
    return iam_condition_allows(condition, request.resource_name, list_prefix=request.list_prefix)


@pytest.fixture(scope="module")
def trainer_traffic(emulators: dict[str, Bucket]) -> list[GcsRequest]:
    """Every request of two trainer runs (a fresh one that prunes as it goes, then one
    that resumes the finished run) on the stack's checkpoint path, with what the grant
    refuses refused."""
    url = urlparse(smoke_checkpoint_url(plan_of("gke-dev")))
    path, bucket = url.path.strip("/"), url.netloc
    top = path.split("/")[0]
    emulator = emulators["gcs"]
    with fault_proxy(emulator_port("gcs", emulator.env)) as proxy:
        # IAM's answers that fake-gcs-server cannot give: buckets.get is not in
        # roles/storage.objectUser, and a listing outside the prefix fails the condition.
        proxy.add(Fault("GET", r"^/storage/v1/b/[^/?]+(\?|$)", "status:403"))
        outside = rf"^/storage/v1/b/[^/?]+/o\?(?!(?:[^\n]*&)?prefix={top}(/|%2F))"
        proxy.add(Fault("GET", outside, "status:403"))
        two_trainer_runs(through("gcs", emulator.env, proxy), emulator.prefix(path))
        seen = list(proxy.log)
    requests: list[GcsRequest] = []
    for method, where, _done in seen:
        target, _, body = where.partition("\n")
        requests += requests_of(method, target, body, bucket_as=bucket)
    return requests


def test_every_object_request_of_a_trainer_run_is_allowed_by_the_rendered_grant(
    gke_dev: PlanResult, trainer_traffic: list[GcsRequest]
) -> None:
    refused = {
        r for r in trainer_traffic if r.permission != BUCKET_METADATA and not _allowed(gke_dev, r)
    }
    assert refused == set()


def test_the_run_lists_reads_writes_and_prunes_under_its_prefix_only(
    trainer_traffic: list[GcsRequest],
) -> None:
    path = urlparse(smoke_checkpoint_url(plan_of("gke-dev"))).path.strip("/")
    permissions = {r.permission for r in trainer_traffic} - {BUCKET_METADATA}
    assert permissions == {
        "storage.objects.list",
        "storage.objects.get",
        "storage.objects.create",
        "storage.objects.delete",
    }
    listings = {r.list_prefix for r in trainer_traffic if r.list_prefix is not None}
    assert listings and all(p.startswith(f"{path}/") for p in listings), listings


def test_the_bucket_metadata_the_client_library_asks_for_is_refused_and_survived(
    gke_dev: PlanResult, trainer_traffic: list[GcsRequest]
) -> None:
    # google-cloud-storage looks a bucket's metadata up in the background for its traces
    # and caches a fallback on 403 (google/cloud/storage/_bucket_metadata_cache.py,
    # _fetch_background): the grant leaves it out, and the runs above completed without it.
    lookups = [r for r in trainer_traffic if r.permission == BUCKET_METADATA]
    assert lookups and not any(_allowed(gke_dev, r) for r in lookups)


def test_a_listing_of_the_bucket_root_is_refused(gke_dev: PlanResult) -> None:
    bucket = "projects/_/buckets/spotproof-dev-gke-dev-checkpoints"
    root = GcsRequest("storage.objects.list", bucket, "")
    assert not _allowed(gke_dev, root)
