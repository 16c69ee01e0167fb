"""What a rule is and what it reports; the rule modules build on these."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self

from spotproof import scheduling
from spotproof.scheduling import pod_templates
from spotproof.scheduling.pod_templates import PodTemplate


class Problem(str):
    """A rule's message that also names the key it is about, as a dotted key path into the
    resource's inputs (``spec.template.spec.tolerations``, ``containers[0].resources``
    relative to a pod spec where the rule judges one). The rule sets it where it finds the
    problem. Everywhere words are compared, joined or printed (CrossGuard, the plan's
    report, a test of a rule) it is its message; ``spotproof check`` reads ``key_path`` to
    report the finding at that key's line, so a reworded message stays where it was."""

    key_path: str

    def __new__(cls, message: str, key_path: str) -> Self:
        problem = super().__new__(cls, message)
        problem.key_path = key_path
        return problem

    def __reduce__(self) -> tuple[type[Problem], tuple[str, str]]:
        return Problem, (str(self), self.key_path)

    def under(self, prefix: str) -> Problem:
        """The same problem with its key path below ``prefix`` (a pod spec's path)."""
        return Problem(self, f"{prefix}.{self.key_path}" if self.key_path else prefix)


def key_path_of(message: str) -> str | None:
    """The key path a rule gave its message (a :class:`Problem`); None for plain words."""
    return message.key_path if isinstance(message, Problem) else None


def pod_key_path(
    resource: PlannedResource,
    template: PodTemplate,
    key: str = "",
    container: Mapping[str, Any] | None = None,
) -> str:
    """The key path in ``resource``'s inputs of ``key`` of ``template``'s pod spec, or of
    ``container`` of it where given (:func:`container_key_path`); of the pod spec or the
    container itself when ``key`` is empty."""
    where = pod_templates.pod_spec_path(resource.inputs, template.part)
    if container is not None:
        return container_key_path(where, template.spec, container, key)
    return f"{where}.{key}" if key else where


def container_key_path(
    pod_spec_path: str, pod_spec: Mapping[str, Any], container: Mapping[str, Any], key: str = ""
) -> str:
    """The key path of ``key`` of ``container`` (relative to it: ``resources.limits``; the
    container itself when empty), one of the ``containers`` of ``pod_spec``, which the
    resource keeps at ``pod_spec_path``; the pod spec's for a container not among them (an
    init container, judged by what the whole pod runs)."""
    containers = pod_spec.get("containers") or []
    index = next((i for i, c in enumerate(containers) if c is container), None)
    if index is None:
        return pod_spec_path
    return f"{pod_spec_path}.containers[{index}]" + (f".{key}" if key else "")


@dataclass(frozen=True)
class Violation:
    policy: str
    resource: str
    message: str
    key_path: str | None = None
    """What in the resource it is about, where the rule says (:class:`Problem`); a
    finding of ``spotproof check`` is reported at that key's line."""


@dataclass(frozen=True)
class Scope:
    """Where a rule applies, as the rule declares it."""

    manifests: bool = True
    """Whether it judges users' own manifests (``spotproof check``); False for a rule about
    how spotproof's own program deploys them, where kubectl or Argo may deploy a manifest."""
    needs_stack: bool = False
    """Whether it judges what the stack around a manifest provides (its NetworkPolicies,
    its roles): without a stack it would report what is merely not shown."""


class PlannedResource(Protocol):
    type: str
    name: str
    urn: str
    parent: str | None
    inputs: dict[str, Any]
    dependencies: tuple[str, ...] | None
    """URNs Pulumi creates first; None for an object applied outside the program."""
    ignore_changes: tuple[str, ...]
    """Input paths Pulumi sets at creation only and leaves to others afterwards."""


@dataclass(frozen=True)
class ResourceRule:
    name: str
    description: str
    resource_type: str
    check: Callable[[Mapping[str, Any]], Iterable[str]]
    """Yields messages (a :class:`Problem` where it knows the key)."""
    scope: Scope = Scope()


@dataclass(frozen=True)
class StackRule:
    name: str
    description: str
    check: Callable[[list[PlannedResource]], Iterable[tuple[str, str]]]
    """Yields (resource name, message) pairs (a :class:`Problem` where it knows the key)."""
    at_version: Callable[[list[PlannedResource], str], Iterable[tuple[str, str]]] | None = None
    """The check of a rule whose verdict depends on the cluster's Kubernetes minor, for a
    caller that knows it (``1.33``, from the stack); ``check`` judges without it."""
    scope: Scope = Scope()


def as_cloud_taint(taint: scheduling.Taint) -> tuple[str, str, str]:
    """A taint as GCP and AWS inputs spell it, for comparing against rendered taints."""
    return (taint.key, taint.value, scheduling.cloud_effect(taint.effect))
