"""What the offline plan asks of one cloud beyond its facts (``catalog.profile``): the
behaviour its plan module (``plan.gke``, ``plan.eks``, ``plan.aks``) contributes as
``PLAN``, a :class:`CloudPlan`.

Shared plan code asks the stack's cloud (:func:`plan_of`) or, where it reads a recording
by resource type, every registered cloud (:func:`every_plan`); it never names a cloud.
Every hook defaults to contributing nothing, so a new cloud's module starts with what it
has. The hooks speak in the plan's model of a cluster (``plan.model``) and in recordings,
both below this interface. What the mocks answer while the program runs (``recording``)
is the recording's own type (``plan.recording.offline.CloudRecording``), which the
recording reads through the registry. The cloud modules, which build on the simulations,
are looked up when first used, not imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spotproof import clouds
from spotproof.catalog import Cloud
from spotproof.fleet import ApiAccess
from spotproof.plan.model import ClusterLimits, Pool, PreemptionPath, Release, Scaling, Workload
from spotproof.plan.recording.offline import CloudRecording
from spotproof.plan.recording.recorder import Recording
from spotproof.scheduling.fit import NodeShape

ScalingReader = Callable[[str, Mapping[str, Any]], Scaling]
"""(Pulumi resource name, pool inputs) -> how the pool gets nodes."""
SpotPath = Callable[[str, tuple[NodeShape, ...], Mapping[str, Any], list[str]], PreemptionPath]
"""(workload, its spot pools' shapes, pod spec, blocking budgets) -> what a reclaim does to
the pod."""
PluginReader = Callable[[Mapping[str, Any]], "str | None"]
"""A pool's (or a node class's) inputs -> what advertises its GPUs without a DaemonSet of
the stack's, if anything."""


def _no_limits(_recording: Recording, _pools: Sequence[Pool]) -> ClusterLimits | None:
    return None


def _shared_reading(_access: ApiAccess, _recording: Recording, _server: str | None) -> None:
    return None


def _no_releases(_platform: Any) -> list[Release]:
    return []


def _no_workloads(_recording: Recording) -> list[Workload]:
    return []


@dataclass(frozen=True)
class CloudPlan:
    """One cloud's part of the offline plan."""

    recording: CloudRecording = field(default_factory=CloudRecording)
    """What its resources and data sources answer offline, and which input names a
    resource's cluster."""
    scalings: Mapping[str, ScalingReader] = field(default_factory=dict)
    """By pool type (``scheduling``'s readers give the nodes): who creates its nodes,
    within which bounds and zones."""
    spot_path: SpotPath | None = None
    """The reclaim of a spot pool the cloud scales itself (Karpenter's is shared)."""
    cluster_limits: Callable[[Recording, Sequence[Pool]], ClusterLimits | None] = _no_limits
    """Cluster-wide limits the recording's cluster puts on scaling up, if any."""
    private_api: Callable[[ApiAccess, Recording, str | None], list[str] | None] = _shared_reading
    """Why a runner could not reach a private API endpoint (empty: it could), where the
    cloud's reading differs from the shared one (``plan.simulation.reachability``); None:
    it does not."""
    gpu_plugins: Mapping[str, PluginReader] = field(default_factory=dict)
    """By pool type: the cloud's own device plugin on the pool's nodes."""
    node_classes: Mapping[str, tuple[str, PluginReader]] = field(default_factory=dict)
    """By ``nodeClassRef.group``: the cloud's Karpenter node class type, and its own
    device plugin on the nodes of a class's ``spec``."""
    unadvertised: str = ""
    """Why a pool of the cloud carries GPUs nothing advertises, for the report."""
    releases: Callable[[Any], list[Release]] = _no_releases
    """Controllers the cloud runs, by the stack's cloud section, whose objects are checked
    against the release it installs."""
    installed_workloads: Callable[[Recording], list[Workload]] = _no_workloads
    """Pods the cloud's managed add-ons run, placed as the program configured them."""


def plan_of(cloud: Cloud) -> CloudPlan:
    plan: CloudPlan = clouds.module("spotproof.plan", cloud).PLAN
    return plan


def every_plan() -> list[CloudPlan]:
    """Every registered cloud's, in the registry's order."""
    return [module.PLAN for module in clouds.modules("spotproof.plan")]
