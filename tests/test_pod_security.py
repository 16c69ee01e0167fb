"""Pod Security admission as the plan applies it: each level's checks on a pod spec, the
level a namespace's labels enforce, and every pod the stacks render admitted."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from spotproof import policy
from spotproof.plan.recording.recorder import Resource
from spotproof.policy.pod_security import refused
from tests.support import STACKS, plan_of

RESTRICTED_POD: dict[str, Any] = {
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "trainer",
            "image": "ghcr.io/acme/train:1",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
    "volumes": [{"name": "scratch", "emptyDir": {}}],
}


def _pod(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    pod = copy.deepcopy(RESTRICTED_POD)
    change(pod)
    return pod


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["containers"][0]


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_a_stack_renders_is_admitted_by_its_namespace(stack: str) -> None:
    plan = plan_of(stack)
    assert [v for v in plan.violations if v.policy == "pod-security"] == []


def test_a_pod_meeting_restricted_is_admitted_at_every_level() -> None:
    assert [refused(level, RESTRICTED_POD, {}) for level in ("baseline", "restricted")] == [[], []]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda p: _container(p)["securityContext"].pop("allowPrivilegeEscalation"),
            "allowPrivilegeEscalation != false (container trainer)",
        ),
        (
            lambda p: _container(p)["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
            "capabilities.drop does not include ALL (container trainer)",
        ),
        (
            lambda p: _container(p)["securityContext"]["capabilities"].update(add=["CHOWN"]),
            "capabilities.add CHOWN (container trainer)",
        ),
        (
            lambda p: p["securityContext"].pop("runAsNonRoot"),
            "runAsNonRoot != true (container trainer)",
        ),
        (lambda p: p["securityContext"].update(runAsUser=0), "runAsUser=0 (pod)"),
        (
            lambda p: p["securityContext"].pop("seccompProfile"),
            "seccompProfile unset, on the pod and on container trainer",
        ),
        (
            lambda p: p["volumes"].append({"name": "data", "nfs": {"server": "x", "path": "/"}}),
            "restricted volume type nfs (volume data)",
        ),
        (
            lambda p: p.setdefault("initContainers", []).append({"name": "setup", "image": "x:1"}),
            "allowPrivilegeEscalation != false (container setup)",
        ),
    ],
)
def test_restricted_refuses_what_baseline_admits(
    change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    pod = _pod(change)
    assert reason in refused("restricted", pod, {})
    assert refused("baseline", pod, {}) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda p: p.update(hostNetwork=True), "host namespaces (hostNetwork=true)"),
        (
            lambda p: _container(p)["securityContext"].update(privileged=True),
            "privileged (container trainer)",
        ),
        (
            lambda p: _container(p)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
            "non-default capabilities SYS_ADMIN (container trainer)",
        ),
        (
            lambda p: p["volumes"].append({"name": "dev", "hostPath": {"path": "/dev"}}),
            "hostPath volume dev",
        ),
        (
            lambda p: _container(p).update(ports=[{"containerPort": 80, "hostPort": 80}]),
            "hostPort 80 (container trainer)",
        ),
        (
            lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}),
            "seccompProfile.type=Unconfined (pod)",
        ),
        (
            lambda p: p["securityContext"].update(
                sysctls=[{"name": "kernel.msgmax", "value": "1"}]
            ),
            "forbidden sysctl kernel.msgmax",
        ),
        (
            lambda p: _container(p).update(
                livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}
            ),
            "probe or lifecycle httpGet.host set (container trainer)",
        ),
    ],
)
def test_baseline_refuses_host_access_and_privilege(
    change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    assert reason in refused("baseline", _pod(change), {})


def test_privileged_admits_anything() -> None:
    pod = _pod(lambda p: p.update(hostPID=True))
    assert refused("privileged", pod, {}) == []


def _resource(obj: dict[str, Any], name: str) -> Resource:
    version = obj["apiVersion"] if "/" in obj["apiVersion"] else f"core/{obj['apiVersion']}"
    return Resource(
        type=f"kubernetes:{version}:{obj['kind']}",
        name=name,
        urn=f"urn:test::{name}",
        parent=None,
        custom=True,
        inputs=obj,
    )


def _namespace(name: str, labels: dict[str, str]) -> Resource:
    return _resource(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        f"ns-{name}",
    )


def _daemon_set(namespace: str) -> Resource:
    pod = _pod(lambda p: p["volumes"].append({"name": "plugins", "hostPath": {"path": "/var"}}))
    return _resource(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": namespace},
            "spec": {"template": {"spec": pod}},
        },
        "agent",
    )


def _pod_security(resources: list[Resource], version: str = "1.33") -> list[tuple[str, str]]:
    return [
        (v.resource, v.message)
        for v in policy.evaluate(resources, version)
        if v.policy == "pod-security"
    ]


def test_a_daemon_set_with_host_paths_is_refused_where_restricted_is_enforced() -> None:
    restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
    [(resource, message)] = _pod_security([_namespace("agents", restricted), _daemon_set("agents")])
    assert resource == "agent"
    assert message == (
        'DaemonSet agents/agent: namespace agents enforces Pod Security "restricted:latest", '
        "which on Kubernetes 1.33 refuses every pod of it: restricted volume type hostPath "
        "(volume plugins)"
    )


def test_a_namespace_that_enforces_nothing_admits_host_paths() -> None:
    privileged = {"pod-security.kubernetes.io/enforce": "privileged"}
    assert _pod_security([_namespace("agents", privileged), _daemon_set("agents")]) == []
    assert _pod_security([_daemon_set("undeclared")]) == []


def test_the_smoke_job_without_its_security_context_is_refused_in_the_plan() -> None:
    plan = plan_of("gke-dev")
    job = plan.recording.one("kubernetes:batch/v1:Job", "gke-dev-smoke-job")
    del job.inputs["spec"]["template"]["spec"]["securityContext"]
    [(resource, message)] = _pod_security(plan.recording.resources)
    assert resource == "gke-dev-smoke-job"
    assert message.startswith(
        'Job spotproof/spotproof-smoke: namespace spotproof enforces Pod Security "restricted:'
    )
    assert "seccompProfile unset, on the pod and on container trainer" in message
