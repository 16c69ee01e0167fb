"""A recording of several clusters, cut into one part per cluster.

One program may declare two clusters (two ``HybridCluster``s, each from its own fleet).
What the plan asks of a workload is asked within its cluster: the pools its pods may land
on, the add-ons that must fit a system pool, the identity bindings it must wait for, what
a reclaim does to it. Judged over the whole program, a job in one region would be
scheduled onto the other's pools and told to wait for the other's IAM.

Which cluster a resource is for, as ``pulumi up`` decides it:

- a Kubernetes object goes to the API server its provider's kubeconfig names; the program
  builds that kubeconfig from one cluster's outputs (endpoint, CA), so the provider's
  ``kubeconfig`` input depends on that cluster, and the engine records the dependency as
  the SDK reports it (``propertyDependencies``), here as under ``pulumi up``. An object
  whose provider comes from no declared cluster (another stack's kubeconfig, the ambient
  one) is on a cluster the program did not create (:data:`EXISTING`);
- a cloud resource is for the cluster it names: a pool's ``cluster`` (GKE),
  ``clusterName`` (EKS), ``resourceName`` (AKS) is that cluster's name output, so it
  depends on it; where it names one by a literal, the name is matched
  (``CloudRecording.cluster_inputs``); otherwise the component that declares it decides, where
  that component holds one cluster (a ``HybridCluster``'s bucket, identities and
  bindings), and last the cluster nearest among what it depends on;
- anything else (a project-wide role, a component above both clusters, a manifest
  ``spotproof check`` applies outside the program) is shared: every part holds it.

A program of one cluster, or of components on an existing one, is one part: the whole
recording, judged as it always was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from spotproof.catalog import PROFILES
from spotproof.plan.recording.offline import every_cloud
from spotproof.plan.recording.recorder import Recording, Resource

KUBERNETES_PROVIDER = "pulumi:providers:kubernetes"
KUBECONFIG = "kubeconfig"
EXISTING = "another cluster"
"""The part of the Kubernetes objects whose provider no declared cluster's kubeconfig
makes: the cluster ``spotproof:existingCluster`` describes."""
_SHARED = ""

CLUSTER_TYPES = frozenset(profile.cluster_type for profile in PROFILES.values())


def parts(recording: Recording) -> list[Recording]:
    """One recording per cluster the program declares, each named after its cluster
    (``Recording.cluster``) and holding its resources and the shared ones, then the part
    on :data:`EXISTING` where some Kubernetes object is on none of them; the whole
    recording, unnamed, where the program declares fewer than two clusters."""
    # By name: registration order under mocks follows input resolution, not the program.
    clusters = sorted(
        (r for r in recording.resources if r.type in CLUSTER_TYPES), key=lambda r: (r.name, r.urn)
    )
    if len(clusters) < 2:
        return [recording]
    owners = owners_of(recording.resources, clusters)
    keys = [(c.urn, c.name) for c in clusters]
    if EXISTING in owners.values():
        keys.append((EXISTING, EXISTING))
    return [
        replace(
            recording,
            resources=[r for r in recording.resources if owners[r.urn] in (key, _SHARED)],
            cluster=name,
        )
        for key, name in keys
    ]


def owners_of(resources: list[Resource], clusters: list[Resource]) -> dict[str, str]:
    """Each resource's cluster, by URN: a cluster's URN, :data:`EXISTING`, or ``""``
    (shared)."""
    by_urn = {r.urn: r for r in resources}
    cluster_urns = {c.urn for c in clusters}
    named = _cluster_names(clusters)
    within = _clusters_within(resources, cluster_urns)
    providers = {
        r.urn: _nearest(
            r.property_dependencies.get(KUBECONFIG) or r.dependencies or (), by_urn, cluster_urns
        )
        or EXISTING
        for r in resources
        if r.type == KUBERNETES_PROVIDER
    }
    owners: dict[str, str] = {}
    for resource in resources:
        if resource.urn in cluster_urns:
            owners[resource.urn] = resource.urn
        elif resource.urn in providers:
            owners[resource.urn] = providers[resource.urn]
        elif _is_kubernetes(resource) and resource.dependencies is None:
            # Applied outside the program (``spotproof check``), to whichever cluster
            # kubectl points at: judged in each.
            owners[resource.urn] = _SHARED
        elif _is_kubernetes(resource):
            provider = (resource.provider or "").rpartition("::")[0]
            owners[resource.urn] = providers.get(provider, EXISTING)
        else:
            depends = resource.dependencies or ()
            direct = {urn for urn in depends if urn in cluster_urns}
            owners[resource.urn] = (
                (next(iter(direct)) if len(direct) == 1 else _SHARED)
                or _named(resource, named)
                or _declared_in(resource, by_urn, within)
                or _nearest(depends, by_urn, cluster_urns)
            )
    return owners


def _is_kubernetes(resource: Resource) -> bool:
    """Applied through a Kubernetes provider: an object, a chart, a group of manifests."""
    return resource.type.startswith("kubernetes:")


def _nearest(start: Iterable[str], by_urn: Mapping[str, Resource], clusters: set[str]) -> str:
    """The one cluster nearest among ``start`` and what it depends on, breadth first, not
    looking past a cluster (one cluster created after another is not the other's);
    ``""`` where none is, or two are equally near."""
    seen: set[str] = set()
    layer = list(dict.fromkeys(start))
    while layer:
        found = {urn for urn in layer if urn in clusters}
        if found:
            return found.pop() if len(found) == 1 else _SHARED
        seen.update(layer)
        layer = list(
            dict.fromkeys(
                dependency
                for urn in layer
                if urn in by_urn
                for dependency in by_urn[urn].dependencies or ()
                if dependency not in seen
            )
        )
    return _SHARED


def _cluster_names(clusters: list[Resource]) -> dict[tuple[str, str], str]:
    """(type, name) -> cluster URN, for the inputs that name a cluster by a literal
    (``CloudRecording.cluster_inputs``); a name two clusters share names neither."""
    inputs = {t: key for cloud in every_cloud() for t, key in cloud.cluster_inputs.items()}
    found: dict[tuple[str, str], list[str]] = {}
    for cluster in clusters:
        name = cluster.inputs.get(inputs.get(cluster.type, "name"))
        if isinstance(name, str):
            found.setdefault((cluster.type, name), []).append(cluster.urn)
    return {key: urns[0] for key, urns in found.items() if len(urns) == 1}


def _named(resource: Resource, named: Mapping[tuple[str, str], str]) -> str:
    """The cluster of the resource's own cloud that its naming input names by a literal."""
    for cloud in every_cloud():
        key = cloud.cluster_inputs.get(resource.type)
        value = resource.inputs.get(key) if key else None
        for cluster_type in cloud.cluster_inputs if isinstance(value, str) else ():
            if (cluster_type, value) in named:
                return named[(cluster_type, value)]
    return _SHARED


def _clusters_within(resources: list[Resource], clusters: set[str]) -> dict[str, set[str]]:
    """Component URN -> the clusters declared anywhere under it."""
    parents = {r.urn: r.parent for r in resources}
    within: dict[str, set[str]] = {}
    for urn in clusters:
        parent = parents.get(urn)
        while parent is not None:
            within.setdefault(parent, set()).add(urn)
            parent = parents.get(parent)
    return within


def _declared_in(
    resource: Resource, by_urn: Mapping[str, Resource], within: Mapping[str, set[str]]
) -> str:
    """The cluster of the nearest component that declares any, ``resource`` itself or one
    above it: its one, or shared where it declares several."""
    parent: str | None = resource.urn
    while parent is not None:
        if parent in within:
            clusters = within[parent]
            return next(iter(clusters)) if len(clusters) == 1 else _SHARED
        parent = by_urn[parent].parent if parent in by_urn else None
    return _SHARED
