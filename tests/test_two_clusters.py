"""Two clusters in one stack: each component's children are named after it, so two
``HybridCluster``s (two regions) plan side by side; the plan refuses what ``pulumi up`` or
the cloud would refuse, one URN or one cloud name declared twice."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from spotproof.plan import run_plan
from tests.support import run_cli, stack_config

TWO_REGIONS = """
import json

import pulumi

from spotproof.gke import HybridCluster, HybridClusterArgs
from spotproof.program import stack_config
from spotproof.fleet import fleet_from_config


def value(config, key):
    raw = config[key]
    return json.loads(raw) if isinstance(raw, str) and raw[:1] in "[{" else raw


us = stack_config()
eu = {
    **us,
    "gcp:region": "europe-west4",
    "spotproof:gpuPools": [
        {k: v for k, v in pool.items() if k != "zones"}
        for pool in value(us, "spotproof:gpuPools")
    ],
    "spotproof:checkpointBucket": EU_BUCKET,
}
eu.pop("spotproof:flexStartPool", None)
for name, config in ((US_NAME, us), (EU_NAME, eu)):
    cluster = HybridCluster(name, HybridClusterArgs(fleet_from_config(pulumi.get_stack(), config)))
    pulumi.export(f"{name}-cluster", cluster.cluster_name)
"""


def _program(us_name: str = "us", eu_name: str = "eu", eu_bucket: str | None = None) -> str:
    bucket = {"name": eu_bucket or "acme-ml-eu-checkpoints", "location": "europe-west4"}
    return (
        TWO_REGIONS.replace("US_NAME", repr(us_name))
        .replace("EU_NAME", repr(eu_name))
        .replace("EU_BUCKET", json.dumps(bucket))
    )


def _plan(make_project: Callable[..., Path], program: str) -> Path:
    return make_project(stack_config("gke-dev"), stack="gke-dev", program=program)


def test_two_hybrid_clusters_in_one_stack_plan_with_every_urn_and_cloud_name_distinct(
    make_project: Callable[..., Path],
) -> None:
    result = run_plan("gke-dev", _plan(make_project, _program()))
    assert [v for v in result.violations if v.policy == "unique-names"] == []
    urns = Counter(r.urn for r in result.recording.resources)
    assert max(urns.values()) == 1
    clusters = result.recording.of_type("gcp:container/cluster:Cluster")
    assert sorted((c.inputs["name"], c.inputs["location"]) for c in clusters) == [
        ("eu", "europe-west4"),
        ("us", "us-central1"),
    ]
    accounts = sorted(
        a.inputs["accountId"]
        for a in result.recording.of_type("gcp:serviceaccount/account:Account")
    )
    assert accounts == sorted(
        f"{c}-{p}" for c in ("eu", "us") for p in ("batch", "keda", "nodes", "trainer")
    )


def test_each_pool_is_named_after_its_clusters_component() -> None:
    pools = run_plan("gke-dev").recording.of_type("gcp:container/nodePool:NodePool")
    assert sorted(p.name for p in pools) == [
        "gke-dev-a100-flex",
        "gke-dev-l4-ondemand",
        "gke-dev-l4-spot",
        "gke-dev-system",
        "gke-dev-t4-spot",
    ]


def test_two_clusters_sharing_a_bucket_name_are_refused_naming_both(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    program = _program(eu_bucket="spotproof-dev-gke-dev-checkpoints")
    root = _plan(make_project, program)
    code, out, _ = run_cli(capsys, "plan", "--stack", "gke-dev", "--project-dir", str(root))
    assert code == 1
    assert (
        "[unique-names] us-checkpoints-bucket: gcp:storage/bucket:Bucket "
        "spotproof-dev-gke-dev-checkpoints is also declared by eu-checkpoints-bucket"
    ) in out


def test_two_components_of_one_name_are_refused_as_duplicate_urns(
    make_project: Callable[..., Path],
) -> None:
    result = run_plan("gke-dev", _plan(make_project, _program(us_name="gke", eu_name="gke")))
    duplicates = [v for v in result.violations if "is declared 2 times" in v.message]
    assert duplicates, [v.message for v in result.violations]
    assert any(
        v.message.startswith(
            "urn:pulumi:gke-dev::spotproof::spotproof:gke:HybridCluster$gcp:container/"
            "nodePool:NodePool::gke-system is declared 2 times; pulumi up refuses"
        )
        for v in duplicates
    )


def test_urns_carry_the_whole_chain_of_parent_types_as_the_engine_writes_them() -> None:
    recording = run_plan("gke-dev").recording
    [pool] = [r for r in recording.resources if r.name == "gke-dev-l4-spot"]
    assert pool.urn == (
        "urn:pulumi:gke-dev::spotproof::spotproof:gke:HybridCluster$spotproof:gke:GpuNodePools"
        "$gcp:container/nodePool:NodePool::gke-dev-l4-spot"
    )
