"""Pod Security admission, as the API server applies it to the pods of a namespace.

A namespace labelled ``pod-security.kubernetes.io/enforce: baseline|restricted`` refuses
every pod that breaks a check of that level. Workload objects are admitted however they
break it (enforce "is not applied to workload resources, only to the resulting pod
objects", https://kubernetes.io/docs/concepts/security/pod-security-admission/), so a Job
is created and each of its pods refused: the run never starts and nothing says so at
``pulumi up``. This module evaluates every pod template of a stack or a manifest against
the level its namespace enforces.

The checks are those of kubernetes/pod-security-admission ``policy/check_*.go`` at
v0.36 (Kubernetes 1.36), level ``latest``: every baseline check, and for ``restricted``
the restricted checks plus the baseline checks they do not override. Each check looks at
the pod's ``initContainers``, ``containers`` and ``ephemeralContainers``
(``policy/visitor.go``). What this module does not follow: an ``enforce-version`` older
than ``latest`` (its few relaxations are older than any Kubernetes version spotproof
supports) and the cluster-wide defaults an admin may configure (a namespace without the
label is left alone: upstream's default is ``privileged``, and neither GKE, EKS nor AKS
documents another).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from spotproof.policy.base import PlannedResource, StackRule
from spotproof.scheduling import pod_templates

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")
NAMESPACE = "kubernetes:core/v1:Namespace"
DAEMON_SET = "DaemonSet"

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
"""``check_capabilities_baseline.go``."""
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)
"""``check_sysctls.go``, the list as of 1.32."""
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
"""``check_restrictedVolumes.go``: every other volume source is refused."""
SECCOMP_ALLOWED = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        *pod_templates.containers(pod),
        *(pod.get("ephemeralContainers") or []),
    ]


def _security(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return container.get("securityContext") or {}


def _named(container: Mapping[str, Any]) -> str:
    return f"container {container.get('name')}"


def baseline(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    """What the ``baseline`` level refuses in ``pod`` (a pod spec), one line each."""
    pod_security = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            yield f"host namespaces ({field}=true)"
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            yield f"hostPath volume {volume.get('name')}"
    for sysctl in pod_security.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"forbidden sysctl {sysctl.get('name')}"
    yield from _selinux("pod", pod_security.get("seLinuxOptions"))
    yield from _seccomp_unconfined("pod", pod_security)
    yield from _apparmor("pod", pod_security)
    if (pod_security.get("windowsOptions") or {}).get("hostProcess"):
        yield "windowsOptions.hostProcess=true (pod)"
    for key, value in annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and not (
            value in ("", "runtime/default") or str(value).startswith("localhost/")
        ):
            yield f"AppArmor annotation {key}={value}"
    user_namespace = pod.get("hostUsers") is False
    for container in _containers(pod):
        where, security = _named(container), _security(container)
        if security.get("privileged"):
            yield f"privileged ({where})"
        added = set((security.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            yield f"non-default capabilities {', '.join(sorted(added))} ({where})"
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f"hostPort {port['hostPort']} ({where})"
        yield from _host_probes(container)
        yield from _selinux(where, security.get("seLinuxOptions"))
        yield from _seccomp_unconfined(where, security)
        yield from _apparmor(where, security)
        if security.get("procMount") not in (None, "Default") and not user_namespace:
            yield f"procMount {security['procMount']} ({where})"
        if (security.get("windowsOptions") or {}).get("hostProcess"):
            yield f"windowsOptions.hostProcess=true ({where})"


def restricted(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    """What the ``restricted`` level refuses: the baseline checks it keeps, and its own."""
    overridden = (
        "hostPath volume",
        "non-default capabilities",
        "procMount",
        "seccompProfile.type=Unconfined",
    )
    for finding in baseline(pod, annotations):
        if not finding.startswith(overridden):
            yield finding
    pod_security = pod.get("securityContext") or {}
    windows = (pod.get("os") or {}).get("name") == "windows"
    user_namespace = pod.get("hostUsers") is False
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if kinds and not kinds <= RESTRICTED_VOLUMES:
            yield f"restricted volume type {', '.join(sorted(kinds))} (volume {volume.get('name')})"
    pod_non_root = pod_security.get("runAsNonRoot")
    if pod_non_root is False and not user_namespace:
        yield "runAsNonRoot=false (pod)"
    if pod_security.get("runAsUser") == 0 and not user_namespace:
        yield "runAsUser=0 (pod)"
    pod_seccomp = (pod_security.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in SECCOMP_ALLOWED:
        yield f"seccompProfile.type={pod_seccomp} (pod)"
    for container in _containers(pod):
        where, security = _named(container), _security(container)
        if not windows and security.get("allowPrivilegeEscalation") is not False:
            yield f"allowPrivilegeEscalation != false ({where})"
        capabilities = security.get("capabilities") or {}
        if not windows and "ALL" not in (capabilities.get("drop") or []):
            yield f"capabilities.drop does not include ALL ({where})"
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            yield f"capabilities.add {', '.join(sorted(added))} ({where})"
        if not user_namespace:
            non_root = security.get("runAsNonRoot")
            if non_root is False or (non_root is None and pod_non_root is not True):
                yield f"runAsNonRoot != true ({where})"
            if security.get("runAsUser") == 0:
                yield f"runAsUser=0 ({where})"
        seccomp = (security.get("seccompProfile") or {}).get("type")
        if seccomp is not None and seccomp not in SECCOMP_ALLOWED:
            yield f"seccompProfile.type={seccomp} ({where})"
        elif seccomp is None and pod_seccomp is None and not windows:
            yield f"seccompProfile unset, on the pod and on {where}"
        if security.get("procMount") not in (None, "Default"):
            yield f"procMount {security['procMount']} ({where})"


def _selinux(where: str, options: Mapping[str, Any] | None) -> Iterator[str]:
    if not options:
        return
    if options.get("type", "") not in SELINUX_TYPES:
        yield f"seLinuxOptions.type={options['type']} ({where})"
    for field in ("user", "role"):
        if options.get(field):
            yield f"seLinuxOptions.{field} set ({where})"


def _seccomp_unconfined(where: str, security: Mapping[str, Any]) -> Iterator[str]:
    if (security.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield f"seccompProfile.type=Unconfined ({where})"


def _apparmor(where: str, security: Mapping[str, Any]) -> Iterator[str]:
    kind = (security.get("appArmorProfile") or {}).get("type")
    if kind is not None and kind not in SECCOMP_ALLOWED:
        yield f"appArmorProfile.type={kind} ({where})"


def _host_probes(container: Mapping[str, Any]) -> Iterator[str]:
    handlers = [
        container.get(probe) or {} for probe in ("livenessProbe", "readinessProbe", "startupProbe")
    ]
    lifecycle = container.get("lifecycle") or {}
    handlers += [lifecycle.get("postStart") or {}, lifecycle.get("preStop") or {}]
    for handler in handlers:
        for action in ("httpGet", "tcpSocket"):
            if (handler.get(action) or {}).get("host"):
                yield f"probe or lifecycle {action}.host set ({_named(container)})"


CHECKS = {"baseline": baseline, "restricted": restricted}


def refused(level: str, pod: Mapping[str, Any], annotations: Mapping[str, str]) -> list[str]:
    """Why a namespace enforcing ``level`` refuses ``pod``; empty if it admits it."""
    check = CHECKS.get(level)
    return list(check(pod, annotations)) if check else []


def _templates(resource: PlannedResource) -> list[pod_templates.PodTemplate]:
    """A workload's pod templates, and a DaemonSet's (whose pods admission judges too)."""
    obj = resource.inputs
    if obj.get("kind") == DAEMON_SET and str(obj.get("apiVersion")) == "apps/v1":
        template = (obj.get("spec") or {}).get("template") or {}
        if template.get("spec") is not None:
            return [
                pod_templates.PodTemplate(None, template.get("metadata") or {}, template["spec"], 1)
            ]
        return []
    return pod_templates.pod_templates(obj)


def enforced_levels(resources: list[PlannedResource]) -> dict[str, str]:
    """Namespace -> the level its labels enforce, for the namespaces declared."""
    levels = {}
    for namespace in (r for r in resources if r.type == NAMESPACE):
        metadata = namespace.inputs.get("metadata") or {}
        level = (metadata.get("labels") or {}).get(ENFORCE_LABEL)
        if metadata.get("name") and level in LEVELS:
            levels[str(metadata["name"])] = str(level)
    return levels


def pods_admitted(resources: list[PlannedResource]) -> Iterator[tuple[str, str]]:
    levels = enforced_levels(resources)
    for resource in resources:
        metadata = resource.inputs.get("metadata") or {}
        namespace = str(metadata.get("namespace", "default"))
        level = levels.get(namespace, "privileged")
        for template in _templates(resource):
            annotations = template.metadata.get("annotations") or {}
            reasons = refused(level, template.spec, annotations)
            if reasons:
                part = f"/{template.part}" if template.part else ""
                yield (
                    resource.name,
                    f"{resource.inputs.get('kind')} {namespace}/{metadata.get('name')}{part}: "
                    f'namespace {namespace} enforces Pod Security "{level}", which refuses '
                    f"every pod of it: {'; '.join(reasons)}",
                )


STACK_RULES: tuple[StackRule, ...] = (
    StackRule(
        "pod-security",
        "Every pod passes the Pod Security Standard its namespace enforces.",
        pods_admitted,
    ),
)
