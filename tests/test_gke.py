"""What the GKE components render, read from the recorded registrations of real stacks.
(Settings that each stand alone for one behaviour are rows of test_rendered_settings.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pulumi
import pytest

from spotproof.fleet import fleet_from_config
from spotproof.gke import CheckpointBucket, CheckpointBucketArgs
from spotproof.gke.names import service_account_id
from spotproof.kube.workload import ServiceAccountRef
from spotproof.plan import PlanResult, run_plan
from spotproof.plan.recording.recorder import Secret, record
from spotproof.plan.reporting.formats import as_json
from tests.support import iam_condition_allows, run_cli, stack_config

POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
BUCKET = "gcp:storage/bucket:Bucket"


def _pool(plan: PlanResult, name: str) -> dict:
    return plan.recording.one(POOL, f"{plan.spec.stack}-{name}").inputs


def test_cluster_is_regional_without_default_pool_and_with_workload_identity(
    gke_dev: PlanResult,
) -> None:
    cluster = gke_dev.recording.one(CLUSTER, "gke-dev").inputs
    assert cluster["location"] == "us-central1"
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "spotproof-dev.svc.id.goog"}
    assert cluster["minMasterVersion"] == "1.33"


def test_autoprovisioning_limits_gpus_by_accelerator_name(gke_dev: PlanResult) -> None:
    autoscaling = gke_dev.recording.one(CLUSTER, "gke-dev").inputs["clusterAutoscaling"]
    assert autoscaling["enabled"] is True
    limits = {limit["resourceType"]: limit["maximum"] for limit in autoscaling["resourceLimits"]}
    # Derived from the pools at their maximum, which the limits cap too: l4-spot 4 and
    # l4-ondemand 1 per zone in 3 zones (15 L4), t4-spot 4 per zone in 4 zones (16 T4),
    # a100-flex 2 per zone in 4 zones (8 A100); 368 vCPU and 1736 GB, plus headroom.
    assert limits == {
        "cpu": 368 + 64,
        "memory": 1736 + 256,
        "nvidia-l4": 15,
        "nvidia-tesla-t4": 16,
        "nvidia-tesla-a100": 8,
    }
    assert autoscaling["autoProvisioningDefaults"]["serviceAccount"].startswith("gke-dev-nodes@")


def test_system_pool_is_on_demand_and_tainted_for_gke_managed_components(
    gke_dev: PlanResult,
) -> None:
    pool = _pool(gke_dev, "system")
    config = pool["nodeConfig"]
    assert config["spot"] is False
    # The taint GKE's own add-ons tolerate; CriticalAddonsOnly would leave some homeless.
    assert config["taints"] == [
        {
            "key": "components.gke.io/gke-managed-components",
            "value": "true",
            "effect": "NO_SCHEDULE",
        }
    ]
    assert config["labels"] == {"spotproof.dev/pool-class": "system"}
    assert pool["autoscaling"]["minNodeCount"] == 1


def test_spot_pool_is_spot_tainted_in_gcp_spelling_and_scales_from_zero_anywhere(
    gke_dev: PlanResult,
) -> None:
    pool = _pool(gke_dev, "l4-spot")
    config = pool["nodeConfig"]
    assert config["spot"] is True
    assert config["machineType"] == "g2-standard-8"
    assert config["taints"] == [
        {"key": "spotproof.dev/capacity", "value": "spot", "effect": "NO_SCHEDULE"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"},
    ]
    assert pool["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 4, "locationPolicy": "ANY"}
    assert pool["initialNodeCount"] == 0


def test_each_gpu_machine_type_is_its_own_pool(gke_prod: PlanResult) -> None:
    machine_types = {
        r.inputs["name"]: r.inputs["nodeConfig"]["machineType"]
        for r in gke_prod.recording.of_type(POOL)
        if r.inputs["nodeConfig"].get("spot")
    }
    assert machine_types == {
        "l4x4-spot": "g2-standard-48",
        "a100-spot": "a2-highgpu-1g",
        "a100x2-spot": "a2-highgpu-2g",
        "h100-spot": "a3-highgpu-8g",
    }


def test_on_demand_fallback_pool_is_not_spot_and_balances_zones(gke_dev: PlanResult) -> None:
    pool = _pool(gke_dev, "l4-ondemand")
    assert pool["nodeConfig"]["spot"] is False
    assert pool["nodeConfig"]["labels"] == {"spotproof.dev/pool-class": "on-demand-gpu"}
    assert pool["autoscaling"]["locationPolicy"] == "BALANCED"


def test_flex_start_pool_meets_gke_requirements(gke_dev: PlanResult) -> None:
    pool = _pool(gke_dev, "a100-flex")
    config = pool["nodeConfig"]
    assert config["flexStart"] is True
    assert config["maxRunDuration"] == "86400s"
    assert config["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert pool["management"]["autoRepair"] is False
    assert pool["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 2, "locationPolicy": "ANY"}
    assert "queuedProvisioning" not in pool


def test_every_pool_runs_the_gke_metadata_server(gke_dev: PlanResult) -> None:
    for pool in gke_dev.recording.of_type(POOL):
        assert pool.inputs["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}


def test_bucket_is_regional_versioned_private_and_expires_noncurrent_versions(
    gke_dev: PlanResult,
) -> None:
    bucket = gke_dev.recording.one(BUCKET, "gke-dev-checkpoints-bucket").inputs
    assert bucket["name"] == "spotproof-dev-gke-dev-checkpoints"
    assert bucket["location"] == "US-CENTRAL1"
    assert bucket["versioning"] == {"enabled": True}
    assert bucket["uniformBucketLevelAccess"] is True
    assert bucket["publicAccessPrevention"] == "enforced"
    conditions = [rule["condition"] for rule in bucket["lifecycleRules"]]
    assert {"daysSinceNoncurrentTime": 3, "withState": "ARCHIVED"} in conditions
    assert not any("numNewerVersions" in condition for condition in conditions)
    assert bucket["forceDestroy"] is True


def test_prod_bucket_and_cluster_are_protected(gke_prod: PlanResult) -> None:
    bucket = gke_prod.recording.one(BUCKET, "gke-prod-checkpoints-bucket")
    cluster = gke_prod.recording.one(CLUSTER, "gke-prod")
    assert bucket.protect and cluster.protect
    assert bucket.inputs["forceDestroy"] is False
    assert cluster.inputs["deletionProtection"] is True


def test_a_copy_of_prod_under_another_name_plans_protected_and_says_so(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-prod"), stack="production")
    code, out, _ = run_cli(capsys, "plan", "--stack", "production", "--project-dir", str(root))
    assert code == 0, out
    assert "Protection: protected (cluster and bucket refuse deletion)" in out
    result = run_plan("production", root)
    [storage] = result.recording.of_type(BUCKET)
    assert storage.protect and storage.inputs["forceDestroy"] is False


def test_the_plan_says_a_disposable_stack_is_disposable(
    gke_dev: PlanResult, make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-dev"), stack="gke-dev")
    code, out, _ = run_cli(capsys, "plan", "--stack", "gke-dev", "--project-dir", str(root))
    assert code == 0
    assert "Protection: DISPOSABLE (spotproof:disposable: true)" in out
    assert as_json(gke_dev)["disposable"] is True


def test_trainer_may_write_objects_of_this_bucket_only(gke_dev: PlanResult) -> None:
    grant = gke_dev.recording.one(
        "gcp:storage/bucketIAMMember:BucketIAMMember", "gke-dev-checkpoints-trainer-objects"
    ).inputs
    assert {key: grant[key] for key in ("bucket", "role", "member")} == {
        "bucket": "spotproof-dev-gke-dev-checkpoints",
        "role": "roles/storage.objectUser",
        "member": "serviceAccount:gke-dev-trainer@spotproof-dev.iam.gserviceaccount.com",
    }
    project_roles = [
        r.inputs["role"] for r in gke_dev.recording.of_type("gcp:projects/iAMMember:IAMMember")
    ]
    assert not any(role.startswith("roles/storage.") for role in project_roles)


@pytest.mark.parametrize(
    ("resource_name", "list_prefix", "allowed"),
    [
        ("objects/checkpoints/smoke/run-0123456789ab/step-00000050/part-0", None, True),
        ("objects/checkpoints/smoke/run-0123456789ab/manifest-00000050.json", None, True),
        ("", "checkpoints/smoke/run-0123456789ab/", True),  # a listing under the prefix
        ("", "checkpoints/", True),
        ("", "", False),  # the bucket's root
        ("", "checkpointsX/", False),
        ("", "batch-results/", False),
        ("", None, False),  # a call on the bucket that is no listing (its metadata)
        ("objects/batch-results/item", None, False),
        ("objects/checkpointsX/other", None, False),
        ("objects/other-team/model.pt", None, False),
    ],
)
def test_trainer_reaches_and_lists_only_objects_under_the_checkpoint_prefix(
    gke_dev: PlanResult, resource_name: str, list_prefix: str | None, allowed: bool
) -> None:
    # The condition is CEL, evaluated here as IAM would against each call's resource.name
    # and, for a listing, its prefix.
    grant = gke_dev.recording.one(
        "gcp:storage/bucketIAMMember:BucketIAMMember", "gke-dev-checkpoints-trainer-objects"
    ).inputs
    bucket = "projects/_/buckets/spotproof-dev-gke-dev-checkpoints"
    name = f"{bucket}/{resource_name}" if resource_name else bucket
    expression = grant["condition"]["expression"]
    assert iam_condition_allows(expression, name, list_prefix=list_prefix) is allowed


def test_kubernetes_service_account_impersonates_the_trainer_through_workload_identity(
    gke_dev: PlanResult,
) -> None:
    binding = gke_dev.recording.one(
        "gcp:serviceaccount/iAMMember:IAMMember", "gke-dev-checkpoints-trainer-workload-identity"
    ).inputs
    assert binding["role"] == "roles/iam.workloadIdentityUser"
    assert (
        binding["member"] == "serviceAccount:spotproof-dev.svc.id.goog[spotproof/spotproof-trainer]"
    )
    assert not gke_dev.recording.of_type("gcp:serviceaccount/key:Key")


def test_kubernetes_objects_use_the_provider_built_from_the_cluster(gke_dev: PlanResult) -> None:
    provider = gke_dev.recording.one("pulumi:providers:kubernetes", "gke-dev-kubernetes")
    kubeconfig = provider.inputs["kubeconfig"]
    assert isinstance(kubeconfig, Secret)
    assert "gke-gcloud-auth-plugin" in kubeconfig.value
    for obj in gke_dev.recording.kubernetes_objects():
        assert obj.provider and obj.provider.startswith(provider.urn), obj.name


def test_stack_exports_what_a_user_needs(gke_dev: PlanResult) -> None:
    outputs = gke_dev.recording.outputs
    assert outputs["cluster_name"] == "gke-dev"
    assert outputs["checkpoint_bucket_url"] == "gs://spotproof-dev-gke-dev-checkpoints"
    assert outputs["pool_names"] == ["system", "l4-spot", "t4-spot", "l4-ondemand", "a100-flex"]
    assert "certificate-authority-data" in outputs["kubeconfig"]


def test_checkpoint_bucket_component_parents_its_children() -> None:
    spec = fleet_from_config("gke-dev", stack_config("gke-dev"))

    def program() -> None:
        bucket = CheckpointBucket(
            "ckpt",
            CheckpointBucketArgs(
                bucket=spec.bucket,
                project="spotproof-dev",
                trainer=ServiceAccountRef("team-a", "trainer"),
                name_prefix=spec.stack,
            ),
        )
        pulumi.export("url", bucket.url)

    recording = record(program, stack="gke-dev", project="spotproof")
    component = recording.one("spotproof:gke:CheckpointBucket", "ckpt")
    assert {r.type for r in recording.children(component)} == {
        BUCKET,
        "gcp:serviceaccount/account:Account",
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "gcp:serviceaccount/iAMMember:IAMMember",
    }
    binding = recording.one(
        "gcp:serviceaccount/iAMMember:IAMMember", "ckpt-trainer-workload-identity"
    )
    assert binding.inputs["member"].endswith("[team-a/trainer]")
    assert recording.outputs["url"] == "gs://spotproof-dev-gke-dev-checkpoints"


def test_service_account_ids_fit_gcp_limits_and_stay_stable() -> None:
    long_stack = "gke-a-very-long-environment-name-01"
    account = service_account_id(long_stack, "trainer")
    assert len(account) <= 30 and account.endswith("-trainer")
    assert account == service_account_id(long_stack, "trainer")
    assert service_account_id("gke-dev", "nodes") == "gke-dev-nodes"


def test_a4_pool_boots_from_hyperdisk(make_project: Callable[..., Path]) -> None:
    config = stack_config("gke-prod")
    config["spotproof:gpuPools"][3] = {
        "name": "b200-spot",
        "machineType": "a4-highgpu-8g",
        "maxNodes": 1,
    }
    result = run_plan("gke-test", make_project(config))
    pool = result.recording.one(POOL, "gke-test-b200-spot").inputs["nodeConfig"]
    assert pool["diskType"] == "hyperdisk-balanced"
    assert _pool(result, "l4x4-spot")["nodeConfig"]["diskType"] == "pd-balanced"
