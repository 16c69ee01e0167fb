"""Unit-test your own Pulumi program that uses spotproof's components, without a cloud.

``record`` runs a program in-process under ``pulumi.runtime.set_mocks`` with mocks that
answer like the clouds do for what spotproof's components read back (a cluster's
endpoint, a service account's email, an AWS account id), and returns every registration
with its inputs and parent. It is what ``spotproof plan`` runs on, offered for your tests::

    from spotproof.testing import record

    def program() -> None:
        GpuNodePools("gpu", GpuNodePoolsArgs(cluster_name="ml", ...))

    recording = record(program, stack="dev", project="ml-infra")
    pools = recording.of_type("gcp:container/nodePool:NodePool")
    assert pools[0].inputs["nodeConfig"]["spot"] is True

Inputs are recorded as the engine would pass them to a provider, with camelCase keys;
whole numbers come back as ``int`` (the wire carries them as floats), secrets wrapped in
:class:`Secret`. A value unknown until deploy (an output of a ``StackReference``, say) is
recorded as ``pulumi.output.Unknown``, whatever a mock derives from it stays unknown, and
an exported output that is unknown reads back as ``None``. One program runs at a time per
process.

The stack's config is read as ``spotproof plan`` reads it: from ``Pulumi.<stack>.yaml`` of
the project at or above ``project_dir`` (default: the working directory), where there is
one, so a program that builds its fleet from the stack (``fleet_from_config``) sees the
same values in a test as in a plan. Pass ``config`` (a flat ``ns:key`` -> string mapping,
``{}`` for none) to give it by hand instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from spotproof.plan.config.project import PlanInputError, find_project
from spotproof.plan.config.stack import StackConfig, stack_config
from spotproof.plan.recording import recorder
from spotproof.plan.recording.offline import OfflineCloud
from spotproof.plan.recording.recorder import Recording, Resource, Secret

__all__ = ["OfflineCloud", "Recording", "Resource", "Secret", "record"]


def record(
    program: Callable[[], None],
    *,
    stack: str,
    project: str | None = None,
    config: Mapping[str, str] | None = None,
    secret_keys: Iterable[str] = (),
    cloud: OfflineCloud | None = None,
    project_dir: Path | None = None,
) -> Recording:
    """Run ``program`` as Pulumi program ``project``/``stack`` under mocks; what it
    registered. Without ``config``, the stack's own file where the project has one (see
    the module); ``project`` defaults to that project's name."""
    found = _stack_file(stack, project_dir) if config is None else None
    if found is not None:
        name, read = found
        config, secret_keys, project = read.values, read.secret_keys, project or name
    return recorder.record(
        program,
        stack=stack,
        project=project or "project",
        config=config,
        secret_keys=secret_keys,
        cloud=cloud,
    )


def _stack_file(stack: str, project_dir: Path | None) -> tuple[str, StackConfig] | None:
    """The project's name and the config of ``stack``, or None where there is no project,
    or it has no such stack (a component tested alone)."""
    try:
        found = find_project((project_dir or Path.cwd()).resolve())
    except PlanInputError:
        return None
    if not found.stack_file(stack).is_file():
        return None
    return found.name, stack_config(found, stack)
