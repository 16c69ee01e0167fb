"""``spotproof plan``: run a stack's Pulumi program offline and check what it would build.

Steps, each in its own module:

1. ``project``   find ``Pulumi.yaml`` and read the stack's config as the engine would
   (project defaults, stack values, secrets), remembering each value's line (``sources``);
2. ``spotproof.spec`` validate that config (a bad value is an input error, exit 2);
3. ``recorder``  run the program in-process under Pulumi mocks, recording every resource;
4. ``manifests`` write the Kubernetes objects as YAML and validate them against the
   OpenAPI schema of the cluster's Kubernetes version;
5. ``spotproof.policy`` and ``workloads`` run the policy rules and the scheduling check
   over the pools the plan would create (``nodes``);
6. ``outcomes`` asks, per workload, which pools would get a node for it (``scaleup``)
   and what a reclaim does to it (``preemption``); ``pitfalls`` looks for the field
   guide's workload pitfalls; ``lifecycle`` replays the runtime's checkpoint history
   against each bucket's lifecycle rules.

Exit codes: 0 when every check passes, 1 when any is violated, 2 on bad input.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spotproof import fit
from spotproof.plan import (
    controller_versions,
    gpu_advertising,
    lifecycle,
    manifests,
    nodes,
    outcomes,
    pitfalls,
    preemption,
    reachability,
    reclaims,
    termination,
    uniqueness,
    workloads,
)
from spotproof.plan.nodes import Pool
from spotproof.plan.outcomes import Outcome
from spotproof.plan.project import PlanInputError, Project, find_project
from spotproof.plan.recorder import OfflineCloud, Recording, record
from spotproof.plan.stackconfig import StackConfig, stack_config
from spotproof.policy import Violation, evaluate
from spotproof.runtime.manifest import DEFAULT_KEEP
from spotproof.spec import FleetSpec, advice, fleet_from_config
from spotproof.spec.advice import SpecWarning
from spotproof.spec.config import CLOUDS

__all__ = [
    "PlanInputError",
    "PlanResult",
    "StackConfig",
    "check",
    "load",
    "plan",
    "run_plan",
]


@dataclass
class PlanResult:
    spec: FleetSpec
    recording: Recording
    pools: list[Pool]
    outcomes: list[Outcome] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Checks that could not run here, with why; ``--strict`` fails on any."""
    warnings: list[SpecWarning] = field(default_factory=list)
    """Settings that build but that a real preemption may not honour (never an exit 1)."""

    @property
    def nodes(self) -> list[fit.NodeShape]:
        return [pool.shape for pool in self.pools]

    @property
    def exit_code(self) -> int:
        return 1 if self.violations else 0


def check(spec: FleetSpec, recording: Recording) -> PlanResult:
    """Every check over a recording; tests mutate a recording and call this again."""
    pools, unadvertised = gpu_advertising.advertised(recording, nodes.pools(recording))
    found = outcomes.outcomes(recording, pools)
    violations, skipped = manifests.validate(recording, spec.kubernetes_version)
    violations += unadvertised
    violations += controller_versions.check(spec, recording)
    violations += evaluate(recording.resources)
    violations += uniqueness.check(recording)
    violations += workloads.check(recording, [pool.shape for pool in pools])
    violations += outcomes.check(found)
    violations += pitfalls.check(recording, found)
    violations += termination.check(recording, found)
    violations += reclaims.check(recording, found)
    violations += reachability.check(spec.cloud, spec.api_access, recording)
    violations += lifecycle.check(
        recording,
        prefix=f"{spec.bucket.prefix}/",
        keep=DEFAULT_KEEP,
        retention_days=spec.bucket.noncurrent_days,
    )
    warnings = [*advice.warnings(spec), *_unassured_paths(found)]
    violations = _without_superseded(violations)
    return PlanResult(spec, recording, pools, found, violations, skipped, warnings)


SUPERSEDED_BY = {"job-fits-preemption-notice": "preemption-path"}
"""A finding that says less about the same mistake than another rule's, reported only
where the other is not: the CrossGuard rule compares a grace period with the cloud's
notice alone, the preemption path with what each pool's reclaim honours."""


def _without_superseded(violations: list[Violation]) -> list[Violation]:
    said = {(v.policy, v.resource) for v in violations}
    return [v for v in violations if (SUPERSEDED_BY.get(v.policy), v.resource) not in said]


def _unassured_paths(found: list[Outcome]) -> list[SpecWarning]:
    """A warning per workload whose reclaim may not take the path the plan checked."""
    return [
        SpecWarning(
            preemption.CAVEAT_KEYS.get(path.capacity, "spotproof:cloud"),
            f"{outcome.workload.label} on {path.capacity}: {path.caveat}"
            + _loss_bound(outcome.workload.pod_spec),
        )
        for outcome in found
        for path in outcome.paths
        if path.caveat
    ]


def _loss_bound(pod_spec: Mapping[str, Any]) -> str:
    for container in pod_spec.get("containers") or []:
        for variable in container.get("env") or []:
            if variable.get("name") == "CHECKPOINT_INTERVAL":
                return f", losing at most CHECKPOINT_INTERVAL={variable.get('value')} steps"
    return ", losing what it trained since"


def run_program(project: Project, config: StackConfig, spec: FleetSpec) -> Recording:
    """Run the project's program file as ``pulumi preview`` would, but against mocks."""
    program_dir = str(project.main.parent)

    def program() -> None:
        sys.path.insert(0, program_dir)
        try:
            runpy.run_path(str(project.main), run_name="__main__")
        finally:
            sys.path.remove(program_dir)

    project_id = CLOUDS[spec.cloud].project_of(spec.platform) or OfflineCloud.project
    cloud = OfflineCloud(project=project_id, region=spec.region)
    return record(
        program,
        stack=config.stack,
        project=project.name,
        config=config.values,
        secret_keys=config.secret_keys,
        cloud=cloud,
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
    :class:`spotproof.spec.SpecError` on a bad config value."""
    spec = fleet_from_config(config.stack, config.values, secret_keys=config.secret_keys)
    return check(spec, run_program(project, config, spec))


def run_plan(stack: str, start: Path | None = None) -> PlanResult:
    """Plan ``stack`` of the project at or above ``start`` (default: the working directory).

    Raises :class:`PlanInputError` or :class:`spotproof.spec.SpecError` on bad input.
    """
    return plan(*load(stack, start))
