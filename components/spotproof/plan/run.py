"""``spotproof plan``'s run of one stack, step by step:

1. ``project``   find ``Pulumi.yaml`` and read the stack's config as the engine would
   (project defaults, stack values, secrets), remembering each value's line (``sources``);
2. ``spotproof.fleet`` validate that config (a bad value is an input error, exit 2);
3. ``recorder``  run the program in-process under Pulumi mocks, recording every resource,
   the mocks answering as the stack's cloud would (``offline``);
4. ``plan.judge`` every check over the recording: the Kubernetes objects against the
   OpenAPI schema of the cluster's Kubernetes version (``manifests``), the policy rules
   and the scheduling check over the pools the plan would create (``nodes``,
   ``workloads``); per workload, which pools would get a node for it (``scale_up``) and
   what a reclaim does to it (``preemption``), gathered in ``outcomes``; the field guide's
   workload pitfalls (``pitfalls``); the runtime's checkpoint history replayed against
   each bucket's lifecycle rules (``lifecycle``).

Exit codes: 0 when every check passes, 1 when any is violated, 2 on bad input.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from spotproof.catalog import PROFILES
from spotproof.fleet import FleetSpec, fleet_from_config
from spotproof.fleet.config import CLOUDS
from spotproof.fleet.existing import builds_a_cluster, existing_cluster
from spotproof.plan.config.project import PlanInputError, Project, find_project
from spotproof.plan.config.stack import StackConfig, stack_config
from spotproof.plan.judge import check, check_existing
from spotproof.plan.recording.offline import OfflineCloud
from spotproof.plan.recording.recorder import Recording, record
from spotproof.plan.result import PlanResult


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
