"""Which version of the Pod Security Standards judges a namespace's pods.

Two versions meet. The namespace pins one with ``pod-security.kubernetes.io/enforce-version``:
``latest`` (what a namespace without the label gets too) or ``v1.<minor>``; any other value
and the API server refuses the namespace itself (kubernetes/pod-security-admission v0.36.2,
``api/helpers.go`` ``ParseVersion`` and ``admission/admission.go`` ``ValidateNamespace``).
And the API server judges with the checks compiled into its own release: ``latest`` is the
newest variant of each check that release knows, and a pinned minor past the newest it knows
is lowered to that (``policy/registry.go`` ``EvaluatePod``). No release holds a variant
newer than its own minor (every tag from v0.31.0 to v0.36.2 read: none was backported), so
the version in force is the pinned minor capped at the server's, and ``latest`` is the
server's minor.

Minors are plain integers: upstream's registry assumes a single major version (1) as well.
"""

from __future__ import annotations

import re

from spotproof.fleet.config import KUBERNETES_VERSIONS

LATEST = "latest"
SUPPORTED = tuple(int(version.split(".")[1]) for version in KUBERNETES_VERSIONS)
"""The minors a stack's cluster may run (``spotproof:kubernetesVersion``): where the
cluster's own is not known, a pod is judged on each of them."""
_PINNED = re.compile(r"v1\.(0|[1-9][0-9]*)")
"""``ParseVersion``'s pattern: ``v1.05`` and ``1.33`` are refused as upstream refuses them."""
_CLUSTER = re.compile(r"1\.([0-9]+)(?:\.[0-9A-Za-z.+-]*)?")
"""A cluster's version as the stack (``1.33``) or GKE's ``minMasterVersion``
(``1.35.0-gke.1171000``) writes it."""


class VersionLabelError(ValueError):
    """A version label the API server refuses; the message says what is allowed."""


def pinned(label: str) -> int | None:
    """The minor an ``enforce-version`` value pins; None for ``latest``."""
    if label == LATEST:
        return None
    match = _PINNED.fullmatch(label)
    if match is None:
        raise VersionLabelError(
            f"allowed: {LATEST}, or v1.<minor> such as v1.{SUPPORTED[0]} (no leading zero)"
        )
    return int(match.group(1))


def in_force(pinned_minor: int | None, server: int) -> int:
    """The version a server at minor ``server`` judges a namespace pinned at ``pinned_minor``."""
    return server if pinned_minor is None else min(pinned_minor, server)


def cluster_minor(version: str) -> int | None:
    """The minor of a cluster version (``1.33``, ``1.35.0-gke.1171000``); None if unreadable."""
    match = _CLUSTER.fullmatch(version.strip())
    return int(match.group(1)) if match else None


def span(minors: list[int]) -> str:
    """``1.31`` or ``1.34-1.37``, for consecutive minors."""
    first, last = minors[0], minors[-1]
    return f"1.{first}" if first == last else f"1.{first}-1.{last}"
