"""The Pod Security checks as the API server registers them, each with its versions.

A check has one or more variants, each applying from a minor version on (upstream's
``VersionedCheck.MinimumVersion``). A level judged at a version runs, of each check of that
level, its newest variant not newer than the version, and none where every variant is
newer. ``restricted`` also runs the baseline checks, except those that a restricted variant
in force at that version overrides (``OverrideCheckIDs``): restricted's stricter hostPath,
capabilities, seccomp and, from 1.35, procMount checks stand in for baseline's, and only
while they are in force. This is kubernetes/pod-security-admission ``policy/registry.go``
(``populate``, ``inflateVersions``) at v0.36.2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from spotproof.policy.base import Problem

Level = Literal["baseline", "restricted"]


@dataclass(frozen=True)
class Request:
    """A pod as Pod Security admission receives it."""

    spec: Mapping[str, Any]
    annotations: Mapping[str, str]
    server: int
    """The API server's minor. A check's behaviour is mostly chosen by the version in
    force, but a few changed in place between releases without a new variant."""

    @property
    def security(self) -> Mapping[str, Any]:
        return self.spec.get("securityContext") or {}

    @property
    def windows(self) -> bool:
        return (self.spec.get("os") or {}).get("name") == "windows"

    @property
    def user_namespace(self) -> bool:
        """``hostUsers: false``: the pod's root is not the node's."""
        return self.spec.get("hostUsers") is False

    def containers(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Every container a check visits: init, regular and ephemeral
        (``policy/visitor.go``), each with its key path in the pod spec (``containers[0]``),
        where a problem with it is reported."""
        return [
            (f"{field}[{index}]", container)
            for field in CONTAINER_FIELDS
            for index, container in enumerate(self.spec.get(field) or [])
        ]

    def contexts(self) -> list[tuple[str, str, Mapping[str, Any]]]:
        """The pod's security context, then each container's, with whose it is (``pod``,
        ``container NAME``) and its key path in the pod spec."""
        return [
            ("pod", "securityContext", self.security),
            *(
                (named(container), f"{where}.securityContext", security(container))
                for where, container in self.containers()
            ),
        ]


CONTAINER_FIELDS = ("initContainers", "containers", "ephemeralContainers")
POD_SECURITY = "securityContext"
"""Where a problem of the pod's own security settings is reported, the annotations that
stood for its fields before them included."""


def security(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return container.get("securityContext") or {}


def named(container: Mapping[str, Any]) -> str:
    return f"container {container.get('name')}"


CheckPod = Callable[[Request], Iterator[Problem]]
"""One line for each thing it refuses, at the key path in the pod spec it judges."""


def unless_windows(check: CheckPod) -> CheckPod:
    """A 1.25 variant: a pod with ``os.name: windows`` is exempt, the fields judged having no
    meaning for Windows containers."""

    def variant(pod: Request) -> Iterator[Problem]:
        if not pod.windows:
            yield from check(pod)

    return variant


def unless_user_namespace(check: CheckPod) -> CheckPod:
    """A 1.35 variant: a pod with ``hostUsers: false`` is exempt, its root not being the
    node's (KEP-127). Before 1.35 the exemption sat behind the alpha gate
    UserNamespacesPodSecurityStandards (``policy/helpers.go``, v0.31.0 to v0.34.x), which an
    admin must turn on and managed control planes (GKE, EKS, AKS) do not: taken as off."""

    def variant(pod: Request) -> Iterator[Problem]:
        if not pod.user_namespace:
            yield from check(pod)

    return variant


@dataclass(frozen=True)
class Variant:
    since: int
    """The first minor it applies at (upstream's ``MinimumVersion``)."""
    check: CheckPod
    overrides: tuple[str, ...] = ()
    """Baseline checks, by id, it stands in for while it is in force (restricted only)."""


@dataclass(frozen=True)
class Check:
    id: str
    """Upstream's check id, which overrides name."""
    level: Level
    variants: tuple[Variant, ...]
    """Oldest first, each newer than the one before."""

    def at(self, minor: int) -> Variant | None:
        """The variant in force at ``minor``; None before the check existed."""
        applicable = [variant for variant in self.variants if variant.since <= minor]
        return applicable[-1] if applicable else None


def in_force(checks: Sequence[Check], level: str, minor: int) -> list[Variant]:
    """What a namespace enforcing ``level`` at version ``minor`` runs: baseline's checks
    first, then restricted's, each in the order given."""
    baseline = [(check.id, check.at(minor)) for check in checks if check.level == "baseline"]
    if level == "baseline":
        return [variant for _, variant in baseline if variant]
    restricted = [
        variant
        for check in checks
        if check.level == "restricted" and (variant := check.at(minor)) is not None
    ]
    overridden = {id_ for variant in restricted for id_ in variant.overrides}
    return [v for id_, v in baseline if v and id_ not in overridden] + restricted
