"""Pod Security judged at the version a namespace enforces: the minor its
``enforce-version`` label pins, capped at the cluster's, else the cluster's own. Each check
that changed between minors admits a pod at one and refuses it at another, through
``spotproof check`` of a manifest against a stack, as the API server of that minor would."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.check import CheckResult, check, load_all
from spotproof.plan import PlanResult, run_plan
from spotproof.plan import check as plan_check
from spotproof.policy.pod_security import CHECKS
from tests.support import REPO, plan_of, run_cli, stack_config

pytestmark = pytest.mark.processes

POD: dict[str, Any] = {
    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists", "effect": "NoSchedule"}],
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "web",
            "image": "ghcr.io/acme/web:1",
            "resources": {"limits": {"memory": "1Gi"}},
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
}
"""A pod every level admits at every version, and that every other check passes."""
PlanOf = Callable[[str, "str | None"], PlanResult]


@pytest.fixture(scope="module")
def project_at(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str | None], Path]:
    """A project with one stack, ``t``, whose cluster runs the given minor (None: not
    stated): a copy of eks-dev (``"fleet"``), or a cluster spotproof did not create
    (``"existing"``), to which the program adds nothing."""
    roots: dict[tuple[str, str | None], Path] = {}

    def project(kind: str, version: str | None) -> Path:
        if (kind, version) not in roots:
            root = tmp_path_factory.mktemp("project")
            (root / "stacks").mkdir()
            (root / "infra").mkdir()
            shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
            if kind == "fleet":
                config = stack_config("eks-dev")
                config["spotproof:kubernetesVersion"] = version
                program = (REPO / "infra" / "__main__.py").read_text()
            else:
                cluster = {"cloud": "eks", **({"kubernetesVersion": version} if version else {})}
                config = {"aws:region": "us-west-2", "spotproof:existingCluster": cluster}
                program = "import pulumi\n"
            (root / "infra" / "__main__.py").write_text(program)
            (root / "stacks" / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": config}))
            roots[kind, version] = root
        return roots[kind, version]

    return project


@pytest.fixture(scope="module")
def stack_at(project_at: Callable[[str, str | None], Path]) -> PlanOf:
    """The plan of that project's stack; each test gets its own copy."""
    plans: dict[tuple[str, str | None], PlanResult] = {}

    def plan(kind: str, version: str | None) -> PlanResult:
        if (kind, version) not in plans:
            plans[kind, version] = run_plan("t", project_at(kind, version))
        return copy.deepcopy(plans[kind, version])

    return plan


def _manifest(
    tmp_path: Path, level: str, change: Callable[[dict[str, Any]], None], pinned: str | None
) -> Path:
    """A namespace enforcing ``level`` (at ``pinned``, if given), open to egress, and a pod
    in it: :data:`POD` with ``change`` made to the Pod object."""
    labels = {"pod-security.kubernetes.io/enforce": level}
    if pinned is not None:
        labels["pod-security.kubernetes.io/enforce-version"] = pinned
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "jobs"},
        "spec": copy.deepcopy(POD),
    }
    change(pod)
    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "jobs", "labels": labels}},
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "ingress-only", "namespace": "jobs"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "egress": [{}]},
        },
        pod,
    ]
    path = tmp_path / "web.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def _judged(
    stack_at: PlanOf,
    tmp_path: Path,
    *,
    level: str,
    change: Callable[[dict[str, Any]], None],
    cluster: str | None,
    pinned: str | None = None,
    kind: str = "fleet",
) -> CheckResult:
    path = _manifest(tmp_path, level, change, pinned)
    planned = stack_at(kind, cluster) if cluster or kind == "existing" else None
    return check(load_all([path]), planned)


def _pod_security(result: CheckResult) -> list[str]:
    return [f.message for f in result.findings if f.policy == "pod-security"]


def _admitted_then_refused(
    stack_at: PlanOf,
    tmp_path: Path,
    level: str,
    change: Callable[[dict[str, Any]], None],
    *,
    versions: tuple[tuple[str, str | None], tuple[str, str | None]],
    kind: str,
) -> list[str]:
    """The pod with ``change`` passes every check at the first (cluster minor, pinned
    version) and fails at the second; its Pod Security findings there."""
    (admitting, admitting_pin), (refusing, refusing_pin) = versions
    admitted = _judged(
        stack_at,
        tmp_path,
        level=level,
        change=change,
        cluster=admitting,
        pinned=admitting_pin,
        kind=kind,
    )
    assert (admitted.exit_code, admitted.findings) == (0, ())
    refused = _judged(
        stack_at,
        tmp_path,
        level=level,
        change=change,
        cluster=refusing,
        pinned=refusing_pin,
        kind=kind,
    )
    assert refused.exit_code == 1
    return _pod_security(refused)


def _root_in_a_user_namespace(spec: dict[str, Any]) -> None:
    spec["hostUsers"] = False
    spec["securityContext"].update(runAsUser=0, runAsNonRoot=False)


def _spec(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """``change`` made to a Pod object's spec."""
    return lambda pod: change(pod["spec"])


def _sysctl(name: str) -> Callable[[dict[str, Any]], None]:
    return _spec(
        lambda spec: spec["securityContext"].update(sysctls=[{"name": name, "value": "1"}])
    )


def _container_security(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return _spec(lambda spec: spec["containers"][0]["securityContext"].update(fields))


def _probe_host(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["livenessProbe"] = {"httpGet": {"host": "10.0.0.1", "port": 80}}


def _unmasked_proc_in_a_user_namespace(pod: dict[str, Any]) -> None:
    pod["spec"]["hostUsers"] = False
    pod["spec"]["containers"][0]["securityContext"]["procMount"] = "Unmasked"


def _windows_without_linux_fields(pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    spec["os"] = {"name": "windows"}
    del spec["securityContext"]["seccompProfile"]
    del spec["containers"][0]["securityContext"]


ON_A_FLEET = {
    # id: (level, change, (cluster, pinned) admitting it, (cluster, pinned) refusing it, the
    # finding): eks-dev at each minor
    "root in a user namespace: refused under restricted on 1.33, admitted on 1.35": (
        "restricted",
        _spec(_root_in_a_user_namespace),
        ("1.35", None),
        ("1.33", None),
        'Pod jobs/web: namespace jobs enforces Pod Security "restricted:latest", which on '
        "Kubernetes 1.33 refuses every pod of it: runAsNonRoot=false (pod); runAsNonRoot != "
        "true (container web); runAsUser=0 (pod)",
    ),
    "the tcp_rmem sysctl: refused under baseline on 1.31, admitted on 1.32": (
        "baseline",
        _sysctl("net.ipv4.tcp_rmem"),
        ("1.32", None),
        ("1.31", None),
        'Pod jobs/web: namespace jobs enforces Pod Security "baseline:latest", which on '
        "Kubernetes 1.31 refuses every pod of it: forbidden sysctl net.ipv4.tcp_rmem",
    ),
    "a probe aimed at another host: admitted under baseline on 1.33, refused on 1.34": (
        "baseline",
        _probe_host,
        ("1.33", None),
        ("1.34", None),
        'Pod jobs/web: namespace jobs enforces Pod Security "baseline:latest", which on '
        "Kubernetes 1.34 refuses every pod of it: probe or lifecycle httpGet.host set "
        "(container web)",
    ),
}


def test_a_namespace_pinned_at_v1_33_is_judged_at_1_33_on_a_newer_cluster(
    stack_at: PlanOf, tmp_path: Path
) -> None:
    result = _judged(
        stack_at,
        tmp_path,
        level="restricted",
        change=_spec(_root_in_a_user_namespace),
        cluster="1.35",
        pinned="v1.33",
    )
    assert result.exit_code == 1
    [message] = _pod_security(result)
    assert message.startswith(
        'Pod jobs/web: namespace jobs enforces Pod Security "restricted:v1.33", which on '
        "Kubernetes 1.35 refuses every pod of it: runAsNonRoot=false (pod)"
    )


def test_a_namespace_pinned_past_its_cluster_is_judged_at_the_clusters_minor(
    stack_at: PlanOf, tmp_path: Path
) -> None:
    """The API server lowers a version it does not know yet to its own newest."""
    result = _judged(
        stack_at, tmp_path, level="baseline", change=_probe_host, cluster="1.33", pinned="v1.36"
    )
    assert (result.exit_code, result.findings) == (0, ())


def test_a_version_label_the_api_server_refuses_is_a_finding_at_the_namespace_labels(
    capsys: pytest.CaptureFixture[str],
    project_at: Callable[[str, str | None], Path],
    tmp_path: Path,
) -> None:
    path = _manifest(tmp_path, "baseline", lambda pod: None, pinned="v1.x")
    root = project_at("existing", "1.33")
    code, out, err = run_cli(capsys, "check", str(path), "--stack", "t", "--project-dir", str(root))
    assert (code, err) == (1, "")
    assert out.splitlines()[0] == (
        f"{path}:7: [pod-security] Namespace jobs: label "
        'pod-security.kubernetes.io/enforce-version="v1.x" is not a Pod Security version, so '
        "the API server refuses the namespace; allowed: latest, or v1.<minor> such as v1.31 "
        "(no leading zero)"
    )


def test_without_the_clusters_minor_every_minor_a_stack_may_run_is_judged(
    stack_at: PlanOf, tmp_path: Path
) -> None:
    result = _judged(
        stack_at, tmp_path, level="baseline", change=_probe_host, cluster=None, kind="existing"
    )
    assert result.exit_code == 1
    assert _pod_security(result) == [
        'Pod jobs/web: namespace jobs enforces Pod Security "baseline:latest", which on '
        "Kubernetes 1.34-1.37 (the cluster's minor is not stated, so every minor a stack may "
        "run was judged) refuses every pod of it: probe or lifecycle httpGet.host set "
        "(container web)"
    ]


def test_without_a_stack_each_run_of_minors_that_refuses_is_reported(
    stack_at: PlanOf, tmp_path: Path
) -> None:
    result = _judged(
        stack_at, tmp_path, level="baseline", change=_sysctl("net.ipv4.tcp_wmem"), cluster=None
    )
    assert result.exit_code == 1
    [message] = _pod_security(result)
    assert "which on Kubernetes 1.31 (the cluster's minor is not stated" in message


def test_a_stack_at_1_33_whose_smoke_job_runs_as_root_in_a_user_namespace_fails_its_plan() -> None:
    plan = plan_of("eks-dev")
    job = plan.recording.one("kubernetes:batch/v1:Job", "eks-dev-smoke-job")
    _root_in_a_user_namespace(job.inputs["spec"]["template"]["spec"])
    replanned = plan_check(plan.spec, plan.recording)
    assert replanned.exit_code == 1
    assert [v.resource for v in replanned.violations if v.policy == "pod-security"] == [
        "eks-dev-smoke-job"
    ]


def _annotated(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    return lambda pod: pod["metadata"].setdefault("annotations", {}).update({key: value})


def _volume(source: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return _spec(lambda spec: spec.setdefault("volumes", []).append({"name": "data", **source}))


ON_AN_EXISTING_CLUSTER = {
    # id: as above, the finding's reasons only: a cluster spotproof did not create, stated
    # to run the minor
    "sysctls: tcp_notsent_lowat is safe from 1.37": (
        "baseline",
        _sysctl("net.ipv4.tcp_notsent_lowat"),
        ("1.37", None),
        ("1.36", None),
        "forbidden sysctl net.ipv4.tcp_notsent_lowat",
    ),
    "sysctls: tcp_keepalive_time is safe from 1.29": (
        "baseline",
        _sysctl("net.ipv4.tcp_keepalive_time"),
        ("1.33", "v1.29"),
        ("1.33", "v1.28"),
        "forbidden sysctl net.ipv4.tcp_keepalive_time",
    ),
    "sysctls: ip_local_reserved_ports is safe from 1.27": (
        "baseline",
        _sysctl("net.ipv4.ip_local_reserved_ports"),
        ("1.33", "v1.27"),
        ("1.33", "v1.26"),
        "forbidden sysctl net.ipv4.ip_local_reserved_ports",
    ),
    "procMount: unmasked in a user namespace passes baseline from 1.35": (
        "baseline",
        _unmasked_proc_in_a_user_namespace,
        ("1.35", None),
        ("1.34", None),
        "procMount Unmasked (container web)",
    ),
    "seLinuxOptions: container_engine_t is allowed from 1.31": (
        "baseline",
        _container_security(seLinuxOptions={"type": "container_engine_t"}),
        ("1.33", "v1.31"),
        ("1.33", "v1.30"),
        "seLinuxOptions.type=container_engine_t (container web)",
    ),
    "seccompProfile_baseline: the alpha annotations are judged before 1.19 only": (
        "baseline",
        _annotated("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
        ("1.33", "v1.19"),
        ("1.33", "v1.18"),
        "seccomp annotation seccomp.security.alpha.kubernetes.io/pod=unconfined",
    ),
    "restrictedVolumes: an image volume passes on a 1.33 API server, at any version": (
        "restricted",
        _volume({"image": {"reference": "ghcr.io/acme/weights:1"}}),
        ("1.33", "v1.32"),
        ("1.32", None),
        "restricted volume type image (volume data)",
    ),
    "allowPrivilegeEscalation, capabilities, seccomp: Windows pods exempt from 1.25": (
        "restricted",
        _windows_without_linux_fields,
        ("1.33", "v1.25"),
        ("1.33", "v1.24"),
        "allowPrivilegeEscalation != false (container web); capabilities.drop does not "
        "include ALL (container web); seccompProfile unset, on the pod and on container web",
    ),
    "runAsUser: uid 0 refused from 1.23": (
        "restricted",
        _spec(lambda spec: spec["securityContext"].update(runAsUser=0)),
        ("1.33", "v1.22"),
        ("1.33", "v1.23"),
        "runAsUser=0 (pod)",
    ),
    "capabilities_restricted: dropping ALL required from 1.22": (
        "restricted",
        _container_security(capabilities={}),
        ("1.33", "v1.21"),
        ("1.33", "v1.22"),
        "capabilities.drop does not include ALL (container web)",
    ),
    "seccompProfile_restricted: a profile required from 1.19": (
        "restricted",
        _spec(lambda spec: spec["securityContext"].pop("seccompProfile")),
        ("1.33", "v1.18"),
        ("1.33", "v1.19"),
        "seccompProfile unset, on the pod and on container web",
    ),
    "allowPrivilegeEscalation: false required from 1.8": (
        "restricted",
        _container_security(allowPrivilegeEscalation=True),
        ("1.33", "v1.7"),
        ("1.33", "v1.8"),
        "allowPrivilegeEscalation != false (container web)",
    ),
}


VERSIONED = {
    **{name: ("fleet", *case) for name, case in ON_A_FLEET.items()},
    **{name: ("existing", *case) for name, case in ON_AN_EXISTING_CLUSTER.items()},
}


@pytest.mark.parametrize("case", list(VERSIONED.values()), ids=list(VERSIONED))
def test_each_versioned_check_admits_at_one_version_and_refuses_at_another(
    stack_at: PlanOf, tmp_path: Path, case: tuple[Any, ...]
) -> None:
    kind, level, change, admitted, refused, finding = case
    [found] = _admitted_then_refused(
        stack_at, tmp_path, level, change, versions=(admitted, refused), kind=kind
    )
    assert found.endswith(finding)


def test_restricted_refuses_unmasked_proc_in_a_user_namespace_on_1_35_too(
    stack_at: PlanOf, tmp_path: Path
) -> None:
    result = _judged(
        stack_at,
        tmp_path,
        level="restricted",
        change=_unmasked_proc_in_a_user_namespace,
        cluster="1.35",
        kind="existing",
    )
    assert _pod_security(result) == [
        'Pod jobs/web: namespace jobs enforces Pod Security "restricted:latest", which on '
        "Kubernetes 1.35 refuses every pod of it: procMount Unmasked (container web)"
    ]


def test_every_check_lists_its_variants_oldest_first_and_overrides_only_baseline_checks() -> None:
    """What upstream's registry refuses to start with (``validateChecks``)."""
    baseline = {check.id for check in CHECKS if check.level == "baseline"}

    def wrong(check: Any) -> Iterator[str]:
        since = [variant.since for variant in check.variants]
        if since != sorted(set(since)):
            yield f"{check.id}: variants at {since}"
        for variant in check.variants:
            if variant.overrides and check.level != "restricted":
                yield f"{check.id}: a {check.level} check overrides"
            for overridden in set(variant.overrides) - baseline:
                yield f"{check.id}: overrides {overridden}, no baseline check"

    assert len({check.id for check in CHECKS}) == len(CHECKS)
    assert [line for check in CHECKS for line in wrong(check)] == []
