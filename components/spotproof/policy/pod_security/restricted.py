"""The ``restricted`` level's own checks, each with the minors its variants apply from.

Read from kubernetes/pod-security-admission ``policy/check_*.go``, named after the upstream
files; where a check has more than one variant, the comment cites the tag it was read at.
Restricted also runs the baseline checks none of these overrides (``registry``).
"""

from __future__ import annotations

from collections.abc import Iterator

from spotproof.policy.base import Problem
from spotproof.policy.pod_security.baseline import PROFILE_TYPES, unmasked_proc
from spotproof.policy.pod_security.registry import (
    POD_SECURITY,
    Check,
    Request,
    Variant,
    named,
    security,
    unless_user_namespace,
    unless_windows,
)

RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
"""``check_restrictedVolumes.go``: every other volume source is refused."""
IMAGE_VOLUMES_FROM = 33
"""An ``image`` volume joined the list in place, with no new variant, in v0.33.0 (commit
"Allow ImageVolume for Restricted PSA profiles"): a 1.31 or 1.32 API server refuses it at
any version, a 1.33 or later one admits it at any."""


def _privilege_escalation(pod: Request) -> Iterator[Problem]:
    for where, container in pod.containers():
        if security(container).get("allowPrivilegeEscalation") is not False:
            yield Problem(
                f"allowPrivilegeEscalation != false ({named(container)})",
                f"{where}.securityContext",
            )


def _capabilities(pod: Request) -> Iterator[Problem]:
    for where, container in pod.containers():
        capabilities = security(container).get("capabilities") or {}
        key_path = f"{where}.securityContext"
        if "ALL" not in (capabilities.get("drop") or []):
            yield Problem(f"capabilities.drop does not include ALL ({named(container)})", key_path)
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            yield Problem(
                f"capabilities.add {', '.join(sorted(added))} ({named(container)})", key_path
            )


def _volumes(pod: Request) -> Iterator[Problem]:
    allowed = RESTRICTED_VOLUMES | ({"image"} if pod.server >= IMAGE_VOLUMES_FROM else set())
    for volume in pod.spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if kinds and not kinds <= allowed:
            yield Problem(
                f"restricted volume type {', '.join(sorted(kinds))} (volume {volume.get('name')})",
                "volumes",
            )


def _non_root(pod: Request) -> Iterator[Problem]:
    pod_non_root = pod.security.get("runAsNonRoot")
    if pod_non_root is False:
        yield Problem("runAsNonRoot=false (pod)", POD_SECURITY)
    for where, container in pod.containers():
        non_root = security(container).get("runAsNonRoot")
        if non_root is False or (non_root is None and pod_non_root is not True):
            yield Problem(f"runAsNonRoot != true ({named(container)})", f"{where}.securityContext")


def _non_zero_user(pod: Request) -> Iterator[Problem]:
    if pod.security.get("runAsUser") == 0:
        yield Problem("runAsUser=0 (pod)", POD_SECURITY)
    for where, container in pod.containers():
        if security(container).get("runAsUser") == 0:
            yield Problem(f"runAsUser=0 ({named(container)})", f"{where}.securityContext")


def _seccomp(pod: Request) -> Iterator[Problem]:
    pod_type = (pod.security.get("seccompProfile") or {}).get("type")
    if pod_type is not None and pod_type not in PROFILE_TYPES:
        yield Problem(f"seccompProfile.type={pod_type} (pod)", POD_SECURITY)
    for where, container in pod.containers():
        kind = (security(container).get("seccompProfile") or {}).get("type")
        key_path = f"{where}.securityContext"
        if kind is not None and kind not in PROFILE_TYPES:
            yield Problem(f"seccompProfile.type={kind} ({named(container)})", key_path)
        elif kind is None and pod_type is None:
            yield Problem(f"seccompProfile unset, on the pod and on {named(container)}", key_path)


CHECKS = (
    # check_allowPrivilegeEscalation.go (v0.36.2): the field exists from 1.8; Windows pods
    # are exempt from 1.25.
    Check(
        "allowPrivilegeEscalation",
        "restricted",
        (Variant(8, _privilege_escalation), Variant(25, unless_windows(_privilege_escalation))),
    ),
    # check_capabilities_restricted.go (v0.36.2): from 1.22, Windows pods exempt from 1.25.
    Check(
        "capabilities_restricted",
        "restricted",
        (
            Variant(22, _capabilities, overrides=("capabilities_baseline",)),
            Variant(25, unless_windows(_capabilities), overrides=("capabilities_baseline",)),
        ),
    ),
    # check_procMount_restricted.go (v0.35.0 on): from 1.35, when baseline's procMount lets
    # user-namespaced pods through, restricted keeps refusing any unmasked /proc; before,
    # baseline's own check (which refused it for every pod) ran at this level too.
    Check(
        "procMount_restricted",
        "restricted",
        (Variant(35, unmasked_proc, overrides=("procMount",)),),
    ),
    Check(
        "restrictedVolumes",
        "restricted",
        (Variant(0, _volumes, overrides=("hostPathVolumes",)),),
    ),
    # check_runAsNonRoot.go (v0.35.0 on): root in a user namespace allowed from 1.35.
    Check(
        "runAsNonRoot",
        "restricted",
        (Variant(0, _non_root), Variant(35, unless_user_namespace(_non_root))),
    ),
    # check_runAsUser.go (v0.35.0 on): from 1.23; uid 0 in a user namespace from 1.35.
    Check(
        "runAsUser",
        "restricted",
        (Variant(23, _non_zero_user), Variant(35, unless_user_namespace(_non_zero_user))),
    ),
    # check_seccompProfile_restricted.go (v0.36.2): from 1.19, Windows pods exempt from 1.25.
    Check(
        "seccompProfile_restricted",
        "restricted",
        (
            Variant(19, _seccomp, overrides=("seccompProfile_baseline",)),
            Variant(25, unless_windows(_seccomp), overrides=("seccompProfile_baseline",)),
        ),
    ),
)
