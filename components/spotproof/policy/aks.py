"""Rules for AKS resources: agent pools, the cluster, the storage account and the trainer's
role assignment."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof import scheduling
from spotproof.catalog import Cloud
from spotproof.catalog.aks import BLOB_DATA_CONTRIBUTOR, confined_prefix
from spotproof.fleet.aks import PLATFORM_SPOT_TAINT
from spotproof.fleet.pools import PoolClass
from spotproof.policy import aks_drill, exposure
from spotproof.policy.base import PlannedResource, ResourceRule, StackRule
from spotproof.policy.identity_readiness import IdentityBinding
from spotproof.scheduling import aks as aks_shapes
from spotproof.scheduling import node_shapes

AGENT_POOL = aks_shapes.AGENT_POOL
CLUSTER = aks_shapes.CLUSTER
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"


def agent_pool(inputs: Mapping[str, Any]) -> Iterator[str]:
    shape = aks_shapes.agent_pool(inputs)
    name = shape.pool
    if node_shapes.pool_class(shape) == PoolClass.SYSTEM or inputs.get("mode") == "System":
        if shape.spot:
            yield f"pool {name}: the system pool must be Regular: add-ons cannot survive evictions"
        if scheduling.system_taint(Cloud.AKS) not in shape.taints:
            yield f"pool {name}: the system pool must be tainted CriticalAddonsOnly=true:NoSchedule"
        return
    if not shape.spot:
        return
    spot_taint = scheduling.contract(PoolClass.SPOT_GPU).taints[0]
    declared = inputs.get("nodeTaints") or []
    if spot_taint not in shape.taints:
        yield (
            f"spot pool {name} lacks taint {spot_taint.key}={spot_taint.value}:NoSchedule; "
            "workloads that tolerate AKS's spot taint alone could land on it"
        )
    if scheduling.aks_taint(PLATFORM_SPOT_TAINT) not in declared:
        yield (
            f"spot pool {name} must declare {scheduling.aks_taint(PLATFORM_SPOT_TAINT)}: "
            "AKS adds it anyway, and leaving it out shows a diff on every up"
        )
    if inputs.get("scaleSetEvictionPolicy") != "Delete":
        yield f"spot pool {name}: scaleSetEvictionPolicy must be Delete (Deallocate keeps quota)"


def cluster(inputs: Mapping[str, Any]) -> Iterator[str]:
    for pool in aks_shapes.cluster_pools(inputs):
        yield from agent_pool(pool)
    if not (inputs.get("oidcIssuerProfile") or {}).get("enabled"):
        yield "the OIDC issuer must be enabled: workload identity federates to it"
    identity = (inputs.get("securityProfile") or {}).get("workloadIdentity") or {}
    if not identity.get("enabled"):
        yield "workload identity must be enabled: the trainer gets no keys"
    if not (inputs.get("networkProfile") or {}).get("networkPolicy"):
        yield (
            "networkProfile.networkPolicy is unset, so NetworkPolicies are accepted and "
            "ignored; allowed: cilium (with the cilium dataplane)"
        )


def storage_account(inputs: Mapping[str, Any]) -> Iterator[str]:
    if inputs.get("allowSharedKeyAccess") is not False:
        yield "allowSharedKeyAccess must be false: only Microsoft Entra identities may write"
    if inputs.get("allowBlobPublicAccess") is not False:
        yield "allowBlobPublicAccess must be false"
    if inputs.get("minimumTlsVersion") != "TLS1_2":
        yield "minimumTlsVersion must be TLS1_2 (unset means TLS 1.0)"


def role_scoped_to_container(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """A blob data role applies to one container, never the account or wider, and to one
    prefix of it (``catalog.aks.blobs_under``), as GKE's and EKS's grants do."""
    for role in (r for r in resources if r.type == ROLE_ASSIGNMENT):
        if not str(role.inputs.get("roleDefinitionId", "")).endswith(BLOB_DATA_CONTRIBUTOR):
            continue
        scope = str(role.inputs.get("scope", ""))
        if "/blobServices/default/containers/" not in scope:
            yield (
                role.name,
                f"Storage Blob Data Contributor scoped to {scope or '(none)'}, not a container",
            )
        condition = str(role.inputs.get("condition") or "")
        if confined_prefix(condition, role.inputs.get("conditionVersion")) is None:
            yield (
                role.name,
                "Storage Blob Data Contributor without the version 2.0 condition that "
                "confines it to one prefix: it may read, list and delete every blob of the "
                "container; allowed: spotproof.catalog.aks.blobs_under(prefix)",
            )


# --- what the internet can reach (``policy.exposure``) --------------------
# Unless told otherwise AKS's API server answers any address.


def api_restricted(inputs: Mapping[str, Any]) -> Iterator[str]:
    profile = inputs.get("apiServerAccessProfile") or {}
    if profile.get("enablePrivateCluster"):
        return
    ranges = profile.get("authorizedIPRanges") or []
    if not ranges:
        yield f"the API server accepts every address; {exposure.FIX}"
    elif opened := exposure.open_ranges(ranges):
        yield f"authorized range {opened[0]} opens the API to everyone; {exposure.FIX}"
    for pool in inputs.get("agentPoolProfiles") or []:
        if pool.get("enableNodePublicIP"):
            yield f"agent pool {pool.get('name')} gives each node a public IP"


def pool_private(inputs: Mapping[str, Any]) -> Iterator[str]:
    if inputs.get("enableNodePublicIP"):
        yield "enableNodePublicIP gives each node of this pool a public IP"


# --- the identity a pod runs as (``policy.identity_readiness``) ----------------------

FEDERATED_CREDENTIAL = "azure-native:managedidentity:FederatedIdentityCredential"


def _federated_account(inputs: Mapping[str, Any]) -> tuple[str, str] | None:
    """A credential whose subject is ``system:serviceaccount:NAMESPACE:NAME``."""
    parts = str(inputs.get("subject", "")).split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return parts[2], parts[3]
    return None


# A role assignment names the identity by its principal id, an output the plan does not
# see: only the federated credential is checked.
IDENTITY_BINDINGS = (IdentityBinding(FEDERATED_CREDENTIAL, _federated_account),)


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule(
        "aks-agent-pool-safe", "Spot pools tainted; system pool Regular.", AGENT_POOL, agent_pool
    ),
    ResourceRule(
        "aks-cluster-safe",
        "System pool, OIDC, workload identity, NetworkPolicy enforced.",
        CLUSTER,
        cluster,
    ),
    ResourceRule(
        "aks-storage-hardened",
        "Storage account private, Entra-only, TLS 1.2.",
        STORAGE_ACCOUNT,
        storage_account,
    ),
    ResourceRule(
        "aks-api-restricted",
        "The Kubernetes API is private or open to named networks only.",
        CLUSTER,
        api_restricted,
    ),
    ResourceRule(
        "aks-pool-private-nodes",
        "Agent pools give nodes no public IPs.",
        AGENT_POOL,
        pool_private,
    ),
)

STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "aks-role-scoped-to-container",
        "A blob data role reaches one prefix of one container only.",
        role_scoped_to_container,
    ),
    *aks_drill.STACK_RULES,
)
