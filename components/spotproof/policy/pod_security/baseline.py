"""The ``baseline`` level's checks, each with the minors its variants apply from.

Read from kubernetes/pod-security-admission ``policy/check_*.go``: every check is named
after its upstream file, and a check with more than one variant cites the tag it was read
at. A check with one variant from 1.0 has not changed in any release spotproof supports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.policy.pod_security.registry import (
    Check,
    CheckPod,
    Request,
    Variant,
    named,
    security,
    unless_user_namespace,
)

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
"""``check_capabilities_baseline.go``: the container runtime's default set."""
PROFILE_TYPES = frozenset({"RuntimeDefault", "Localhost"})
"""What a seccomp or AppArmor profile type may be."""
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"


def _host_namespaces(pod: Request) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.spec.get(field):
            yield f"host namespaces ({field}=true)"


def _privileged(pod: Request) -> Iterator[str]:
    for container in pod.containers():
        if security(container).get("privileged"):
            yield f"privileged ({named(container)})"


def _capabilities(pod: Request) -> Iterator[str]:
    for container in pod.containers():
        added = set((security(container).get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            extra = ", ".join(sorted(added - BASELINE_CAPABILITIES))
            yield f"non-default capabilities {extra} ({named(container)})"


def _host_path_volumes(pod: Request) -> Iterator[str]:
    for volume in pod.spec.get("volumes") or []:
        if "hostPath" in volume:
            yield f"hostPath volume {volume.get('name')}"


def _host_ports(pod: Request) -> Iterator[str]:
    for container in pod.containers():
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"hostPort {port['hostPort']} ({named(container)})"


def _profiles(field: str) -> CheckPod:
    """A check that the pod's and each container's ``field`` (``seccompProfile``), where
    set, is of a type allowed."""

    def check(pod: Request) -> Iterator[str]:
        for where, context in _contexts(pod):
            kind = (context.get(field) or {}).get("type")
            if kind is not None and kind not in PROFILE_TYPES:
                yield f"{field}.type={kind} ({where})"

    return check


def _apparmor(pod: Request) -> Iterator[str]:
    yield from _profiles("appArmorProfile")(pod)
    for key, value in pod.annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and not (
            value in ("", "runtime/default") or str(value).startswith("localhost/")
        ):
            yield f"AppArmor annotation {key}={value}"


def _selinux(allowed_types: frozenset[str]) -> CheckPod:
    def check(pod: Request) -> Iterator[str]:
        for where, context in _contexts(pod):
            options = context.get("seLinuxOptions") or {}
            if options.get("type", "") not in allowed_types:
                yield f"seLinuxOptions.type={options['type']} ({where})"
            for field in ("user", "role"):
                if options.get(field):
                    yield f"seLinuxOptions.{field} set ({where})"

    return check


SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
SELINUX_TYPES_1_31 = SELINUX_TYPES_1_0 | {"container_engine_t"}


def unmasked_proc(pod: Request) -> Iterator[str]:
    for container in pod.containers():
        mount = security(container).get("procMount")
        if mount not in (None, "Default"):
            yield f"procMount {mount} ({named(container)})"


def _seccomp_annotations(pod: Request) -> Iterator[str]:
    keys = [SECCOMP_POD_ANNOTATION]
    keys += [f"{SECCOMP_CONTAINER_ANNOTATION}{c.get('name')}" for c in pod.containers()]
    for key in keys:
        value = pod.annotations.get(key)
        if value is not None and not (
            value in ("runtime/default", "docker/default") or str(value).startswith("localhost/")
        ):
            yield f"seccomp annotation {key}={value}"


def _sysctls(allowed: frozenset[str]) -> CheckPod:
    def check(pod: Request) -> Iterator[str]:
        for sysctl in pod.security.get("sysctls") or []:
            if sysctl.get("name") not in allowed:
                yield f"forbidden sysctl {sysctl.get('name')}"

    return check


SYSCTLS_1_0 = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    }
)
SYSCTLS_1_27 = SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
SYSCTLS_1_29 = SYSCTLS_1_27 | {
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SYSCTLS_1_32 = SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
SYSCTLS_1_37 = SYSCTLS_1_32 | {"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}


def _windows_host_process(pod: Request) -> Iterator[str]:
    for where, context in _contexts(pod):
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            yield f"windowsOptions.hostProcess=true ({where})"


def _host_probes(pod: Request) -> Iterator[str]:
    for container in pod.containers():
        lifecycle = container.get("lifecycle") or {}
        handlers = [
            *(container.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")),
            lifecycle.get("postStart"),
            lifecycle.get("preStop"),
        ]
        for handler in handlers:
            for action in ("httpGet", "tcpSocket"):
                if ((handler or {}).get(action) or {}).get("host"):
                    yield f"probe or lifecycle {action}.host set ({named(container)})"


def _contexts(pod: Request) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The pod's security context, then each container's, with where each is."""
    yield "pod", pod.security
    for container in pod.containers():
        yield named(container), security(container)


CHECKS = (
    Check("hostNamespaces", "baseline", (Variant(0, _host_namespaces),)),
    Check("privileged", "baseline", (Variant(0, _privileged),)),
    Check("capabilities_baseline", "baseline", (Variant(0, _capabilities),)),
    Check("hostPathVolumes", "baseline", (Variant(0, _host_path_volumes),)),
    Check("hostPorts", "baseline", (Variant(0, _host_ports),)),
    Check("appArmorProfile", "baseline", (Variant(0, _apparmor),)),
    # check_seLinuxOptions.go (v0.31.0 on): container_engine_t is allowed from 1.31.
    Check(
        "seLinuxOptions",
        "baseline",
        (Variant(0, _selinux(SELINUX_TYPES_1_0)), Variant(31, _selinux(SELINUX_TYPES_1_31))),
    ),
    # check_procMount_baseline.go (v0.35.0 on): a pod in its own user namespace may unmask
    # /proc from 1.35 (restricted still refuses it: ``restricted``).
    Check(
        "procMount",
        "baseline",
        (Variant(0, unmasked_proc), Variant(35, unless_user_namespace(unmasked_proc))),
    ),
    # check_seccompProfile_baseline.go (v0.36.2): the alpha annotations before 1.19, the
    # securityContext field from 1.19.
    Check(
        "seccompProfile_baseline",
        "baseline",
        (Variant(0, _seccomp_annotations), Variant(19, _profiles("seccompProfile"))),
    ),
    # check_sysctls.go: the safe set grew at 1.27, 1.29 and 1.32 (v0.32.0 on: tcp_rmem and
    # tcp_wmem), and grows at 1.37 (v0.37.0-alpha.1; 1.37 is not yet released).
    Check(
        "sysctls",
        "baseline",
        (
            Variant(0, _sysctls(SYSCTLS_1_0)),
            Variant(27, _sysctls(SYSCTLS_1_27)),
            Variant(29, _sysctls(SYSCTLS_1_29)),
            Variant(32, _sysctls(SYSCTLS_1_32)),
            Variant(37, _sysctls(SYSCTLS_1_37)),
        ),
    ),
    Check("windowsHostProcess", "baseline", (Variant(0, _windows_host_process),)),
    # check_hostProbesAndhostLifecycle.go (v0.34.0 on): no variant before 1.34, so a pod
    # judged at 1.33 or older may point a probe or hook at another host.
    Check("hostProbesAndHostLifecycle", "baseline", (Variant(34, _host_probes),)),
)
