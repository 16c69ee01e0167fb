"""The ``baseline`` level's checks, each with the minors its variants apply from.

Read from kubernetes/pod-security-admission ``policy/check_*.go``: every check is named
after its upstream file, and a check with more than one variant cites the tag it was read
at. A check with one variant from 1.0 has not changed in any release spotproof supports.
"""

from __future__ import annotations

from collections.abc import Iterator

from spotproof.policy.base import Problem
from spotproof.policy.pod_security.registry import (
    POD_SECURITY,
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


def _host_namespaces(pod: Request) -> Iterator[Problem]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.spec.get(field):
            yield Problem(f"host namespaces ({field}=true)", field)


def _privileged(pod: Request) -> Iterator[Problem]:
    for where, container in pod.containers():
        if security(container).get("privileged"):
            yield Problem(f"privileged ({named(container)})", f"{where}.securityContext")


def _capabilities(pod: Request) -> Iterator[Problem]:
    for where, container in pod.containers():
        added = set((security(container).get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            extra = ", ".join(sorted(added - BASELINE_CAPABILITIES))
            yield Problem(
                f"non-default capabilities {extra} ({named(container)})",
                f"{where}.securityContext",
            )


def _host_path_volumes(pod: Request) -> Iterator[Problem]:
    for volume in pod.spec.get("volumes") or []:
        if "hostPath" in volume:
            yield Problem(f"hostPath volume {volume.get('name')}", "volumes")


def _host_ports(pod: Request) -> Iterator[Problem]:
    for where, container in pod.containers():
        for index, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                yield Problem(
                    f"hostPort {port['hostPort']} ({named(container)})",
                    f"{where}.ports[{index}]",
                )


def _profiles(field: str) -> CheckPod:
    """A check that the pod's and each container's ``field`` (``seccompProfile``), where
    set, is of a type allowed."""

    def check(pod: Request) -> Iterator[Problem]:
        for whose, key_path, context in pod.contexts():
            kind = (context.get(field) or {}).get("type")
            if kind is not None and kind not in PROFILE_TYPES:
                yield Problem(f"{field}.type={kind} ({whose})", key_path)

    return check


def _apparmor(pod: Request) -> Iterator[Problem]:
    yield from _profiles("appArmorProfile")(pod)
    for key, value in pod.annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and not (
            value in ("", "runtime/default") or str(value).startswith("localhost/")
        ):
            yield Problem(f"AppArmor annotation {key}={value}", POD_SECURITY)


def _selinux(allowed_types: frozenset[str]) -> CheckPod:
    def check(pod: Request) -> Iterator[Problem]:
        for whose, key_path, context in pod.contexts():
            options = context.get("seLinuxOptions") or {}
            if options.get("type", "") not in allowed_types:
                yield Problem(f"seLinuxOptions.type={options['type']} ({whose})", key_path)
            for field in ("user", "role"):
                if options.get(field):
                    yield Problem(f"seLinuxOptions.{field} set ({whose})", key_path)

    return check


SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
SELINUX_TYPES_1_31 = SELINUX_TYPES_1_0 | {"container_engine_t"}


def unmasked_proc(pod: Request) -> Iterator[Problem]:
    for where, container in pod.containers():
        mount = security(container).get("procMount")
        if mount not in (None, "Default"):
            yield Problem(f"procMount {mount} ({named(container)})", f"{where}.securityContext")


def _seccomp_annotations(pod: Request) -> Iterator[Problem]:
    keys = [SECCOMP_POD_ANNOTATION]
    keys += [f"{SECCOMP_CONTAINER_ANNOTATION}{c.get('name')}" for _, c in pod.containers()]
    for key in keys:
        value = pod.annotations.get(key)
        if value is not None and not (
            value in ("runtime/default", "docker/default") or str(value).startswith("localhost/")
        ):
            yield Problem(f"seccomp annotation {key}={value}", POD_SECURITY)


def _sysctls(allowed: frozenset[str]) -> CheckPod:
    def check(pod: Request) -> Iterator[Problem]:
        for sysctl in pod.security.get("sysctls") or []:
            if sysctl.get("name") not in allowed:
                yield Problem(f"forbidden sysctl {sysctl.get('name')}", POD_SECURITY)

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


def _windows_host_process(pod: Request) -> Iterator[Problem]:
    for whose, key_path, context in pod.contexts():
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            yield Problem(f"windowsOptions.hostProcess=true ({whose})", key_path)


def _host_probes(pod: Request) -> Iterator[Problem]:
    for where, container in pod.containers():
        lifecycle = container.get("lifecycle") or {}
        handlers = [
            *((p, container.get(p)) for p in ("livenessProbe", "readinessProbe", "startupProbe")),
            *((f"lifecycle.{hook}", lifecycle.get(hook)) for hook in ("postStart", "preStop")),
        ]
        for key, handler in handlers:
            for action in ("httpGet", "tcpSocket"):
                if ((handler or {}).get(action) or {}).get("host"):
                    yield Problem(
                        f"probe or lifecycle {action}.host set ({named(container)})",
                        f"{where}.{key}",
                    )


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
