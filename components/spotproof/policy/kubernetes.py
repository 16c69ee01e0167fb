"""Rules for the Kubernetes objects every cloud renders: Jobs and PriorityClasses."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof import scheduling
from spotproof.catalog import PROFILES, Cloud, profile, pulumi_kubernetes
from spotproof.fleet import images
from spotproof.policy.base import (
    PlannedResource,
    Problem,
    ResourceRule,
    Scope,
    StackRule,
    pod_key_path,
)
from spotproof.scheduling import fit, node_shapes, pod_templates

JOB = "kubernetes:batch/v1:Job"
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
CLUSTER_TYPES = {cloud_profile.cluster_type: cloud for cloud, cloud_profile in PROFILES.items()}


def _pod_spec(job_inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((job_inputs.get("spec") or {}).get("template") or {}).get("spec") or {}


def job_preemption_safe(inputs: Mapping[str, Any]) -> Iterator[Problem]:
    spec = inputs.get("spec") or {}
    pod = _pod_spec(inputs)
    if pod.get("restartPolicy") != "Never":
        yield Problem(
            "restartPolicy must be Never: a preempted pod is replaced, not restarted in place",
            "spec.template.spec.restartPolicy",
        )
    rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
    ignores_disruption = any(
        r.get("action") == "Ignore"
        and any(c.get("type") == "DisruptionTarget" for c in r.get("onPodConditions") or [])
        for r in rules
    )
    if not ignores_disruption:
        yield Problem(
            "podFailurePolicy must Ignore DisruptionTarget so preemptions keep backoffLimit",
            "spec.podFailurePolicy",
        )
    if fit.tolerates(pod.get("tolerations") or [], scheduling.GPU_TAINT):
        for index, container in enumerate(pod.get("containers") or []):
            limits = (container.get("resources") or {}).get("limits") or {}
            if not limits.get(scheduling.GPU_RESOURCE):
                yield Problem(
                    f"container {container.get('name')} targets GPU nodes without a GPU limit",
                    f"spec.template.spec.containers[{index}].resources.limits",
                )


def job_not_awaited(inputs: Mapping[str, Any]) -> Iterator[str]:
    annotations = (inputs.get("metadata") or {}).get("annotations") or {}
    if annotations.get(pulumi_kubernetes.SKIP_AWAIT_ANNOTATION) != "true":
        yield (
            f'without the annotation {pulumi_kubernetes.SKIP_AWAIT_ANNOTATION}: "true" '
            "`pulumi up` waits for the Job to complete and fails the update after "
            f"{pulumi_kubernetes.JOB_AWAIT_TIMEOUT_MINUTES} minutes"
        )


def spot_priority_negative(inputs: Mapping[str, Any]) -> Iterator[str]:
    name = (inputs.get("metadata") or {}).get("name")
    if name == scheduling.SPOT_BATCH_PRIORITY.name and (inputs.get("value") or 0) >= 0:
        yield "the spot batch PriorityClass must be negative so spot work is preempted first"


PROVIDER_CLOUDS = {
    cloud_profile.provider_prefix: cloud for cloud, cloud_profile in PROFILES.items()
}
"""A program that adds components to an existing cluster declares no cluster: its
resources' provider says which cloud the cluster is on."""


def cloud_of(resources: list[PlannedResource]) -> Cloud | None:
    """The cloud whose cluster the plan declares, else the cloud of its resources; None
    for a plan of Kubernetes objects alone."""
    declared = next((CLUSTER_TYPES[r.type] for r in resources if r.type in CLUSTER_TYPES), None)
    if declared is not None:
        return declared
    return next(
        (
            cloud
            for r in resources
            for prefix, cloud in PROVIDER_CLOUDS.items()
            if r.type.startswith(prefix)
        ),
        None,
    )


def _reclaim_grace(pod: Mapping[str, Any], shapes: list[fit.NodeShape], cloud: Cloud) -> int:
    """What a spot reclaim leaves this pod: the cloud's notice, or where the spot pools it
    fits set their own shutdown (a GKE pool's 120 s), the shortest of theirs, since it
    may land on any of them."""
    notice = profile(cloud).preemption_notice_seconds
    fitting = [shape for shape in shapes if shape.spot and not fit.misfits(pod, shape)]
    graces = [shape.shutdown.pod_seconds if shape.shutdown else notice for shape in fitting]
    return min(graces, default=notice)


def job_fits_preemption_notice(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    cloud = cloud_of(resources)
    priorities = {
        (r.inputs.get("metadata") or {}).get("name"): r.inputs.get("value")
        for r in resources
        if r.type == PRIORITY_CLASS
    }
    shapes = [
        node_shapes.readers()[pool_type](inputs)
        for resource in resources
        for pool_type, inputs in node_shapes.pools_in(resource.type, resource.inputs)
    ]
    spot_taint = scheduling.contract(scheduling.PoolClass.SPOT_GPU).taints[0]
    for job in (r for r in resources if r.type == JOB):
        pod = _pod_spec(job.inputs)
        grace = pod.get("terminationGracePeriodSeconds", 30)
        # Only spot nodes are reclaimed with the notice; flex-start and on-demand are not.
        on_spot = fit.tolerates(pod.get("tolerations") or [], spot_taint)
        notice = _reclaim_grace(pod, shapes, cloud) if cloud and on_spot else None
        if notice is not None and grace > notice:
            yield (
                job.name,
                Problem(
                    f"terminationGracePeriodSeconds {grace} exceeds the {notice} s a {cloud} spot "
                    "reclaim of the pools it fits leaves it; the final save would be lost",
                    "spec.template.spec.terminationGracePeriodSeconds",
                ),
            )
        if on_spot:
            value = priorities.get(pod.get("priorityClassName"))
            if value is None or value >= 0:
                yield (
                    job.name,
                    Problem(
                        "work on spot capacity must use a negative-value PriorityClass",
                        "spec.template.spec.priorityClassName",
                    ),
                )


RESOURCE_RULES: tuple[ResourceRule, ...] = (
    ResourceRule("k8s-job-preemption-safe", "Jobs survive preemption.", JOB, job_preemption_safe),
    ResourceRule(
        "k8s-job-not-awaited",
        "A long run does not hold `pulumi up` until it completes.",
        JOB,
        job_not_awaited,
        scope=Scope(manifests=False),
    ),
    ResourceRule(
        "k8s-spot-priority-negative",
        "Spot work is preempted first.",
        PRIORITY_CLASS,
        spot_priority_negative,
    ),
)


def images_pinned(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    """No workload pulls ``latest``, whatever it is when each pod starts (``fleet.images``):
    a gang's ranks or a resumed run could run different code."""
    for resource, _namespace, template in pod_templates.workload_templates(resources):
        for container in pod_templates.containers(template.spec):
            image = container.get("image")
            parsed = images.parse(image) if isinstance(image, str) else None
            if parsed is not None and parsed.mutable:
                # Where check has always put a finding about a container: its resources.
                at = pod_key_path(resource, template, "resources.limits", container)
                yield (
                    resource.name,
                    Problem(
                        f"container {container.get('name')} pulls {image}: whatever 'latest' "
                        f"is when each pod starts; allowed: {images.ALLOWED}",
                        at,
                    ),
                )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "job-fits-preemption-notice",
        "Grace periods and priorities fit spot.",
        job_fits_preemption_notice,
    ),
    StackRule("image-pinned", "No workload pulls an image's latest.", images_pinned),
)
