"""The trainer's role on EKS allows every request a real trainer run sends, and nothing
outside its prefix. moto accepts any request, so a proxy records the run's traffic and
each request is evaluated against the policy the stack renders, as IAM would."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest

from spotproof.plan import PlanResult
from spotproof.policy.aws_iam import Request, decide
from spotproof.runtime.storage.s3 import IAM_ACTIONS, iam_requests
from spotproof.smoke.emulation.fault_proxy import emulator_port, fault_proxy, through
from spotproof.smoke.emulation.object_stores import Bucket
from tests.s3_iam import requests_of
from tests.support import plan_of, smoke_checkpoint_url, two_trainer_runs

pytestmark = pytest.mark.processes

TRAINER_POLICY = ("aws:iam/rolePolicy:RolePolicy", "eks-dev-checkpoints-trainer-checkpoints")


def _trainer_policy(plan: PlanResult) -> str:
    return str(plan.recording.one(*TRAINER_POLICY).inputs["policy"])


@pytest.fixture(scope="module")
def trainer_traffic(emulators: dict[str, Bucket]) -> list[Request]:
    """Every request of two trainer runs (a fresh one that prunes as it goes, then one
    that resumes the finished run) on the stack's checkpoint path in moto's bucket."""
    eks_dev = plan_of("eks-dev")  # cached; the fixture of that name is per test
    emulator = emulators["s3"]
    path = urlparse(smoke_checkpoint_url(eks_dev)).path.strip("/")
    bucket = urlparse(smoke_checkpoint_url(eks_dev)).netloc
    with fault_proxy(emulator_port("s3", emulator.env)) as proxy:
        two_trainer_runs(through("s3", emulator.env, proxy), emulator.prefix(path))
        seen = list(proxy.log)
    requests: list[Request] = []
    for method, where, _done in seen:
        target, _, body = where.partition("\n")
        requests += requests_of(method, target, body, bucket_as=bucket)
    return requests


def test_every_request_of_a_trainer_run_is_allowed_by_the_rendered_policy(
    eks_dev: PlanResult, trainer_traffic: list[Request]
) -> None:
    policy = _trainer_policy(eks_dev)
    refused = {str(r) for r in trainer_traffic if decide([policy], r) != "allowed"}
    assert refused == set()


def test_the_run_makes_exactly_the_calls_the_runtime_declares(
    eks_dev: PlanResult, trainer_traffic: list[Request]
) -> None:
    # The plan's s3-checkpoint-access rule evaluates iam_requests, not a run: the two must
    # agree, and the run must have pruned (deletes) and resumed (reads) to show it.
    assert {r.action for r in trainer_traffic} == set(IAM_ACTIONS)
    url = urlparse(smoke_checkpoint_url(eks_dev))
    declared = iam_requests(url.netloc, url.path.strip("/"))
    assert {action for action, _, _ in declared} == set(IAM_ACTIONS)
    prefix = f"{url.path.strip('/')}/"
    for request in trainer_traffic:
        if request.action == "s3:ListBucket":
            assert request.context["s3:prefix"].startswith(prefix), request
        else:
            assert request.resource.startswith(f"arn:aws:s3:::{url.netloc}/{prefix}"), request


def test_a_listing_of_the_bucket_root_is_refused(eks_dev: PlanResult) -> None:
    # What the store's reachability check used to send: every pod failed to start on EKS.
    bucket = urlparse(smoke_checkpoint_url(eks_dev)).netloc
    root_listing = Request(
        "s3:ListBucket",
        f"arn:aws:s3:::{bucket}",
        {"aws:SecureTransport": "true", "s3:prefix": ""},
    )
    assert decide([_trainer_policy(eks_dev)], root_listing) == "implicitly denied"


def test_objects_outside_the_checkpoint_prefix_are_out_of_reach(eks_dev: PlanResult) -> None:
    bucket = urlparse(smoke_checkpoint_url(eks_dev)).netloc
    policy = _trainer_policy(eks_dev)
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        elsewhere = Request(action, f"arn:aws:s3:::{bucket}/batch-results/x")
        assert decide([policy], elsewhere) == "implicitly denied"
    assert json.loads(policy)["Statement"]  # a real document, not an empty one
