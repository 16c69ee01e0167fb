"""Several clusters in one program are planned cluster by cluster (issue 43, item 3).

A user's program declares ``train-eu`` (europe-west4, L4 spot pool) and ``train-us``
(us-central1, T4 spot pool), each a ``HybridCluster`` of its own fleet with its own bucket
and ``TrainingJob``. Each job is scheduled onto its own cluster's pools, each cluster's
add-ons onto its own system pool, each job waits for its own cluster's identity; a job
placed by the other cluster's placement is still refused. The cutting itself
(``plan.recording.clusters``) is checked on small recordings below.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from spotproof.plan import PlanResult, run_plan
from spotproof.plan.recording import clusters
from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.plan.reporting import formats
from spotproof.plan.simulation.nodes import EXISTING_SYSTEM_POOL
from tests.support import REPO

PROGRAM = """
import dataclasses

import pulumi

from spotproof.fleet import PoolClass, fleet_from_config
from spotproof.gke import HybridCluster, HybridClusterArgs
from spotproof.kube import Trainer, TrainingJob, TrainingJobArgs

PROJECT = "acme-ml"
CLUSTERS = {
    # name: (region, its spot GPU pool)
    "train-eu": ("europe-west4", {"name": "l4-spot", "machineType": "g2-standard-8"}),
    "train-us": (
        "us-central1",
        {
            "name": "t4-spot",
            "machineType": "n1-standard-8",
            "gpuType": "nvidia-tesla-t4",
            "gpusPerNode": 1,
        },
    ),
}
PLACED_BY = {}  # a job's cluster -> the cluster whose placement it is given
UNORDERED = ()  # clusters whose job is not made to wait for its identity

built = {}
for name, (region, pool) in CLUSTERS.items():
    fleet = fleet_from_config(
        name,
        {
            "gcp:project": PROJECT,
            "gcp:region": region,
            "spotproof:cloud": "gke",
            "spotproof:kubernetesVersion": "1.33",
            "spotproof:apiAccess": {"authorizedNetworks": ["203.0.113.0/24"]},
            "spotproof:gpuPools": [{**pool, "maxNodes": 4}],
            "spotproof:checkpointBucket": {"name": f"acme-{name}-checkpoints"},
        },
    )
    built[name] = HybridCluster(name, HybridClusterArgs(fleet))

for name, cluster in built.items():
    identity = cluster.workload_identity
    waits = [cluster.baseline, cluster.trainer_account, *cluster.controllers]
    if name in UNORDERED:
        identity = dataclasses.replace(identity, granted_by=())
        waits = [cluster.baseline, *cluster.controllers]
    TrainingJob(
        f"{name}-llm",
        TrainingJobArgs(
            trainer=Trainer(
                image="ghcr.io/acme/llm-train:1.4", command=("python", "train.py"), gpus=1
            ),
            placement=built[PLACED_BY.get(name, name)].placement(PoolClass.SPOT_GPU),
            identity=identity,
            checkpoint_url=cluster.bucket.url.apply(lambda url: f"{url}/checkpoints/llm"),
            controllers=cluster.controllers,
        ),
        opts=pulumi.ResourceOptions(provider=cluster.provider, depends_on=waits),
    )
"""
EU_JOB, US_JOB = "Job spotproof/train-eu-llm in train-eu", "Job spotproof/train-us-llm in train-us"


def _plan(root: Path, *, placed_by: str = "{}", unordered: str = "()") -> PlanResult:
    """The program above as a stack of components (no ``spotproof:`` settings: the
    program builds its own fleets), with one of its mistakes made."""
    (root / "infra").mkdir(parents=True)
    (root / "stacks").mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    program = PROGRAM.replace("PLACED_BY = {}", f"PLACED_BY = {placed_by}")
    program = program.replace("UNORDERED = ()", f"UNORDERED = {unordered}")
    (root / "infra" / "__main__.py").write_text(program)
    config = {"config": {"gcp:project": "acme-ml"}}
    (root / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump(config))
    return run_plan("prod", root)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> PlanResult:
    return _plan(tmp_path_factory.mktemp("clusters") / "project")


def _outcome(plan: PlanResult, label: str):
    [found] = [o for o in plan.outcomes if o.workload.label == label]
    return found


# --- the program as written: every check passes, each within its cluster -------------------


def test_two_clusters_of_one_program_plan_with_no_violations(two: PlanResult) -> None:
    assert [(v.policy, v.resource, v.message) for v in two.violations] == []
    assert two.exit_code == 0


def test_each_job_fits_only_its_own_clusters_pools(two: PlanResult) -> None:
    placements = two.placements()
    assert placements[EU_JOB] == ["l4-spot"]
    assert placements[US_JOB] == ["t4-spot"]


def test_each_job_gets_nodes_only_in_its_own_clusters_region(two: PlanResult) -> None:
    [eu] = _outcome(two, EU_JOB).verdicts
    [us] = _outcome(two, US_JOB).verdicts
    assert (eu.pool, eu.scales) == ("l4-spot", True)
    assert "europe-west4-a" in eu.detail and "us-central1" not in eu.detail
    assert (us.pool, us.scales) == ("t4-spot", True)
    assert "us-central1-a" in us.detail and "europe-west4" not in us.detail


def test_the_scheduling_lines_name_the_cluster_and_only_its_pools(two: PlanResult) -> None:
    text = formats.text(two)
    assert f"  {EU_JOB}: fits l4-spot\n" in text
    assert f"  {US_JOB}: fits t4-spot\n" in text
    assert formats.as_json(two)["scheduling"][EU_JOB] == ["l4-spot"]


def test_no_system_pool_of_another_cluster_is_invented_beside_declared_clusters(
    two: PlanResult,
) -> None:
    assert EXISTING_SYSTEM_POOL not in [pool.name for pool in two.pools]
    assert EXISTING_SYSTEM_POOL not in formats.text(two)


def test_each_clusters_jobset_chart_lands_on_that_clusters_system_pool_alone(
    two: PlanResult,
) -> None:
    charts = [o for o in two.outcomes if o.workload.kind == "Chart" and o.workload.name == "jobset"]
    assert sorted(tuple(pool.scaling.resource for pool in c.fits) for c in charts) == [
        ("train-eu-system",),
        ("train-us-system",),
    ]
    assert {c.workload.label for c in charts} == {
        "Chart jobset-system/jobset in train-eu",
        "Chart jobset-system/jobset in train-us",
    }


def test_each_job_waits_for_its_own_clusters_identity_only(two: PlanResult) -> None:
    assert [v for v in two.violations if v.policy == "workload-identity-ready"] == []


def test_each_clusters_parts_hold_its_own_bucket_and_not_the_others(two: PlanResult) -> None:
    for cluster in two.clusters:
        buckets = [b.inputs["name"] for b in cluster.recording.of_type("gcp:storage/bucket:Bucket")]
        assert buckets == [f"acme-{cluster.recording.cluster}-checkpoints"]


def test_each_clusters_preemption_path_is_its_own_pools(two: PlanResult) -> None:
    [eu] = _outcome(two, EU_JOB).paths
    [us] = _outcome(two, US_JOB).paths
    assert (eu.pools, us.pools) == (("l4-spot",), ("t4-spot",))


# --- real mistakes are still caught -------------------------------------------------------


def test_a_job_given_the_other_clusters_placement_fits_no_pool_of_its_own_cluster(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path / "project", placed_by='{"train-eu": "train-us"}')
    assert plan.exit_code == 1
    [fit] = [v for v in plan.violations if v.policy == "scheduling-fit"]
    assert fit.resource == "train-eu-llm-job"
    assert fit.message == (
        f"{EU_JOB} fits no pool of class spot-gpu: l4-spot: required node affinity not satisfied"
    )


def test_a_job_created_before_its_identity_names_its_own_clusters_bindings_only(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path / "project", unordered='("train-eu",)')
    [late] = [v for v in plan.violations if v.policy == "workload-identity-ready"]
    assert late.resource == "train-eu-llm-job"
    assert "train-eu-checkpoints-trainer-workload-identity (IAMMember)" in late.message
    assert "train-us" not in late.message


# --- how a recording is cut ---------------------------------------------------------------

STACK = "urn:pulumi:s::p::"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"


def _resource(type_: str, name: str, *, depends: tuple[str, ...] = (), **more: object) -> Resource:
    return Resource(
        type_,
        name,
        f"{STACK}{type_}::{name}",
        None,
        True,
        dict(more.pop("inputs", {}) or {}),  # type: ignore[call-overload]
        dependencies=depends,
        **more,  # type: ignore[arg-type]
    )


def _two_clusters(*more: Resource) -> Recording:
    eu = _resource(GKE_CLUSTER, "eu", inputs={"name": "eu"})
    us = _resource(GKE_CLUSTER, "us", inputs={"name": "us"})
    return Recording("s", "p", [eu, us, *more])


def _part(recording: Recording, cluster: str) -> list[str]:
    [part] = [p for p in clusters.parts(recording) if p.cluster == cluster]
    return [r.name for r in part.resources]


def test_a_program_of_one_cluster_is_one_part_the_whole_recording() -> None:
    recording = Recording("s", "p", [_resource(GKE_CLUSTER, "eu", inputs={"name": "eu"})])
    assert clusters.parts(recording) == [recording]


def test_a_provider_belongs_to_the_cluster_its_kubeconfig_comes_from_not_what_it_waits_for() -> (
    None
):
    eu_urn, us_urn = f"{STACK}{GKE_CLUSTER}::eu", f"{STACK}{GKE_CLUSTER}::us"
    provider = _resource(
        clusters.KUBERNETES_PROVIDER,
        "eu-kubernetes",
        depends=(us_urn, eu_urn),
        property_dependencies={"kubeconfig": (eu_urn,)},
    )
    job = _resource(
        "kubernetes:batch/v1:Job",
        "job",
        inputs={"apiVersion": "batch/v1", "kind": "Job"},
        provider=f"{provider.urn}::eu-kubernetes-id",
    )
    recording = _two_clusters(provider, job)
    assert _part(recording, "eu") == ["eu", "eu-kubernetes", "job"]
    assert _part(recording, "us") == ["us"]


def test_a_pool_naming_its_cluster_by_a_literal_belongs_to_it() -> None:
    pool = _resource(NODE_POOL, "extra", inputs={"cluster": "us", "name": "extra"})
    recording = _two_clusters(pool)
    assert _part(recording, "us") == ["us", "extra"]
    assert "extra" not in _part(recording, "eu")


def test_objects_on_no_declared_cluster_are_a_part_of_their_own() -> None:
    job = _resource(
        "kubernetes:batch/v1:Job", "job", inputs={"apiVersion": "batch/v1", "kind": "Job"}
    )
    shared = _resource("gcp:projects/iAMCustomRole:IAMCustomRole", "role")
    recording = _two_clusters(job, shared)
    assert _part(recording, clusters.EXISTING) == ["job", "role"]
    assert _part(recording, "eu") == ["eu", "role"]


def test_a_manifest_applied_outside_the_program_is_judged_in_every_cluster() -> None:
    job = _resource(
        "kubernetes:batch/v1:Job", "job", inputs={"apiVersion": "batch/v1", "kind": "Job"}
    )
    job.dependencies = None  # as spotproof check adds it
    recording = _two_clusters(job)
    assert [p.cluster for p in clusters.parts(recording)] == ["eu", "us"]
    assert _part(recording, "eu") == ["eu", "job"]
    assert _part(recording, "us") == ["us", "job"]
