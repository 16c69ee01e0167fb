"""``spotproof plan``: run a stack's Pulumi program offline and check what it would build.

Steps, each in its own module:

1. ``project``   find ``Pulumi.yaml`` and read the stack's config as the engine would
   (project defaults, stack values, secrets), remembering each value's line (``sources``);
2. ``spotproof.fleet`` validate that config (a bad value is an input error, exit 2);
3. ``recorder``  run the program in-process under Pulumi mocks, recording every resource;
4. ``manifests`` write the Kubernetes objects as YAML and validate them against the
   OpenAPI schema of the cluster's Kubernetes version;
5. ``spotproof.policy`` and ``workloads`` run the policy rules and the scheduling check
   over the pools the plan would create (``nodes``);
6. ``outcomes`` asks, per workload, which pools would get a node for it (``scale_up``)
   and what a reclaim does to it (``preemption``); ``pitfalls`` looks for the field
   guide's workload pitfalls; ``lifecycle`` replays the runtime's checkpoint history
   against each bucket's lifecycle rules.

A program that declares several clusters is cut into one part per cluster (``clusters``):
steps 5 and 6 about workloads, pools, add-ons, identity ordering and reclaims then run
within each part (``within_cluster``), and their findings name the cluster.

Exit codes: 0 when every check passes, 1 when any is violated, 2 on bad input.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# The Pulumi SDK before any module that reads YAML: an install without the extra is then
# told of the module the extra is for, not of one it happens to bring along.
import pulumi  # noqa: F401

from spotproof.catalog import DEFAULT_CLOUD, PROFILES, Cloud
from spotproof.commands import EXIT_FAILED, EXIT_OK
from spotproof.fleet import BucketSpec, FleetSpec, advice, fleet_from_config
from spotproof.fleet.advice import SpecWarning
from spotproof.fleet.config import CLOUDS
from spotproof.fleet.existing import KEY as EXISTING
from spotproof.fleet.existing import ExistingCluster, builds_a_cluster, existing_cluster
from spotproof.plan.config.project import PlanInputError, Project, find_project
from spotproof.plan.config.stack import StackConfig, stack_config
from spotproof.plan.recording import clusters, manifests
from spotproof.plan.recording.offline import OfflineCloud
from spotproof.plan.recording.recorder import Recording, record
from spotproof.plan.reporting import checkpointing
from spotproof.plan.schemas import controller_versions
from spotproof.plan.simulation import (
    lifecycle,
    nodes,
    reachability,
    uniqueness,
    within_cluster,
    workloads,
)
from spotproof.plan.simulation.intervals import IntervalAdvice
from spotproof.plan.simulation.nodes import Pool
from spotproof.plan.simulation.outcomes import Outcome
from spotproof.policy import Violation, evaluate
from spotproof.policy.kubernetes import cloud_of
from spotproof.runtime.checkpointer.manifest import DEFAULT_KEEP
from spotproof.scheduling import fit

__all__ = [
    "ClusterPlan",
    "PlanInputError",
    "PlanResult",
    "StackConfig",
    "StackFacts",
    "check",
    "check_existing",
    "load",
    "plan",
    "recheck",
    "run_plan",
]


@dataclass(frozen=True)
class StackFacts:
    """What every check knows of the stack, whichever program declared its resources."""

    stack: str
    cloud: Cloud
    kubernetes_version: str
    protect: bool | None
    """None where no fleet decides it: each component's own ``protect`` does."""
    existing: ExistingCluster | None = None
    """The cluster a program adds components to, as the stack describes it."""

    @property
    def cluster_version(self) -> str | None:
        """The cluster's minor as the stack states it: always for a fleet (its cluster is
        created at it), for another cluster only where ``spotproof:existingCluster`` says."""
        if self.existing is None:
            return self.kubernetes_version
        return self.existing.kubernetes_version

    @classmethod
    def of_fleet(cls, spec: FleetSpec) -> StackFacts:
        return cls(spec.stack, spec.cloud, spec.kubernetes_version, spec.protect)


@dataclass
class ClusterPlan:
    """One cluster's part of a plan: its resources with the shared ones, and its pools."""

    recording: Recording
    pools: list[Pool]


@dataclass
class PlanResult:
    facts: StackFacts
    spec: FleetSpec | None
    """The fleet spotproof's program builds; None for a program of components on a
    cluster spotproof did not create."""
    recording: Recording
    pools: list[Pool]
    outcomes: list[Outcome] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Checks that could not run here, with why; any fails the plan unless
    ``--allow-skipped``."""
    warnings: list[SpecWarning] = field(default_factory=list)
    """Settings that build but that a real preemption may not honour (never an exit 1)."""
    intervals: list[IntervalAdvice] = field(default_factory=list)
    """Each training workload's checkpoint interval and goodput (``intervals``)."""
    clusters: list[ClusterPlan] = field(default_factory=list)
    """One per cluster the program declares, where it declares several; else one, the
    whole plan."""

    @property
    def nodes(self) -> list[fit.NodeShape]:
        return [pool.shape for pool in self.pools]

    def placements(self) -> dict[str, list[str]]:
        """Which pools each workload fits (and the platform's add-ons), within its cluster."""
        if len(self.clusters) < 2:
            return workloads.placements(self.recording, self.nodes)
        return {
            label: fits
            for cluster in self.clusters
            for label, fits in workloads.placements(
                cluster.recording, [pool.shape for pool in cluster.pools]
            ).items()
        }

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.violations else EXIT_OK


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


def run_program(project: Project, config: StackConfig, cloud: OfflineCloud) -> Recording:
    """Run the project's program file as ``pulumi preview`` would, but against mocks."""
    program_dir = str(project.main.parent)

    def program() -> None:
        sys.path.insert(0, program_dir)
        try:
            runpy.run_path(str(project.main), run_name="__main__")
        finally:
            sys.path.remove(program_dir)

    return record(
        program,
        stack=config.stack,
        project=project.name,
        config=config.values,
        secret_keys=config.secret_keys,
        cloud=cloud,
    )


REGION_KEYS = tuple(profile.region_key for profile in PROFILES.values())
"""Where a program that reads no spotproof config finds its region: its providers'."""
PROJECT_KEYS = tuple(profile.project_key for profile in PROFILES.values() if profile.project_key)


def _offline_cloud(spec: FleetSpec | None, values: Mapping[str, Any]) -> OfflineCloud:
    """The cloud the mocks answer as: the fleet's, else what the providers' config says."""
    if spec is not None:
        project_id = CLOUDS[spec.cloud].project_of(spec.platform) or OfflineCloud.project
        return OfflineCloud(project=project_id, region=spec.region)
    region = next((str(values[key]) for key in REGION_KEYS if values.get(key)), None)
    project = next((str(values[key]) for key in PROJECT_KEYS if values.get(key)), None)
    return OfflineCloud(
        project=project or OfflineCloud.project, region=region or OfflineCloud.region
    )


def load(stack: str, start: Path | None = None) -> tuple[Project, StackConfig]:
    """The project at or above ``start`` (default: the working directory) and the config of
    its ``stack``; raises :class:`PlanInputError`.

    ``stack`` may also be a stack file's path (``../infra/Pulumi.prod.yaml``): the project
    is then the one at or above that file, wherever the command runs."""
    if stack.endswith((".yaml", ".yml")) or "/" in stack:
        return _load_file(Path(stack))
    project = find_project((start or Path.cwd()).resolve())
    return project, stack_config(project, stack)


def _load_file(path: Path) -> tuple[Project, StackConfig]:
    name = path.name
    if not (name.startswith("Pulumi.") and name.endswith(".yaml")) or name == "Pulumi.yaml":
        raise PlanInputError(
            f"--stack {path}: not a stack file; allowed: a stack name, or the path of a "
            "Pulumi.<stack>.yaml"
        )
    if not path.is_file():
        raise PlanInputError(f"--stack {path}: no such file")
    path = path.resolve()
    project = find_project(path.parent)
    # The file may live beside the project's stackConfigDir (a copy, a CI checkout).
    project = replace(project, stack_dir=path.parent)
    return project, stack_config(project, name[len("Pulumi.") : -len(".yaml")])


def plan(project: Project, config: StackConfig) -> PlanResult:
    """Validate the config, run the program offline and check what it registers; raises
    :class:`spotproof.fleet.SpecError` on a bad config value.

    A stack with ``spotproof:`` settings is a fleet spotproof's program builds; one without
    is a program of components on a cluster spotproof did not create, judged with what
    ``spotproof:existingCluster`` says of that cluster (``spotproof.fleet.existing``)."""
    if builds_a_cluster(config.values):
        spec = fleet_from_config(config.stack, config.values, secret_keys=config.secret_keys)
        return check(spec, run_program(project, config, _offline_cloud(spec, config.values)))
    cluster = existing_cluster(config.values)
    recording = run_program(project, config, _offline_cloud(None, config.values))
    return check_existing(config.stack, cluster, recording)


def run_plan(stack: str, start: Path | None = None) -> PlanResult:
    """Plan ``stack`` of the project at or above ``start`` (default: the working directory).

    Raises :class:`PlanInputError` or :class:`spotproof.fleet.SpecError` on bad input.
    """
    return plan(*load(stack, start))
