"""Every platform rule the plan encodes, broken on purpose in a real plan: the plan fails
(exit 1) with a violation naming the rule, the resource, and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from spotproof import plan as spotproof_plan
from spotproof.plan import PlanResult
from spotproof.policy import Violation
from tests.support import plan_of

JOB = "kubernetes:batch/v1:Job"
GKE_POOL = "gcp:container/nodePool:NodePool"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
GCS_BUCKET = "gcp:storage/bucket:Bucket"
S3_LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"


def _only(result: PlanResult, policy: str) -> Violation:
    assert result.exit_code == 1
    found = [v for v in result.violations if v.policy == policy]
    assert len(found) == 1, result.violations
    return found[0]


SPOT_WORKLOADS = {"gke-dev-smoke-job", "gke-dev-batch-deployment"}
"""gke-dev's workloads on spot GPUs: a capacity rule broken there strands both."""


def _smoke_of_both(result: PlanResult, policy: str) -> Violation:
    """The smoke Job's violation, once both spot workloads are found to have one."""
    assert result.exit_code == 1
    found = {v.resource: v for v in result.violations if v.policy == policy}
    assert set(found) == SPOT_WORKLOADS, result.violations
    return found["gke-dev-smoke-job"]


def _recheck(plan: PlanResult) -> PlanResult:
    return spotproof_plan.check(plan.spec, plan.recording)


def _of(plan: PlanResult, type_: str, suffix: str) -> dict[str, Any]:
    [resource] = [r for r in plan.recording.of_type(type_) if r.name.endswith(suffix)]
    return resource.inputs


def _smoke_pod(plan: PlanResult) -> dict[str, Any]:
    return _of(plan, JOB, "smoke-job")["spec"]["template"]["spec"]


# --- scale-up --------------------------------------------------------------------------


def test_spot_priority_below_the_expendable_cutoff_never_scales_up(gke_dev: PlanResult) -> None:
    _of(gke_dev, PRIORITY_CLASS, "spotproof-spot-batch")["value"] = -100

    violation = _smoke_of_both(_recheck(gke_dev), "scale-up")

    assert violation.resource == "gke-dev-smoke-job"
    assert "priority -100 is below the cluster autoscaler's expendable cutoff (-10)" in (
        violation.message
    )
    assert "fix: use a PriorityClass of at least -10" in violation.message


def test_autoprovisioning_limit_below_one_node_blocks_scale_up(gke_dev: PlanResult) -> None:
    limits = _of(gke_dev, GKE_CLUSTER, "gke-dev")["clusterAutoscaling"]["resourceLimits"]
    for limit in limits:
        if limit["resourceType"] in ("nvidia-l4", "nvidia-tesla-t4"):
            limit["maximum"] = 0

    violation = _smoke_of_both(_recheck(gke_dev), "scale-up")

    assert "cluster-wide limit is 0" in violation.message
    assert "fix: raise the nvidia-l4 limit to at least 1" in violation.message


def test_pool_whose_zones_lack_its_gpu_never_scales_up(gke_dev: PlanResult) -> None:
    for pool in ("l4-spot", "t4-spot"):
        _of(gke_dev, GKE_POOL, pool)["nodeLocations"] = ["us-central1-f"]
    _of(gke_dev, GKE_POOL, "t4-spot")["autoscaling"]["maxNodeCount"] = 0

    violation = _smoke_of_both(_recheck(gke_dev), "scale-up")

    assert "l4-spot: none of its zones (us-central1-f) offers nvidia-l4" in violation.message
    assert "t4-spot: its autoscaling maximum is 0 nodes" in violation.message


def test_karpenter_limit_below_one_node_blocks_scale_up(eks_prod: PlanResult) -> None:
    pool = _of(eks_prod, NODE_POOL, "gpu8-spot-nodepool")
    pool["spec"]["limits"]["nvidia.com/gpu"] = "4"
    _of(eks_prod, NODE_POOL, "gpu-spot-nodepool")["spec"]["limits"]["nvidia.com/gpu"] = "0"

    violation = _only(_recheck(eks_prod), "scale-up")

    assert "gpu8-spot: its limit of 4 nvidia.com/gpu cannot hold one node of 8" in violation.message
    assert "fix: raise spec.limits.nvidia.com/gpu to at least 8" in violation.message


# --- preemption path -------------------------------------------------------------------


def test_eks_nodepool_without_termination_grace_never_delivers_sigterm(
    eks_dev: PlanResult,
) -> None:
    del _of(eks_dev, NODE_POOL, "gpu-spot-nodepool")["spec"]["template"]["spec"][
        "terminationGracePeriod"
    ]

    result = _recheck(eks_dev)
    violation = _only(result, "preemption-path")

    assert violation.resource == "eks-dev-smoke-job"
    assert "never gets SIGTERM" in violation.message
    assert "sets no terminationGracePeriod" in violation.message
    assert "fix: set spec.template.spec.terminationGracePeriod of NodePool gpu-spot to 90s" in (
        violation.message
    )


def test_eks_termination_grace_longer_than_the_notice_delivers_sigterm_too_late(
    eks_dev: PlanResult,
) -> None:
    template = _of(eks_dev, NODE_POOL, "gpu-spot-nodepool")["spec"]["template"]["spec"]
    template["terminationGracePeriod"] = "5m"

    violation = _only(_recheck(eks_dev), "preemption-path")

    assert "deletes the pod at 240 s, after the instance is gone" in violation.message


def test_eks_pod_grace_above_what_the_path_leaves_is_cut_short(eks_dev: PlanResult) -> None:
    _smoke_pod(eks_dev)["terminationGracePeriodSeconds"] = 110

    result = _recheck(eks_dev)
    violation = _only(result, "preemption-path")

    assert "gets 90 s of grace, less than the 110 s it declares" in violation.message


def test_eks_pod_without_budget_or_annotation_is_evicted_at_once(eks_dev: PlanResult) -> None:
    del _of(eks_dev, NODE_POOL, "gpu-spot-nodepool")["spec"]["template"]["spec"][
        "terminationGracePeriod"
    ]
    job = _of(eks_dev, JOB, "smoke-job")
    del job["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"]
    eks_dev.recording.resources = [r for r in eks_dev.recording.resources if r.type != PDB]

    result = _recheck(eks_dev)

    assert not [v for v in result.violations if v.policy == "preemption-path"]
    [outcome] = [o for o in result.outcomes if o.workload.name == "spotproof-smoke"]
    assert "the eviction goes through at once" in outcome.paths[0].line()


def test_gke_grace_above_15_seconds_is_cut_to_15(gke_dev: PlanResult) -> None:
    _smoke_pod(gke_dev)["terminationGracePeriodSeconds"] = 25

    violation = _only(_recheck(gke_dev), "preemption-path")

    assert "on GKE spot (l4-spot, t4-spot) gets 15 s of grace, less than the 25 s" in (
        violation.message
    )
    assert "fix: set terminationGracePeriodSeconds to at most 15" in violation.message


# --- disruption budgets ----------------------------------------------------------------


@pytest.mark.parametrize("budget", [{"maxUnavailable": 0}, {"minAvailable": "100%"}])
def test_budget_a_job_cannot_honour_is_refused(gke_dev: PlanResult, budget: dict) -> None:
    spec = _of(gke_dev, PDB, "smoke-pdb")["spec"]
    spec.pop("minAvailable")
    spec.update(budget)

    violation = _only(_recheck(gke_dev), "pdb-valid-for-owner")

    assert violation.resource == "gke-dev-smoke-pdb"
    assert "selects the pods of Job spotproof-smoke, which has no scale subresource" in (
        violation.message
    )
    assert "fix: use an integer minAvailable" in violation.message


# --- bucket lifecycle ------------------------------------------------------------------


def test_s3_rule_needing_newer_noncurrent_versions_never_purges(eks_dev: PlanResult) -> None:
    [rule] = _of(eks_dev, S3_LIFECYCLE, "checkpoints-lifecycle")["rules"]
    rule["noncurrentVersionExpiration"]["newerNoncurrentVersions"] = 2

    violation = _only(_recheck(eks_dev), "bucket-lifecycle")

    assert violation.resource == "eks-dev-checkpoints-bucket"
    assert "the data of deleted checkpoint" in violation.message
    assert "is never purged" in violation.message
    assert "drop NewerNoncurrentVersions" in violation.message


def test_s3_delete_markers_left_without_data_must_be_removed(eks_dev: PlanResult) -> None:
    [rule] = _of(eks_dev, S3_LIFECYCLE, "checkpoints-lifecycle")["rules"]
    del rule["expiration"]

    violation = _only(_recheck(eks_dev), "bucket-lifecycle")

    assert "the delete marker of deleted checkpoint" in violation.message
    assert "ExpiredObjectDeleteMarker" in violation.message


def test_s3_rule_expiring_current_versions_deletes_kept_checkpoints(eks_dev: PlanResult) -> None:
    [rule] = _of(eks_dev, S3_LIFECYCLE, "checkpoints-lifecycle")["rules"]
    rule["expiration"] = {"days": 30}

    violation = _only(_recheck(eks_dev), "bucket-lifecycle")

    assert "expires kept checkpoint" in violation.message
    assert "do not expire current versions" in violation.message


def test_gcs_rule_counting_newer_versions_never_purges(gke_dev: PlanResult) -> None:
    bucket = _of(gke_dev, GCS_BUCKET, "checkpoints-bucket")
    bucket["lifecycleRules"] = [
        {
            "action": {"type": "Delete"},
            "condition": {"numNewerVersions": 3, "withState": "ARCHIVED"},
        }
    ]

    violation = _only(_recheck(gke_dev), "bucket-lifecycle")

    assert "is never purged" in violation.message


def test_gcs_rule_purging_later_than_noncurrent_days_is_caught(gke_dev: PlanResult) -> None:
    bucket = _of(gke_dev, GCS_BUCKET, "checkpoints-bucket")
    rule = next(r for r in bucket["lifecycleRules"] if "daysSinceNoncurrentTime" in r["condition"])
    rule["condition"]["daysSinceNoncurrentTime"] = 30

    violation = _only(_recheck(gke_dev), "bucket-lifecycle")

    assert "is purged after 30 days, not within noncurrentDays (3)" in violation.message


AZURE_LIFECYCLE = "azure-native:storage:ManagementPolicy"
AZURE_BLOB_SERVICE = "azure-native:storage:BlobServiceProperties"


def _azure_rule(plan: PlanResult) -> dict[str, Any]:
    [rule] = _of(plan, AZURE_LIFECYCLE, "checkpoints-lifecycle")["policy"]["rules"]
    return rule["definition"]["actions"]


def test_azure_previous_versions_aged_from_their_first_write_are_purged_late() -> None:
    # The rule as first written: N days, which Azure counts from the key's first write.
    aks_prod = plan_of("aks-prod")
    _azure_rule(aks_prod)["version"]["delete"]["daysAfterCreationGreaterThan"] = 14

    violation = _only(_recheck(aks_prod), "bucket-lifecycle")

    assert violation.resource == "aks-prod-checkpoints-container"
    assert "is purged after 26 days, not within noncurrentDays (14)" in violation.message
    assert "a previous version's age counts from its first write" in violation.message


def test_azure_without_soft_delete_purges_a_deleted_checkpoint_at_once(
    aks_dev: PlanResult,
) -> None:
    _of(aks_dev, AZURE_BLOB_SERVICE, "checkpoints-blob-service")["deleteRetentionPolicy"] = {
        "enabled": False
    }

    violation = _only(_recheck(aks_dev), "bucket-lifecycle")

    assert "is purged after 0 days, before noncurrentDays (3) have passed" in violation.message


def test_azure_rule_deleting_current_blobs_expires_kept_checkpoints(aks_dev: PlanResult) -> None:
    _azure_rule(aks_dev)["baseBlob"] = {"delete": {"daysAfterModificationGreaterThan": 30}}

    violation = _only(_recheck(aks_dev), "bucket-lifecycle")

    assert "expires kept checkpoint" in violation.message


def test_azure_rule_for_another_container_never_purges(aks_dev: PlanResult) -> None:
    [rule] = _of(aks_dev, AZURE_LIFECYCLE, "checkpoints-lifecycle")["policy"]["rules"]
    rule["definition"]["filters"]["prefixMatch"] = ["other/"]

    violation = _only(_recheck(aks_dev), "bucket-lifecycle")

    assert "the data of deleted checkpoint" in violation.message and "never purged" in (
        violation.message
    )


# --- GKE's own add-ons and the system pool ---------------------------------------------


def test_gke_system_pool_tainted_critical_addons_only_leaves_gke_add_ons_homeless(
    gke_dev: PlanResult,
) -> None:
    system = _of(gke_dev, GKE_POOL, "gke-dev-system")
    system["nodeConfig"]["taints"] = [
        {"key": "CriticalAddonsOnly", "value": "true", "effect": "NO_SCHEDULE"}
    ]

    result = _recheck(gke_dev)

    fit = [v for v in result.violations if v.policy == "scheduling-fit"]
    # GKE's add-ons, and spotproof's JobSet controller and KEDA placed by the same contract.
    assert sorted(v.resource for v in fit) == [
        "gke-dev-jobset-chart",
        "gke-dev-keda-chart",
        "platform-add-ons",
    ]
    for violation in fit:
        # The charts' own toleration is named as the one that matches nothing, never as an
        # untolerated taint: the fix is to the pool's taint, not to the charts.
        assert "taint components.gke.io" not in violation.message
        assert "taint CriticalAddonsOnly=true:NoSchedule not tolerated" in violation.message
    charts = [v for v in fit if v.resource.endswith("-chart")]
    for violation in charts:
        assert (
            "its toleration components.gke.io/gke-managed-components=true:NoSchedule matches "
            "no taint of these pools, which carry CriticalAddonsOnly=true:NoSchedule"
        ) in violation.message
    [policy] = [v for v in result.violations if v.policy == "gke-system-pool-on-demand"]
    assert "components.gke.io/gke-managed-components=true:NO_SCHEDULE" in policy.message


def test_gke_spot_pools_start_from_zero_nodes(gke_dev: PlanResult) -> None:
    for name in ("l4-spot", "t4-spot"):
        pool = _of(gke_dev, GKE_POOL, name)
        assert pool["initialNodeCount"] == 0
        assert pool["autoscaling"]["locationPolicy"] == "ANY"
