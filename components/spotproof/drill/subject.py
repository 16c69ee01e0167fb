"""What a drill drills, and what it needs to know of the stack: read offline from the plan,
and from the deployed stack's outputs.

From the offline plan (``spotproof plan``'s own run of the Pulumi program): the cloud,
whether the stack is protected, the workload (the smoke Job by default, or a Job or JobSet
the stack renders, by name) with its namespace and declared grace, and the preemption
path the plan predicts for it on each kind of reclaimable capacity.

From the deployed stack (``pulumi stack output --json --show-secrets``, or a file holding
that output): the kubeconfig and the drill's grant. A cluster spotproof did not create is
drilled from ``--kubeconfig`` and ``--outputs`` alone, with the workload named by flags.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotproof import bounded_json
from spotproof.catalog import Cloud
from spotproof.catalog import jobset as jobset_facts
from spotproof.drill.errors import DrillError, DrillRefused
from spotproof.kube.smoke import JOB_NAME
from spotproof.plan import PlanResult
from spotproof.plan.model import PreemptionPath
from spotproof.plan.simulation.preemption import DEFAULT_GRACE_SECONDS

KINDS = ("Job", jobset_facts.KIND)
"""What a drill can reclaim a pod of: a Job's restart is its pod's, a JobSet's its gang's."""
OUTPUTS_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class Subject:
    cloud: Cloud
    kind: str
    """``Job`` or ``JobSet``."""
    namespace: str
    name: str
    stack: str | None = None
    protected: bool = False
    """Drilled only with ``--yes``: a stack not marked disposable, or a cluster whose
    outputs do not say it is (:func:`disposable`)."""
    declared_grace: float | None = None
    """The grace the plan read from the workload's pod template; None without a plan. The
    drill judges by the running pod's own (``drill.runner``), and notes a difference."""
    paths: tuple[PreemptionPath, ...] = ()
    """The plan's prediction per kind of reclaimable capacity; empty without a plan."""
    smoke: bool = False
    """The stack's smoke Job, whose digest the drill checks against a local reference."""

    def __str__(self) -> str:
        where = f" on stack {self.stack}" if self.stack else ""
        return f"{self.kind} {self.namespace}/{self.name}{where}"

    def path_for(self, pool: str) -> PreemptionPath | None:
        """The predicted path of the capacity that ``pool`` (a node's pool label) is in:
        the one naming that pool, else the only one."""
        named = [p for p in self.paths if pool and pool in p.pools]
        if named:
            return named[0]
        return self.paths[0] if len(self.paths) == 1 else None


def subject_from_plan(result: PlanResult, kind: str | None, name: str | None) -> Subject:
    """The workload ``kind``/``name`` of the planned stack (the smoke Job when neither is
    given); DrillRefused, listing what the stack renders, when it has no such workload."""
    wanted_name = name or JOB_NAME
    wanted_kind = kind or "Job"
    candidates = [
        o
        for o in result.outcomes
        if o.workload.kind in KINDS and not o.system and "/" not in o.workload.name
    ]
    chosen = [
        o for o in candidates if o.workload.kind == wanted_kind and o.workload.name == wanted_name
    ]
    if not chosen:
        offered = ", ".join(sorted(f"{o.workload.kind} {o.workload.name}" for o in candidates))
        raise DrillRefused(
            f"stack {result.facts.stack} renders no {wanted_kind} {wanted_name}; allowed: "
            f"{offered or 'none (enable spotproof:smokeTest, or render a Job or JobSet)'}"
        )
    outcome = chosen[0]
    workload = outcome.workload
    paths = outcome.paths
    if workload.kind == jobset_facts.KIND:
        # A JobSet's paths are planned per replicated Job; every one of them is a candidate.
        paths = tuple(
            p
            for o in result.outcomes
            if o.workload.name.startswith(f"{workload.name}/")
            for p in o.paths
        )
    grace = workload.pod_spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    return Subject(
        result.facts.cloud,
        workload.kind,
        workload.namespace,
        workload.name,
        stack=result.facts.stack,
        # None: no fleet decided, and each component protects itself by default.
        protected=result.facts.protect is not False,
        declared_grace=float(grace),
        paths=paths,
        smoke=workload.kind == "Job" and workload.name == JOB_NAME,
    )


def stack_outputs(stack: str, project_dir: Path | None) -> dict[str, Any]:
    """The deployed stack's outputs, secrets shown (the kubeconfig is one), through the
    Pulumi CLI the user deploys with."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise DrillError(
            "the pulumi CLI is not on PATH, so stack outputs cannot be read; allowed: install "
            "it, or pass --outputs FILE written by `pulumi stack output --json --show-secrets`"
        )
    try:
        done = subprocess.run(
            [pulumi, "stack", "output", "--json", "--show-secrets", "--stack", stack],
            cwd=project_dir,
            capture_output=True,
            text=True,
            timeout=OUTPUTS_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DrillError(
            f"pulumi stack output --stack {stack} did not answer in {OUTPUTS_TIMEOUT_SECONDS} s"
        ) from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise DrillError(f"pulumi stack output --stack {stack} failed: {said}")
    where = f"pulumi stack output --stack {stack}"
    try:
        return _object(bounded_json.loads(done.stdout, where), where)
    except bounded_json.JsonLimitError as error:
        raise DrillError(str(error)) from None


def outputs_from_file(path: Path) -> dict[str, Any]:
    """The outputs in the JSON file ``path``, read within ``bounded_json.FILE``: a regular
    file, not too large or deep."""
    try:
        found = bounded_json.read(path)
    except bounded_json.JsonLimitError as error:
        raise DrillError(f"--outputs {error}") from None
    return _object(found, f"--outputs {path}")


def _object(found: Any, where: str) -> dict[str, Any]:
    if not isinstance(found, dict):
        raise DrillError(f"{where}: a JSON object of outputs was expected")
    return found


DISPOSABLE = "disposable"
"""The key of an ``--outputs`` file that marks a cluster drilled from ``--kubeconfig`` as one
that may lose work, as ``spotproof:disposable: true`` marks a stack."""


def disposable(outputs: Mapping[str, Any], where: str) -> bool:
    """Whether the outputs say the cluster is disposable: only ``true`` does; a cluster that
    says nothing is protected, as a stack is. DrillRefused for a value that is no boolean."""
    value = outputs.get(DISPOSABLE, False)
    if not isinstance(value, bool):
        raise DrillRefused(
            f'{where}: "{DISPOSABLE}" is {json.dumps(value)}; allowed: true (the cluster may '
            "lose work to a drill) or false"
        )
    return value


def kubeconfig_from_outputs(outputs: Mapping[str, Any], stack: str, directory: Path) -> Path:
    """The stack's ``kubeconfig`` output written to a file only the caller can read."""
    config = outputs.get("kubeconfig")
    if not config:
        raise DrillError(
            f"stack {stack} exports no kubeconfig; allowed: pass --kubeconfig FILE [--context NAME]"
        )
    path = directory / f"{stack}.kubeconfig"
    path.touch(mode=0o600)
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path
