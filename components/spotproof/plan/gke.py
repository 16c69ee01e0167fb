"""GKE in the offline plan: what its resources answer under mocks, how its node pools get
nodes (the cluster autoscaler, within node auto-provisioning's limits), what a spot reclaim
does to their pods, whether a private API is reachable through the DNS endpoint, and the
device plugin GKE runs itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import Cloud, gke_spot, nvidia, profile
from spotproof.catalog import gke as gke_catalog
from spotproof.catalog.labels import GKE_NODEPOOL_LABEL
from spotproof.fleet import ApiAccess
from spotproof.plan.cloud import CloudPlan
from spotproof.plan.model import Ending, Pool, PreemptionPath, Provisioner, Scaling, Verdict
from spotproof.plan.recording.offline import FAKE_CA, CallFaker, CloudRecording, OutputFaker
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.simulation import preemption
from spotproof.plan.simulation.nodes import node_count
from spotproof.plan.simulation.reachability import RUNNER_INSIDE
from spotproof.plan.simulation.scale_up import zone_count
from spotproof.scheduling import gke as gke_shapes
from spotproof.scheduling.fit import NodeShape, NodeShutdown

CLUSTER = profile(Cloud.GKE).cluster_type

# --- what GKE answers offline -------------------------------------------------------------

OUTPUTS: dict[str, OutputFaker] = {
    "gcp:container/cluster:Cluster": lambda name, inputs, cloud: {
        "name": inputs.get("name", name),
        "endpoint": "203.0.113.10",
        "masterAuth": {"clusterCaCertificate": FAKE_CA},
        "controlPlaneEndpointsConfig": {
            **inputs.get("controlPlaneEndpointsConfig", {}),
            "dnsEndpointConfig": {
                **(inputs.get("controlPlaneEndpointsConfig") or {}).get("dnsEndpointConfig", {}),
                "endpoint": f"gke-0ff1ine.{inputs.get('location', cloud.region)}.gke.goog",
            },
        },
        "selfLink": f"https://container.googleapis.com/v1/projects/{cloud.project}/clusters/{name}",
    },
    "gcp:serviceaccount/account:Account": lambda name, inputs, cloud: {
        "email": f"{inputs.get('accountId', name)}@{cloud.project}.iam.gserviceaccount.com",
        "name": f"projects/{cloud.project}/serviceAccounts/{inputs.get('accountId', name)}",
    },
    # A project's custom role is named projects/PROJECT/roles/ROLE_ID, its id too.
    "gcp:projects/iAMCustomRole:IAMCustomRole": lambda name, inputs, cloud: {
        "name": f"projects/{inputs.get('project', cloud.project)}/roles/"
        + inputs.get("roleId", name),
        "id": f"projects/{inputs.get('project', cloud.project)}/roles/"
        + inputs.get("roleId", name),
    },
    "gcp:storage/bucket:Bucket": lambda name, inputs, _cloud: {
        "name": inputs.get("name", name),
        "url": f"gs://{inputs.get('name', name)}",
    },
    # Pub/Sub refers to topics and subscriptions by their full path (their ``id``).
    "gcp:pubsub/topic:Topic": lambda name, inputs, cloud: {
        "name": inputs.get("name", name),
        "id": f"projects/{inputs.get('project', cloud.project)}/topics/{inputs.get('name', name)}",
    },
    "gcp:compute/network:Network": lambda name, inputs, cloud: {
        "id": f"projects/{inputs.get('project', cloud.project)}/global/networks/"
        + inputs.get("name", name),
        "name": inputs.get("name", name),
    },
    "gcp:compute/subnetwork:Subnetwork": lambda name, inputs, cloud: {
        "id": f"projects/{inputs.get('project', cloud.project)}/regions/"
        f"{inputs.get('region')}/subnetworks/{inputs.get('name', name)}",
        "name": inputs.get("name", name),
    },
    # Cloud Monitoring names a policy and a dashboard when it creates them, under the
    # project: projects/P/alertPolicies/ID (projects.alertPolicies), projects/P/dashboards/ID.
    "gcp:monitoring/alertPolicy:AlertPolicy": lambda name, inputs, cloud: {
        "name": f"projects/{inputs.get('project', cloud.project)}/alertPolicies/{name}",
        "id": f"projects/{inputs.get('project', cloud.project)}/alertPolicies/{name}",
    },
    "gcp:monitoring/dashboard:Dashboard": lambda name, inputs, cloud: {
        "id": f"projects/{inputs.get('project', cloud.project)}/dashboards/{name}",
    },
    "gcp:pubsub/subscription:Subscription": lambda name, inputs, cloud: {
        "name": inputs.get("name", name),
        "id": f"projects/{inputs.get('project', cloud.project)}/subscriptions/"
        + inputs.get("name", name),
    },
}
CALLS: dict[str, CallFaker] = {
    "gcp:organizations/getProject:getProject": lambda cloud: {
        "projectId": cloud.project,
        "number": cloud.project_number,
        "name": cloud.project,
        "id": f"projects/{cloud.project}",
    },
}


# --- how a node pool gets nodes -----------------------------------------------------------


def node_pool_scaling(resource: str, inputs: Mapping[str, Any]) -> Scaling:
    config = inputs.get("nodeConfig") or {}
    accelerators = config.get("guestAccelerators") or []
    accelerator = accelerators[0].get("type") if accelerators else None
    autoscaling = inputs.get("autoscaling") or {}
    zones = tuple(str(z) for z in inputs.get("nodeLocations") or ())
    if autoscaling:
        total = "totalMaxNodeCount" in autoscaling
        minimum = autoscaling.get("totalMinNodeCount" if total else "minNodeCount")
        maximum = autoscaling.get("totalMaxNodeCount" if total else "maxNodeCount")
        provisioner, per_zone = Provisioner.CLUSTER_AUTOSCALER, not total
    else:
        minimum = maximum = inputs.get("nodeCount", inputs.get("initialNodeCount"))
        provisioner, per_zone = Provisioner.NONE, True
    run = str(config.get("maxRunDuration") or "")
    return Scaling(
        provisioner=provisioner,
        resource=resource,
        min_nodes=node_count(minimum),
        max_nodes=node_count(maximum),
        zones=zones,
        per_zone=per_zone,
        zones_by_default=gke_catalog.DEFAULT_POOL_ZONES,
        offered_zones=_offered_zones(accelerator, zones),
        autoscaler="GKE cluster autoscaler",
        machine_type=config.get("machineType"),
        accelerator=accelerator,
        queued=bool((inputs.get("queuedProvisioning") or {}).get("enabled")),
        max_run_seconds=int(run[:-1]) if run.endswith("s") and run[:-1].isdigit() else None,
    )


def _offered_zones(accelerator: str | None, zones: tuple[str, ...]) -> frozenset[str] | None:
    if not accelerator or not zones:
        return None
    return gke_catalog.accelerator_zones(accelerator, zones[0].rsplit("-", 1)[0])


@dataclass(frozen=True)
class AutoprovisioningLimits:
    """Node auto-provisioning's limits, and what the pools keep running under them."""

    maximum: Mapping[str, float]
    """Resource type (``cpu``, ``memory`` in GB, accelerator names) to its maximum."""
    baseline: Mapping[str, float]
    """What every pool's minimum nodes already use."""

    def room_for(self, pool: Pool) -> Verdict | None:
        """Why one more node of ``pool`` would break a limit; None if it fits."""
        node = _node_resources(pool)
        for resource, amount in sorted(node.items()):
            limit = self.maximum.get(resource)
            used = self.baseline.get(resource, 0)
            if limit is None:
                if resource in ("cpu", "memory"):
                    continue
                return Verdict(
                    pool.name,
                    False,
                    f"node auto-provisioning sets no limit for {resource}, so none are allowed",
                    f"add a resource limit for {resource} of at least {used + amount:g}",
                )
            if used + amount > limit:
                return Verdict(
                    pool.name,
                    False,
                    f"one more node needs {amount:g} {resource}; the cluster-wide limit is "
                    f"{limit:g} and the pools' minimum nodes already use {used:g}",
                    f"raise the {resource} limit to at least {used + amount:g}",
                )
        return None


def _node_resources(pool: Pool) -> dict[str, float]:
    """What one node of ``pool`` counts against the cluster's limits; CPU and memory only
    where the catalog knows the machine type."""
    node: dict[str, float] = {}
    with contextlib.suppress(gke_catalog.CatalogError):
        node["cpu"], node["memory"] = gke_catalog.machine_resources(pool.scaling.machine_type or "")
    if pool.scaling.accelerator:
        node[pool.scaling.accelerator] = pool.shape.gpus
    return node


def cluster_limits(recording: Recording, pools: Sequence[Pool]) -> AutoprovisioningLimits | None:
    """NAP limits of the plan's GKE cluster; None without node auto-provisioning."""
    clusters = recording.of_type(CLUSTER)
    autoscaling = (clusters[0].inputs.get("clusterAutoscaling") or {}) if clusters else {}
    if not autoscaling.get("enabled"):
        return None
    maximum = {
        str(limit.get("resourceType")): float(limit.get("maximum") or 0)
        for limit in autoscaling.get("resourceLimits") or []
    }
    baseline: dict[str, float] = {}
    for pool in pools:
        if pool.scaling.provisioner is Provisioner.KARPENTER:
            continue
        count = pool.scaling.min_nodes * (zone_count(pool) if pool.scaling.per_zone else 1)
        for resource, amount in _node_resources(pool).items():
            baseline[resource] = baseline.get(resource, 0) + count * amount
    return AutoprovisioningLimits(maximum, baseline)


# --- what a spot reclaim does -------------------------------------------------------------

SPOT_VM_SECONDS = 30
"""A GKE spot VM stops this long after its preemption notice, at the default shutdown."""
DEFAULT_SHUTDOWN = NodeShutdown(
    gke_spot.DEFAULT_SPOT_SHUTDOWN_SECONDS, gke_spot.CRITICAL_PODS_SHUTDOWN_SECONDS
)
SYSTEM_CRITICAL = ("system-cluster-critical", "system-node-critical")


def spot_path(
    workload: str, shapes: tuple[NodeShape, ...], pod: Mapping[str, Any], _budgets: list[str]
) -> PreemptionPath:
    """GKE spot (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms): the
    kubelet's graceful node shutdown hears the VM's notice at once and gives non-system pods
    the shutdown period less the critical share, then system pods (``system-*-critical``
    priority) that share: 30 s split 15/15 by default, or a pool's own period (120 s, 105
    for non-system pods: ``catalog.gke_spot``); the VM is gone when the period ends. A
    ``terminationGracePeriodSeconds`` above the pod's share is cut to it. Where a workload
    may land on pools of different periods, the shortest decides. PodDisruptionBudgets and
    annotations play no part: the kubelet is not the Eviction API."""
    pools = tuple(shape.pool for shape in shapes)
    declared = preemption.pod_grace(pod)
    critical = pod.get("priorityClassName") in SYSTEM_CRITICAL

    def share_of(shutdown: NodeShutdown) -> int:
        return shutdown.critical_pods_seconds if critical else shutdown.pod_seconds

    shutdown = min((shape.shutdown or DEFAULT_SHUTDOWN for shape in shapes), key=share_of)
    if shutdown.seconds == 0:
        return preemption.node_gone_first(
            workload,
            "GKE spot",
            pools,
            notice=SPOT_VM_SECONDS,
            declared=declared,
            steps=[
                f"notice {SPOT_VM_SECONDS} s",
                "graceful node shutdown is off (kubeletConfig.shutdownGracePeriodSeconds 0)",
            ],
            fix="give the pool a shutdown period of 30 or 120 seconds (shutdownSeconds)",
        )
    share = share_of(shutdown)
    start = shutdown.pod_seconds if critical else 0
    grace = min(declared, share)
    who = "system pods" if critical else "non-system pods"
    fix = f"set terminationGracePeriodSeconds to at most {share} and save within it"
    longest = max(gke_spot.SPOT_SHUTDOWN_SECONDS)
    gke_pools = all(GKE_NODEPOOL_LABEL in shape.labels for shape in shapes)
    if not critical and gke_pools and shutdown.seconds < longest:
        fix += (
            f", or give the pools shutdownSeconds {longest} "
            f"({gke_spot.pod_shutdown_seconds(longest)} s for the pod)"
        )
    return PreemptionPath(
        workload,
        "GKE spot",
        pools,
        shutdown.seconds,
        start,
        grace,
        declared,
        (
            f"notice {shutdown.seconds} s",
            f"kubelet's graceful shutdown gives {who} {share} s from {start} s",
            f"SIGTERM at {start} s with {grace:g} s grace (declared {declared} s)",
            f"node gone at {shutdown.seconds} s",
        ),
        Ending.KUBELET_SHUTDOWN,
        fix,
    )


# --- reaching a private API ---------------------------------------------------------------


def private_api(access: ApiAccess, recording: Recording, server: str | None) -> list[str] | None:
    """With a private IP endpoint, the control plane's DNS-based endpoint answers from
    anywhere Google's APIs do, authorized by IAM
    (https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation, "DNS-based
    endpoint"), but only with ``allowExternalTraffic`` and only if the provider connects
    through it; otherwise the runner must be in the cluster's network, one that exists
    before the run (``network.existing``: the shared reading)."""
    if access.runner_in_network:
        return None
    return list(_dns_endpoint(recording, server))


def _dns_endpoint(recording: Recording, server: str | None) -> Iterator[str]:
    clusters = recording.of_type(CLUSTER)
    external = any(
        ((c.inputs.get("controlPlaneEndpointsConfig") or {}).get("dnsEndpointConfig") or {}).get(
            "allowExternalTraffic"
        )
        for c in clusters
    )
    if not external:
        yield (
            "the API has no public IP endpoint and its DNS endpoint takes no traffic from "
            "outside the network; allowed: controlPlaneEndpointsConfig.dnsEndpointConfig."
            f"allowExternalTraffic true, or {RUNNER_INSIDE}"
        )
    elif server is None or not server.rstrip("/").endswith(gke_catalog.DNS_ENDPOINT_SUFFIX):
        yield (
            f"the Kubernetes provider connects to {server or 'an unknown server'}, the private "
            "IP endpoint, which only the cluster's network reaches; allowed: the control "
            f"plane's DNS endpoint (*{gke_catalog.DNS_ENDPOINT_SUFFIX}), or {RUNNER_INSIDE}"
        )


# --- GPUs ---------------------------------------------------------------------------------


def gpu_plugin(inputs: Mapping[str, Any]) -> str | None:
    """GKE's own device plugin runs where GKE installs the driver (``DEFAULT``/``LATEST``)."""
    accelerators = (inputs.get("nodeConfig") or {}).get("guestAccelerators") or []
    versions = {
        (a.get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion") for a in accelerators
    }
    if versions and versions <= nvidia.GKE_MANAGED_DRIVER_VERSIONS:
        return "GKE's device plugin"
    return None


PLAN = CloudPlan(
    recording=CloudRecording(
        outputs=OUTPUTS,
        calls=CALLS,
        cluster_inputs={CLUSTER: "name", gke_shapes.NODE_POOL: "cluster"},
    ),
    scalings={gke_shapes.NODE_POOL: node_pool_scaling},
    spot_path=spot_path,
    cluster_limits=cluster_limits,
    private_api=private_api,
    gpu_plugins={gke_shapes.NODE_POOL: gpu_plugin},
    unadvertised=(
        "GKE installs no driver: gpuDriverInstallationConfig unset or INSTALLATION_DISABLED"
    ),
)
