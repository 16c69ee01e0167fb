"""``spotproof check``: lint Kubernetes manifests, however they are deployed, against a
planned stack.

The manifests (``documents``) join the stack's own objects in the plan's recording, and
every check of ``spotproof plan`` runs over the whole: schemas, policies, the scheduling
fit, scale-up, the preemption path, gang capacity, queue admission and the pitfalls
(``spotproof.plan.simulation.pitfalls``). Only what concerns the manifests is reported, each finding
at the line of the key it is about (``locate``). Without a stack only what needs no
cluster runs: schemas, the Job rules, GPU limits.

An object the API server would refuse (a field of the wrong type, an unknown field, a
missing required one) is reported for that alone: the other checks judge only objects the
API would accept, so a list where an object belongs is a finding, never a crash.

Exit codes as ``plan``: 0 nothing found, 1 findings, 2 bad input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from spotproof.check.documents import CheckInputError, Document, load, load_stdin
from spotproof.check.locate import line_of
from spotproof.commands import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from spotproof.plan import PlanResult, recheck
from spotproof.plan.recording import manifests
from spotproof.plan.recording.manifests import SCHEMA_POLICY
from spotproof.plan.recording.recorder import Recording, Resource
from spotproof.plan.schemas import api_server
from spotproof.policy import evaluate, scope_of
from spotproof.scheduling import pod_templates

__all__ = ["CheckInputError", "CheckResult", "Finding", "check", "load_all"]

DEFAULT_KUBERNETES_VERSION = "1.33"
"""The schema version without a stack (a stack's own version otherwise)."""
CORE_WORKLOAD_APIS = frozenset({"v1", "apps/v1", "batch/v1"})
"""Where Kubernetes itself serves the workloads whose refused fields can be set aside."""


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    policy: str
    message: str

    def text(self) -> str:
        return f"{self.path}:{self.line}: [{self.policy}] {self.message}"


@dataclass(frozen=True)
class CheckResult:
    files: tuple[Path, ...]
    objects: int
    stack: str | None
    findings: tuple[Finding, ...]
    refused: int = 0
    """Objects the API server would refuse (``kubernetes-schema`` findings): the files
    are invalid, so the exit code is 2, as for any bad input."""
    unchecked: tuple[str, ...] = ()
    """Custom resources of kinds spotproof has no schema for: not judged, not refused."""

    @property
    def exit_code(self) -> int:
        if self.refused:
            return EXIT_BAD_INPUT
        return EXIT_FAILED if self.findings else EXIT_OK


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def load_all(paths: Sequence[Path]) -> list[Document]:
    """Every object of every file, in order; :class:`CheckInputError` on the first bad one.

    A directory stands for every manifest under it (``*.yaml``, ``*.yml``, ``*.json``,
    hidden folders skipped, in path order); ``-`` for standard input."""
    documents = []
    for path in paths:
        if str(path) == "-":
            documents += load_stdin()
            continue
        for file in _manifests(path):
            documents += load(file)
    return documents


def _manifests(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    found = sorted(
        file
        for file in path.rglob("*")
        if file.suffix in MANIFEST_SUFFIXES
        and file.is_file()
        and not any(part.startswith(".") for part in file.relative_to(path).parts)
    )
    if not found:
        raise CheckInputError(
            f"{path}: no manifests in it; allowed: a folder holding "
            + ", ".join(f"*{suffix}" for suffix in MANIFEST_SUFFIXES)
        )
    return found


def _resource(document: Document) -> Resource:
    api, kind = str(document.obj["apiVersion"]), str(document.obj["kind"])
    group_version = api if "/" in api else f"core/{api}"
    return Resource(
        type=f"kubernetes:{group_version}:{kind}",
        name=document.name,
        urn=f"urn:spotproof:check::{document.name}",
        parent=None,
        custom=True,
        inputs=document.obj,
    )


def check(documents: list[Document], planned: PlanResult | None) -> CheckResult:
    """The findings about ``documents``, checked against ``planned`` when given."""
    mine = [_resource(d) for d in documents]
    version = planned.facts.kubernetes_version if planned else DEFAULT_KUBERNETES_VERSION
    violations, _ = manifests.validate(Recording("", "", mine), version)
    # A custom resource has its schema in its CRD, which spotproof does not hold: it is
    # left unchecked (and said so), not refused as if the API server would refuse it.
    custom = {
        r.name
        for r in mine
        if not manifests.is_core_kind(r.inputs.get("kind"), version)
        and not pod_templates.is_workload(r.inputs)
        and r.name in {v.resource for v in violations if "no schema for kind" in v.message}
    }
    violations = [v for v in violations if v.resource not in custom]
    refused = {v.resource for v in violations}
    judged = []
    for resource in mine:
        if resource.name in custom:
            continue
        judgeable = _judgeable(resource, version) if resource.name in refused else resource
        if judgeable is None:
            continue
        judged.append(judgeable)
        if judgeable is not resource:  # what the API also refuses in the rest of it
            violations += [
                manifests.schema_violation(resource.name, resource.inputs, error)
                for error in api_server.errors(judgeable.inputs)
            ]
    if planned is not None:
        stack = planned.recording
        recording = Recording(stack.stack, stack.project, [*stack.resources, *judged])
        violations += [
            v
            for v in recheck(planned, recording).violations
            if not (v.policy == SCHEMA_POLICY and v.resource in refused)
        ]
    else:
        # A rule about what the stack provides would report what is merely not shown.
        violations += [v for v in evaluate(judged) if not scope_of(v.policy).needs_stack]
    by_name = {d.name: d for d in documents}
    findings = sorted(
        {
            Finding(by_name[v.resource].path, line_of(by_name[v.resource], v), v.policy, v.message)
            for v in violations
            if v.resource in by_name and scope_of(v.policy).manifests
        },
        key=lambda f: (str(f.path), f.line, f.policy, f.message),
    )
    # What the API server refuses on a line is the finding there; a rule's view of the same
    # value (a restartPolicy it refuses and a rule wants Never) waits until it is valid.
    refused_lines = {(f.path, f.line) for f in findings if f.policy == SCHEMA_POLICY}
    findings = [
        f for f in findings if f.policy == SCHEMA_POLICY or (f.path, f.line) not in refused_lines
    ]
    files = tuple(dict.fromkeys(d.path for d in documents))
    return CheckResult(
        files,
        len(documents),
        planned.facts.stack if planned else None,
        tuple(findings),
        refused=len(refused),
        unchecked=tuple(by_name[name].label for name in sorted(custom)),
    )


def _judgeable(resource: Resource, version: str) -> Resource | None:
    """What the other checks may judge of an object the API server would refuse: a core
    object without the fields the schema refuses, when the rest is valid; a core workload
    the schema accepts but whose values the API refuses (an unknown ``restartPolicy``), as
    it is. Nothing of any other refused object: its own validator spoke for it."""
    obj = resource.inputs
    errors = manifests.schema_error_paths(obj, version)
    if errors:
        pruned = manifests.without_errors(obj, version, errors)
        return None if pruned is None else replace(resource, inputs=pruned)
    if obj.get("apiVersion") in CORE_WORKLOAD_APIS and pod_templates.is_workload(obj):
        return resource
    return None
