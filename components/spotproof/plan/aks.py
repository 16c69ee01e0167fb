"""AKS in the offline plan: what its resources answer under mocks, how an agent pool gets
nodes (the cluster autoscaler), what a spot reclaim does to its pods (node auto-drain),
why a private cluster's API is out of any runner's reach, where AKS's driver choice leaves
GPUs advertised, and the node auto-provisioning release whose objects are checked.
Karpenter's scaling and reclaim are shared (``plan.simulation``)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from typing import Any

from spotproof.catalog import Cloud, profile
from spotproof.catalog import aks as aks_catalog
from spotproof.fleet import ApiAccess
from spotproof.plan.cloud import CloudPlan
from spotproof.plan.model import Ending, PreemptionPath, Provisioner, Release, Scaling
from spotproof.plan.recording.offline import CallFaker, CloudRecording, OfflineCloud, OutputFaker
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation import preemption
from spotproof.plan.simulation.nodes import node_count
from spotproof.scheduling import aks as aks_shapes
from spotproof.scheduling.fit import NodeShape

NODE_CLASS = "kubernetes:karpenter.azure.com/v1beta1:AKSNodeClass"

# --- what Azure answers offline -----------------------------------------------------------


def _arm_id(
    cloud: OfflineCloud, inputs: Mapping[str, Any], provider: str, name_key: str, name: str
) -> dict[str, Any]:
    """``name`` and ARM ``id`` of a resource in ``inputs``' resource group, as Azure gives
    them (``/subscriptions/S/resourceGroups/G/providers/<provider>/NAME``)."""
    named = inputs.get(name_key, name)
    group = inputs.get("resourceGroupName")
    return {
        "name": named,
        "id": f"/subscriptions/{cloud.subscription}/resourceGroups/{group}/providers/"
        f"{provider}/{named}",
    }


def _monitor_workspace(name: str, inputs: dict[str, Any], cloud: OfflineCloud) -> dict[str, Any]:
    """The workspace's id (``.../providers/microsoft.monitor/accounts/NAME``,
    ``AddonArmTemplate/FullAzureMonitorMetricsProfileParameters.json``) and Prometheus query
    endpoint, ``https://NAME-SUFFIX.REGION.prometheus.monitor.azure.com`` (the workspaces of
    ``.pipelines/azure-pipeline-config-tests.yml``), both Azure/prometheus-collector@39583fd."""
    named = _arm_id(cloud, inputs, "Microsoft.Monitor/accounts", "azureMonitorWorkspaceName", name)
    endpoint = (
        f"https://{named['name']}-offline.{inputs.get('location')}.prometheus.monitor.azure.com"
    )
    return {**named, "metrics": {"prometheusQueryEndpoint": endpoint}}


OUTPUTS: dict[str, OutputFaker] = {
    "azure-native:resources:ResourceGroup": lambda name, inputs, cloud: {
        "name": inputs.get("resourceGroupName", name),
        "id": f"/subscriptions/{cloud.subscription}/resourceGroups/"
        + inputs.get("resourceGroupName", name),
    },
    "azure-native:containerservice:ManagedCluster": lambda name, inputs, cloud: {
        **_arm_id(
            cloud, inputs, "Microsoft.ContainerService/managedClusters", "resourceName", name
        ),
        # AKS's own group for the cluster's nodes, unless the cluster names one
        # (https://learn.microsoft.com/azure/aks/faq#why-are-two-resource-groups-created-with-aks).
        "nodeResourceGroup": inputs.get("nodeResourceGroup")
        or f"MC_{inputs.get('resourceGroupName')}_{inputs.get('resourceName', name)}_"
        f"{inputs.get('location')}",
        "oidcIssuerProfile": {
            **inputs.get("oidcIssuerProfile", {}),
            "issuerURL": f"https://{inputs.get('location')}.oic.prod-aks.azure.com/"
            f"{cloud.tenant}/offline/",
        },
    },
    "azure-native:authorization:RoleDefinition": lambda name, inputs, cloud: {
        "name": inputs.get("roleDefinitionId", name),
        "id": f"/subscriptions/{cloud.subscription}/providers/Microsoft.Authorization/"
        f"roleDefinitions/{inputs.get('roleDefinitionId', name)}",
    },
    "azure-native:managedidentity:UserAssignedIdentity": lambda name, inputs, cloud: {
        "name": inputs.get("resourceName", name),
        # One pair per identity, as Azure gives: rules tell identities apart by them.
        "clientId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"client/{name}")),
        "principalId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"principal/{name}")),
        "tenantId": cloud.tenant,
    },
    "azure-native:storage:StorageAccount": lambda name, inputs, _cloud: {
        "name": inputs.get("accountName", name),
    },
    "azure-native:storage:BlobContainer": lambda name, inputs, cloud: {
        "name": inputs.get("containerName", name),
        "id": f"/subscriptions/{cloud.subscription}/resourceGroups/"
        f"{inputs.get('resourceGroupName')}/providers/Microsoft.Storage/storageAccounts/"
        f"{inputs.get('accountName')}/blobServices/default/containers/"
        f"{inputs.get('containerName', name)}",
    },
    "azure-native:storage:Queue": lambda name, inputs, cloud: {
        "name": inputs.get("queueName", name),
        "id": f"/subscriptions/{cloud.subscription}/resourceGroups/"
        f"{inputs.get('resourceGroupName')}/providers/Microsoft.Storage/storageAccounts/"
        f"{inputs.get('accountName')}/queueServices/default/queues/"
        f"{inputs.get('queueName', name)}",
    },
    "azure-native:monitor:AzureMonitorWorkspace": _monitor_workspace,
    "azure-native:monitor:DataCollectionEndpoint": lambda name, inputs, cloud: _arm_id(
        cloud,
        inputs,
        "Microsoft.Insights/dataCollectionEndpoints",
        "dataCollectionEndpointName",
        name,
    ),
    "azure-native:monitor:DataCollectionRule": lambda name, inputs, cloud: _arm_id(
        cloud, inputs, "Microsoft.Insights/dataCollectionRules", "dataCollectionRuleName", name
    ),
    "azure-native:alertsmanagement:PrometheusRuleGroup": lambda name, inputs, cloud: _arm_id(
        cloud, inputs, "Microsoft.AlertsManagement/prometheusRuleGroups", "ruleGroupName", name
    ),
}
CALLS: dict[str, CallFaker] = {
    "azure-native:authorization:getClientConfig": lambda cloud: {
        "subscriptionId": cloud.subscription,
        "tenantId": cloud.tenant,
        "clientId": "44444444-4444-4444-4444-444444444444",
        "objectId": "55555555-5555-5555-5555-555555555555",
    },
    "azure-native:containerservice:listManagedClusterUserCredentials": lambda _cloud: {
        "kubeconfigs": [
            {
                "name": "clusterUser",
                "value": base64.b64encode(
                    b"apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n"
                ).decode(),
            }
        ]
    },
}


# --- how an agent pool gets nodes ---------------------------------------------------------


def agent_pool_scaling(resource: str, inputs: Mapping[str, Any]) -> Scaling:
    autoscaled = bool(inputs.get("enableAutoScaling"))
    size = aks_catalog.GPU_VM_SIZES.get(str(inputs.get("vmSize")))
    count = inputs.get("count")
    return Scaling(
        provisioner=Provisioner.CLUSTER_AUTOSCALER if autoscaled else Provisioner.NONE,
        resource=resource,
        min_nodes=node_count(inputs.get("minCount") if autoscaled else count),
        max_nodes=node_count(inputs.get("maxCount") if autoscaled else count),
        zones=tuple(str(z) for z in inputs.get("availabilityZones") or ()),
        autoscaler="AKS cluster autoscaler",
        machine_type=inputs.get("vmSize"),
        accelerator=size.gpu if size else None,
    )


# --- what a spot reclaim does -------------------------------------------------------------


def spot_path(
    workload: str,
    shapes: tuple[NodeShape, ...],
    pod: Mapping[str, Any],
    blocking_budgets: list[str],
) -> PreemptionPath:
    """AKS spot agent pools (``articles/virtual-machines/linux/scheduled-events.md``: a
    ``Preempt`` event comes at least 30 s ahead, best effort; ``articles/aks/node-auto-drain.md``:
    AKS cordons and drains the node on ``Preempt``, best effort): the drain evicts, so a
    PodDisruptionBudget allowing no disruption holds SIGTERM back, and nothing ends that
    wait before the VM is gone. Without one the pod gets SIGTERM at once, with up to 30 s."""
    notice = profile(Cloud.AKS).preemption_notice_seconds
    pools = tuple(shape.pool for shape in shapes)
    declared = preemption.pod_grace(pod)
    steps = [f"Preempt notice {notice} s (best effort)", "AKS node auto-drain evicts at once"]
    fix = (
        f"remove PodDisruptionBudget {', '.join(blocking_budgets)} (AKS's drain has no bound "
        "that would end its wait) and keep terminationGracePeriodSeconds at most "
        f"{notice}"
    )
    if blocking_budgets:
        steps.append(
            f"PodDisruptionBudget {', '.join(blocking_budgets)} holds the eviction and nothing "
            "ends the wait"
        )
        return preemption.node_gone_first(
            workload, "AKS spot", pools, notice=notice, declared=declared, steps=steps, fix=fix
        )
    grace = min(declared, notice)
    steps += [
        f"SIGTERM at 0 s with {grace:g} s grace (declared {declared} s)",
        f"node gone at {notice} s",
    ]
    return PreemptionPath(
        workload, "AKS spot", pools, notice, 0, grace, declared, tuple(steps), Ending.EVICTION, fix
    )


# --- reaching a private API ---------------------------------------------------------------


def private_api(_access: ApiAccess, _recording: Recording, _server: str | None) -> list[str]:
    """A private cluster's API server answers inside the cluster's VNet only, a VNet AKS
    creates with the cluster; a public FQDN "doesn't create a public API endpoint or remove
    the requirement for network connectivity", and ``az aks command invoke`` is "not for
    programmatic access" (MicrosoftDocs/azure-aks-docs ``articles/aks/private-clusters.md``,
    ``access-private-cluster.md``). spotproof does not join an existing VNet, so a private
    AKS stack cannot be deployed by any runner."""
    return [
        "an AKS private cluster's API answers only inside the VNet AKS creates with it, "
        "so no runner can create this stack's Kubernetes objects; allowed: "
        "apiAccess.authorizedNetworks with the runner's addresses"
    ]


# --- GPUs and the controllers AKS runs ----------------------------------------------------


def gpu_plugin(inputs: Mapping[str, Any]) -> str | None:
    """An agent pool whose driver is left to the GPU Operator (``gpuDriver: None``) is taken
    as advertised by the Operator's plugin, which the plan cannot see."""
    driver = (inputs.get("gpuProfile") or {}).get("driver", "Install")
    return "the GPU Operator's (gpuDriver None)" if driver == "None" else None


def node_class_plugin(spec: Mapping[str, Any]) -> str | None:
    """The same for a node auto-provisioning node class (``gpu.mode: None``)."""
    if (spec.get("gpu") or {}).get("mode") == "None":
        return "the GPU Operator's (gpu.mode None)"
    return None


def releases(platform: Any) -> list[Release]:
    """Node auto-provisioning's Karpenter, at the release AKS runs."""
    if not getattr(platform, "node_auto_provisioning", False):
        return []
    return [
        Release(
            "AKS node auto-provisioning (karpenter-provider-azure)",
            aks_catalog.NAP_KARPENTER_VERSION,
            ("karpenter.sh", aks_shapes.KARPENTER_GROUP),
            aks_catalog.NAP_INTRODUCED,
        )
    ]


PLAN = CloudPlan(
    recording=CloudRecording(
        outputs=OUTPUTS,
        calls=CALLS,
        cluster_inputs={aks_shapes.CLUSTER: "resourceName", aks_shapes.AGENT_POOL: "resourceName"},
    ),
    scalings={aks_shapes.AGENT_POOL: agent_pool_scaling},
    spot_path=spot_path,
    private_api=private_api,
    gpu_plugins={aks_shapes.AGENT_POOL: gpu_plugin, aks_shapes.CLUSTER: gpu_plugin},
    node_classes={aks_shapes.KARPENTER_GROUP: (NODE_CLASS, node_class_plugin)},
    unadvertised=(
        "AKS installs the driver only, and no NVIDIA device plugin DaemonSet lands there"
    ),
    releases=releases,
)
