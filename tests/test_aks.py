"""AKS: the fleet's AKS section, the cluster's pools and storage as rendered, the plan's
scale-up and preemption-path lines, the AKS policies, and each piece on an existing
cluster."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest

from spotproof import plan as spotproof_plan
from spotproof.aks import (
    AutoProvisionedPools,
    AutoProvisionedPoolsArgs,
    CheckpointBucket,
    CheckpointBucketArgs,
    GpuAgentPools,
    GpuAgentPoolsArgs,
)
from spotproof.catalog import aks as aks_catalog
from spotproof.fleet import BucketSpec, Capacity, SpecError, fleet_from_config
from spotproof.fleet.aks import AutoProvisionedPool, GpuAgentPool
from spotproof.kube.smoke import run_prefix
from spotproof.kube.workload import ServiceAccountRef
from spotproof.plan import PlanResult
from spotproof.testing import Recording, record
from tests.support import REPO, plan_refuses_config, run_cli, set_key, stack_config

AGENT_POOL = "azure-native:containerservice:AgentPool"
CLUSTER = "azure-native:containerservice:ManagedCluster"
ROLE = "azure-native:authorization:RoleAssignment"
STORAGE = "azure-native:storage:StorageAccount"
AKS_SPOT_TAINT = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"


def _violations(plan: PlanResult) -> list[str]:
    result = spotproof_plan.check(plan.spec, plan.recording)
    return [f"{v.policy}: {v.message}" for v in result.violations]


# --- the stacks' scale-up and preemption lines -------------------------------------------


def test_agent_pool_stack_scales_up_with_the_aks_autoscaler_and_drains_on_preempt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "plan", "--stack", "aks-dev", "--project-dir", str(REPO))
    assert code == 0
    assert "spott4 (AKS cluster autoscaler, 0-4 nodes" in out
    assert "on AKS spot (spota100, spott4): Preempt notice 30 s (best effort)" in out
    assert "SIGTERM at 0 s with 30 s grace (declared 30 s)" in out


def test_node_auto_provisioning_stack_scales_up_with_karpenter_within_its_gpu_limits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "plan", "--stack", "aks-prod", "--project-dir", str(REPO))
    assert code == 0
    assert "gpu-spot (Karpenter, up to 8 nvidia.com/gpu)" in out
    assert "on AKS spot (Karpenter) (gpu-spot, gpu-spot-x8): notice 30 s" in out


# --- what is rendered --------------------------------------------------------------------


def test_spot_agent_pool_declares_what_aks_adds_so_a_second_up_shows_no_diff(
    aks_dev: PlanResult,
) -> None:
    pool = aks_dev.recording.one(AGENT_POOL, "aks-dev-gpu-spott4").inputs
    assert pool["scaleSetPriority"] == "Spot"
    assert pool["scaleSetEvictionPolicy"] == "Delete"
    assert pool["spotMaxPrice"] == -1
    assert AKS_SPOT_TAINT in pool["nodeTaints"]
    assert "spotproof.dev/capacity=spot:NoSchedule" in pool["nodeTaints"]
    assert (pool["enableAutoScaling"], pool["minCount"], pool["maxCount"]) == (True, 0, 4)
    assert pool["gpuProfile"] == {"driver": "Install"}
    assert pool["mode"] == "User"


def test_system_pool_is_regular_tainted_and_declared_with_the_cluster(
    aks_dev: PlanResult,
) -> None:
    cluster = aks_dev.recording.one(CLUSTER, "aks-dev").inputs
    [system] = cluster["agentPoolProfiles"]
    assert system["mode"] == "System"
    assert system["nodeTaints"] == ["CriticalAddonsOnly=true:NoSchedule"]
    assert "scaleSetPriority" not in system
    assert system["minCount"] >= 2
    assert cluster["oidcIssuerProfile"]["enabled"] is True
    assert cluster["securityProfile"]["workloadIdentity"]["enabled"] is True
    assert cluster["networkProfile"]["networkPluginMode"] == "overlay"
    assert cluster["networkProfile"]["networkDataplane"] == "cilium"


def test_node_auto_provisioning_cluster_has_a_fixed_system_pool_and_no_default_pools(
    aks_prod: PlanResult,
) -> None:
    cluster = aks_prod.recording.one(CLUSTER, "aks-prod").inputs
    assert cluster["nodeProvisioningProfile"] == {"mode": "Auto", "defaultNodePools": "None"}
    [system] = cluster["agentPoolProfiles"]
    assert system["enableAutoScaling"] is False
    assert system["count"] == 3
    assert not aks_prod.recording.of_type(AGENT_POOL)


def test_auto_provisioned_spot_pool_carries_its_own_spot_taint_and_names_an_aks_node_class(
    aks_prod: PlanResult,
) -> None:
    pool = aks_prod.recording.one(
        "kubernetes:karpenter.sh/v1:NodePool", "aks-prod-autoprovisioned-gpu-spot"
    ).inputs
    template = pool["spec"]["template"]["spec"]
    assert template["nodeClassRef"] == {
        "group": "karpenter.azure.com",
        "kind": "AKSNodeClass",
        "name": "gpu-spot",
    }
    assert {"key": "spotproof.dev/capacity", "value": "spot", "effect": "NoSchedule"} in template[
        "taints"
    ]
    assert pool["spec"]["limits"] == {"nvidia.com/gpu": "8"}
    assert template["terminationGracePeriod"] == "30s"
    node_class = aks_prod.recording.one(
        "kubernetes:karpenter.azure.com/v1beta1:AKSNodeClass",
        "aks-prod-autoprovisioned-gpu-spot-class",
    ).inputs
    assert node_class["spec"]["gpu"] == {"mode": "Driver"}


def test_storage_account_refuses_keys_and_public_access(aks_dev: PlanResult) -> None:
    account = aks_dev.recording.one(STORAGE, "aks-dev-checkpoints-account").inputs
    assert account["allowSharedKeyAccess"] is False
    assert account["allowBlobPublicAccess"] is False
    assert account["minimumTlsVersion"] == "TLS1_2"
    assert account["defaultToOAuthAuthentication"] is True


def test_trainer_role_is_scoped_to_the_container_alone(aks_dev: PlanResult) -> None:
    role = aks_dev.recording.one(ROLE, "aks-dev-checkpoints-trainer-writes-container").inputs
    assert role["scope"].endswith("/blobServices/default/containers/spotproof")
    assert role["roleDefinitionId"].endswith("ba92f5b4-2d11-453d-a403-e96b0029c9fe")
    assert role["principalType"] == "ServicePrincipal"


def test_smoke_job_uses_workload_identity_and_tolerates_the_aks_spot_taint(
    aks_dev: PlanResult,
) -> None:
    job = aks_dev.recording.one("kubernetes:batch/v1:Job", "aks-dev-smoke-job").inputs
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["AZURE_STORAGE_ACCOUNT_NAME"] == aks_dev.spec.bucket.name
    run = run_prefix(aks_dev.spec.smoke_test)  # type: ignore[arg-type]
    assert env["CHECKPOINT_URL"] == f"az://spotproof/checkpoints/smoke/{run}"
    assert {
        "key": "kubernetes.azure.com/scalesetpriority",
        "operator": "Equal",
        "value": "spot",
        "effect": "NoSchedule",
    } in pod["spec"]["tolerations"]
    account = aks_dev.recording.one("kubernetes:core/v1:ServiceAccount", "aks-dev-trainer")
    assert "azure.workload.identity/client-id" in account.inputs["metadata"]["annotations"]


def test_smoke_job_on_spot_agent_pools_has_no_budget_that_would_hold_the_preempt_drain(
    aks_dev: PlanResult,
) -> None:
    assert not aks_dev.recording.of_type("kubernetes:policy/v1:PodDisruptionBudget")


# --- the plan catches what breaks on a real cluster ------------------------------------


def test_a_budget_holding_the_preempt_drain_fails_the_preemption_path(
    aks_dev: PlanResult,
) -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "hold", "namespace": "spotproof"},
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "spotproof-smoke"}},
        },
    }
    job = aks_dev.recording.one("kubernetes:batch/v1:Job", "aks-dev-smoke-job")
    aks_dev.recording.resources.append(
        type(job)("kubernetes:policy/v1:PodDisruptionBudget", "hold", "urn:hold", None, True, pdb)
    )
    messages = _violations(aks_dev)
    assert any(
        m.startswith("preemption-path:") and "PodDisruptionBudget hold" in m for m in messages
    ), messages


def test_spot_agent_pool_without_the_contract_taint_fails_policy(aks_dev: PlanResult) -> None:
    pool = aks_dev.recording.one(AGENT_POOL, "aks-dev-gpu-spott4").inputs
    pool["nodeTaints"] = [AKS_SPOT_TAINT, "nvidia.com/gpu=present:NoSchedule"]
    messages = _violations(aks_dev)
    assert any("spot pool spott4 lacks taint spotproof.dev/capacity" in m for m in messages)


def test_storage_account_with_shared_keys_fails_policy(aks_dev: PlanResult) -> None:
    aks_dev.recording.one(STORAGE, "aks-dev-checkpoints-account").inputs["allowSharedKeyAccess"] = (
        True
    )
    assert any("allowSharedKeyAccess must be false" in m for m in _violations(aks_dev))


def test_role_on_the_whole_account_fails_policy(aks_dev: PlanResult) -> None:
    role = aks_dev.recording.one(ROLE, "aks-dev-checkpoints-trainer-writes-container").inputs
    role["scope"] = role["scope"].split("/blobServices/")[0]
    assert any(m.startswith("aks-role-scoped-to-container") for m in _violations(aks_dev))


def test_misspelt_aks_node_class_field_fails_the_schema_check(aks_prod: PlanResult) -> None:
    node_class = aks_prod.recording.one(
        "kubernetes:karpenter.azure.com/v1beta1:AKSNodeClass",
        "aks-prod-autoprovisioned-gpu-spot-class",
    ).inputs
    node_class["spec"]["osDiskSizeGb"] = node_class["spec"].pop("osDiskSizeGB")
    assert any("/spec/osDiskSizeGb: unknown field" in m for m in _violations(aks_prod))


# --- bad config: exit 2, one line ------------------------------------------------------


def _first_pool(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(config: dict[str, Any]) -> None:
        config["spotproof:gpuPools"][0][field] = value

    return mutate


BAD_AKS_INPUT: dict[str, tuple[Callable[[dict[str, Any]], Any], str, str]] = {
    "an unknown VM size": (
        _first_pool("vmSize", "Standard_NC99_Z100"),
        "spotproof:gpuPools[0].vmSize",
        "Standard_NC4as_T4_v3",
    ),
    "a GPU count the size lacks": (
        _first_pool("gpusPerNode", 4),
        "spotproof:gpuPools[0].vmSize",
        "has 1 GPUs, not gpusPerNode 4",
    ),
    "a spot system pool": (
        set_key("spotproof:systemPool.capacity", "spot"),
        "spotproof:systemPool.capacity",
        "on-demand",
    ),
    "a grace period above the 30 s notice": (
        set_key("spotproof:smokeTest.gracePeriodSeconds", 45),
        "spotproof:smokeTest.gracePeriodSeconds = 45",
        "<= 30",
    ),
    "a pool name longer than AKS allows": (
        _first_pool("name", "spotgpupoolnumber1"),
        "spotproof:gpuPools[0].name",
        "1-12 lowercase letters and digits",
    ),
    "a system pool of one node": (
        set_key("spotproof:systemPool.minNodes", 1),
        "spotproof:systemPool.minNodes",
        ">= 2",
    ),
    "agent pools beside node auto-provisioning": (
        set_key(
            "spotproof:autoProvisionedPools",
            [{"name": "nap", "vmSizes": ["Standard_NC24ads_A100_v4"], "gpuLimit": 2}],
        ),
        "spotproof:gpuPools",
        "not both",
    ),
    "no location": (
        lambda config: config.pop("azure-native:location"),
        "azure-native:location",
        "eastus2",
    ),
    "a storage account name Azure refuses": (
        set_key("spotproof:checkpointBucket.name", "has-dashes"),
        "spotproof:checkpointBucket.name",
        "3-24 lowercase letters and digits",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_AKS_INPUT))
def test_bad_aks_config_exits_2_with_one_line_naming_key_and_allowed_values(
    case: str, make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    mutate, key, hint = BAD_AKS_INPUT[case]
    config = stack_config("aks-dev")
    mutate(config)

    err = plan_refuses_config(capsys, make_project(config, stack="aks-test"), "aks-test")

    assert key in err and hint in err, err


def test_node_auto_provisioning_refuses_an_autoscaled_system_pool() -> None:
    config = stack_config("aks-prod")
    config["spotproof:systemPool"]["maxNodes"] = 5
    with pytest.raises(SpecError, match=r"systemPool\.maxNodes.*cannot autoscale"):
        fleet_from_config("aks-prod", config)


def test_default_storage_account_names_differ_per_stack_and_region() -> None:
    names = {
        fleet_from_config(
            stack, {**stack_config("aks-dev"), "azure-native:location": region}
        ).bucket.name
        for stack in ("aks-dev", "aks-dev2")
        for region in ("eastus2", "westeurope")
    }
    assert len(names) == 4
    assert all(3 <= len(n) <= 24 and n.isalnum() and n.islower() for n in names)


# --- each piece on a cluster the user already has -------------------------------------


def _existing_cluster() -> pulumi.Output[str]:
    return pulumi.Output.from_input("research-aks")


def test_gpu_agent_pools_alone_join_an_existing_cluster_and_group() -> None:
    pool = GpuAgentPool(
        name="spoth100", vm_size="Standard_NC40ads_H100_v5", gpus_per_node=1, max_nodes=3
    )

    def program() -> None:
        GpuAgentPools(
            "gpu",
            GpuAgentPoolsArgs(
                cluster_name=_existing_cluster(),
                resource_group_name=pulumi.Output.from_input("research-rg"),
                pools=(pool,),
            ),
        )

    recording = record(program, stack="research", project="platform")
    [agent_pool] = recording.of_type(AGENT_POOL)
    assert agent_pool.inputs["resourceName"] == "research-aks"
    assert agent_pool.inputs["resourceGroupName"] == "research-rg"
    assert agent_pool.inputs["agentPoolName"] == "spoth100"
    assert AKS_SPOT_TAINT in agent_pool.inputs["nodeTaints"]


def test_on_demand_agent_pool_alone_is_regular_without_the_spot_taint() -> None:
    pool = GpuAgentPool(
        name="odt4",
        vm_size="Standard_NC4as_T4_v3",
        gpus_per_node=1,
        max_nodes=1,
        capacity=Capacity.ON_DEMAND,
    )

    def program() -> None:
        GpuAgentPools(
            "gpu",
            GpuAgentPoolsArgs(
                cluster_name=_existing_cluster(),
                resource_group_name="research-rg",
                pools=(pool,),
            ),
        )

    [agent_pool] = record(program, stack="research", project="platform").of_type(AGENT_POOL)
    assert agent_pool.inputs["scaleSetPriority"] == "Regular"
    assert "scaleSetEvictionPolicy" not in agent_pool.inputs
    assert AKS_SPOT_TAINT not in agent_pool.inputs["nodeTaints"]


def test_auto_provisioned_pools_alone_apply_through_the_given_provider() -> None:
    pool = AutoProvisionedPool(
        name="gpu-spot",
        vm_sizes=("Standard_NC24ads_A100_v4", "Standard_NC40ads_H100_v5"),
        gpus_per_node=1,
        gpu_limit=8,
    )
    existing = pulumi.ProviderResource("kubernetes", "research-aks", {"kubeconfig": "{}"})

    def program() -> None:
        AutoProvisionedPools(
            "nap",
            AutoProvisionedPoolsArgs(pools=(pool,)),
            opts=pulumi.ResourceOptions(provider=existing),
        )

    recording = record(program, stack="research", project="platform")
    [node_class] = recording.of_type("kubernetes:karpenter.azure.com/v1beta1:AKSNodeClass")
    [node_pool] = recording.of_type("kubernetes:karpenter.sh/v1:NodePool")
    assert node_pool.provider is not None
    assert "pulumi:providers:kubernetes::research-aks::" in node_pool.provider
    spec = node_pool.inputs["spec"]
    assert spec["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.azure.com",
        "kind": "AKSNodeClass",
        "name": node_class.inputs["metadata"]["name"],
    }
    assert {
        "key": "karpenter.azure.com/sku-name",
        "operator": "In",
        "values": ["Standard_NC24ads_A100_v4", "Standard_NC40ads_H100_v5"],
    } in spec["template"]["spec"]["requirements"]
    assert spec["limits"] == {"nvidia.com/gpu": "8"}


def test_checkpoint_storage_alone_federates_the_trainer_to_the_given_issuer() -> None:
    issuer = "https://eastus2.oic.prod-aks.azure.com/tenant/existing/"

    def program() -> None:
        CheckpointBucket(
            "checkpoints",
            CheckpointBucketArgs(
                bucket=BucketSpec(name="researchckpt", location="eastus2"),
                resource_group_name="research-rg",
                location="eastus2",
                oidc_issuer_url=pulumi.Output.from_input(issuer),
                trainer=ServiceAccountRef("ml", "trainer"),
                name_prefix="research",
            ),
        )

    recording: Recording = record(program, stack="research", project="platform")
    [federation] = recording.of_type("azure-native:managedidentity:FederatedIdentityCredential")
    assert federation.inputs["issuer"] == issuer
    assert federation.inputs["subject"] == "system:serviceaccount:ml:trainer"
    assert federation.inputs["audiences"] == ["api://AzureADTokenExchange"]
    [account] = recording.of_type(STORAGE)
    assert account.inputs["accountName"] == "researchckpt"


def test_catalog_sizes_follow_the_azure_naming_rule() -> None:
    assert all(aks_catalog.VM_SIZE.fullmatch(name) for name in aks_catalog.GPU_VM_SIZES)
    assert all(size.gpus in (1, 2, 4, 8) for size in aks_catalog.GPU_VM_SIZES.values())
