"""Every check of a plan over a recording: within each cluster the program declares
(``plan.recording.clusters``, ``plan.simulation.within_cluster``) what concerns workloads
and their pools, over the whole program the rest, into a :class:`PlanResult`.

A fleet's recording is judged with what its spec states (:func:`check`); a program of
components on a cluster spotproof did not create, with what ``spotproof:existingCluster``
says of that cluster (:func:`check_existing`). Tests and ``spotproof check`` change a
recording and judge it again (:func:`recheck`).
"""

from __future__ import annotations

from spotproof.catalog import DEFAULT_CLOUD, Cloud
from spotproof.fleet import BucketSpec, FleetSpec, advice
from spotproof.fleet.existing import KEY as EXISTING
from spotproof.fleet.existing import ExistingCluster
from spotproof.plan.model import Pool
from spotproof.plan.recording import clusters, manifests
from spotproof.plan.recording.recorder import Recording
from spotproof.plan.reporting import checkpointing
from spotproof.plan.result import ClusterPlan, PlanResult, StackFacts
from spotproof.plan.simulation import (
    controller_versions,
    lifecycle,
    nodes,
    reachability,
    uniqueness,
    within_cluster,
)
from spotproof.policy import Violation, evaluate
from spotproof.policy.kubernetes import cloud_of
from spotproof.runtime.checkpointer.manifest import DEFAULT_KEEP


def check(spec: FleetSpec, recording: Recording) -> PlanResult:
    """Every check over a fleet's recording; tests mutate a recording and call this again."""
    return _judge(StackFacts.of_fleet(spec), spec, recording, [])


def check_existing(stack: str, cluster: ExistingCluster, recording: Recording) -> PlanResult:
    """Every check that needs no fleet, over a program's components on an existing cluster,
    with that cluster's system pool as its stack describes it."""
    cloud = cluster.cloud or cloud_of(recording.resources) or DEFAULT_CLOUD
    version = cluster.kubernetes_version or FleetSpec.kubernetes_version
    facts = StackFacts(stack, cloud, version, None, cluster)
    system = nodes.existing_system_pool(cluster.system_pool.taints, cluster.system_pool.labels)
    return _judge(facts, None, recording, [system], gpus_advertised=cluster.gpus_advertised)


def recheck(planned: PlanResult, recording: Recording) -> PlanResult:
    """The checks of ``planned`` again, over ``recording`` (the plan's, with more added)."""
    if planned.spec is not None:
        return check(planned.spec, recording)
    assert planned.facts.existing is not None
    return check_existing(planned.facts.stack, planned.facts.existing, recording)


def _judge(
    facts: StackFacts,
    spec: FleetSpec | None,
    recording: Recording,
    existing: list[Pool],
    *,
    gpus_advertised: bool = False,
) -> PlanResult:
    """Every check; those about workloads and their pools within each cluster the program
    declares (``clusters``), the rest over the whole program."""
    parts = clusters.parts(recording)
    judged = [
        within_cluster.judge(
            part,
            existing if part.cluster in ("", clusters.EXISTING) else [],
            _reclaims(facts, spec, _cloud(facts, part, len(parts))),
            gpus_advertised=gpus_advertised,
        )
        for part in parts
    ]
    violations, skipped = manifests.validate(recording, facts.kubernetes_version)
    violations += [v for cluster in judged for v in cluster.unadvertised]
    evaluated = [v for part in parts for v in evaluate(part.resources, facts.cluster_version)]
    # A resource shared by the clusters is in each part: its findings once.
    violations += evaluated if len(parts) == 1 else list(dict.fromkeys(evaluated))
    violations += uniqueness.check(recording)
    violations += [v for cluster in judged for v in cluster.violations]
    bucket = spec.bucket if spec else None
    violations += lifecycle.check(
        recording,
        prefix=f"{bucket.prefix if bucket else BucketSpec.prefix}/",
        keep=DEFAULT_KEEP,
        retention_days=bucket.noncurrent_days if bucket else BucketSpec.noncurrent_days,
    )
    warnings = [w for cluster in judged for w in cluster.warnings]
    if spec is not None:
        # What only a fleet states: the controllers it pins, who may reach its API.
        violations += controller_versions.check(spec, recording)
        violations += reachability.check(spec.cloud, spec.api_access, recording)
        warnings = [*advice.warnings(spec), *warnings]
    violations = _without_superseded(violations)
    advised = [a for cluster in judged for a in cluster.intervals]
    warnings += checkpointing.warnings(advised)
    return PlanResult(
        facts,
        spec,
        recording,
        [pool for cluster in judged for pool in cluster.pools],
        [o for cluster in judged for o in cluster.outcomes],
        violations,
        skipped,
        warnings,
        advised,
        [ClusterPlan(cluster.recording, cluster.pools) for cluster in judged],
    )


def _cloud(facts: StackFacts, part: Recording, count: int) -> Cloud:
    """The cloud of one cluster among ``count``: the stack's, where it is the only one."""
    return facts.cloud if count == 1 else cloud_of(part.resources) or facts.cloud


def _reclaims(facts: StackFacts, spec: FleetSpec | None, cloud: Cloud) -> within_cluster.Reclaims:
    """The reclaim model the stack states, for the checkpoint-interval advice."""
    if spec is not None:
        return within_cluster.Reclaims(
            cloud, spec.reclaim_model, "spotproof:reclaimModel", spec.smoke_test
        )
    cluster = facts.existing or ExistingCluster()
    return within_cluster.Reclaims(cloud, cluster.reclaim_model, f"{EXISTING}.reclaimModel")


SUPERSEDED_BY = {"job-fits-preemption-notice": "preemption-path"}
"""A finding that says less about the same mistake than another rule's, reported only
where the other is not: the CrossGuard rule compares a grace period with the cloud's
notice alone, the preemption path with what each pool's reclaim honours."""


def _without_superseded(violations: list[Violation]) -> list[Violation]:
    said = {(v.policy, v.resource) for v in violations}
    return [v for v in violations if (SUPERSEDED_BY.get(v.policy), v.resource) not in said]
