"""What each release of a controller's CRDs accepts, where releases differ.

spotproof renders objects for controllers whose version a stack pins (JobSet, Kueue, KEDA,
Karpenter) or that the cloud runs for it (AKS node auto-provisioning's Karpenter). An API
server prunes a field its CRD does not know (or refuses the object under strict field
validation), so a field or value that only a newer release accepts silently changes what
the object means. Each controller's catalog module lists, as :class:`Introduced`, every
field or enum value that its releases accept from some version on, read from the CRD of
each release tag; the plan (``plan.simulation.controller_versions``) checks every object
of the controller against the version the stack installs. Fields no entry names exist in
every release a stack may choose.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Introduced:
    """A field (or one value of it) that a controller's CRD accepts from ``since`` on."""

    kind: str
    path: str
    """Dotted, from the object's root; ``[]`` steps into every item of a list."""
    since: str
    value: str | None = None
    """Only this value is new (an enum's); None: the field itself is."""


def version_key(version: str) -> tuple[int, ...]:
    """``"v1.10.2"`` -> ``(1, 10, 2)``; a suffix after ``-`` is ignored."""
    core = version.removeprefix("v").split("-", 1)[0]
    return tuple(int(part) for part in core.split(".") if part.isdigit())


def older(version: str, than: str) -> bool:
    return version_key(version) < version_key(than)
