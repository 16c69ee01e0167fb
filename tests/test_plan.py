"""``spotproof plan`` end to end: the real stacks pass; real plans, mutated, fail for the
right reason with exit 1."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from spotproof import plan as spotproof_plan
from spotproof.plan import PlanResult
from spotproof.plan.recording.recorder import Resource
from spotproof.plan.recording.tree import render
from tests.support import REPO, STACKS, run_cli, stack_config

pytestmark = pytest.mark.processes

JOB = "kubernetes:batch/v1:Job"
POOL = "gcp:container/nodePool:NodePool"


@pytest.mark.parametrize("stack", STACKS)
def test_real_stack_plans_with_zero_violations(
    stack: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = run_cli(
        capsys, "plan", "--stack", stack, "--project-dir", str(REPO), "--out", str(tmp_path)
    )
    assert (code, err) == (0, "")
    assert "0 violations" in out
    cloud = stack.partition("-")[0]
    assert f"spotproof:{cloud}:HybridCluster" in out
    assert "Scale-up" in out and "Preemption path" in out


def test_json_report_lists_resources_with_parents_and_violations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "out.json"
    code, _, _ = run_cli(
        capsys,
        "plan",
        "--stack",
        "gke-prod",
        "--json",
        str(report_path),
        "--project-dir",
        str(REPO),
    )
    report = json.loads(report_path.read_text())
    assert code == 0 and report["violations"] == []
    by_name = {(r["type"], r["name"]): r for r in report["resources"]}
    pool = by_name[(POOL, "gke-prod-l4x4-spot")]
    assert {"type", "name", "parent", "inputs"} <= set(pool)
    assert pool["parent"] == "gke-prod-gpu"
    assert pool["parent_urn"] == by_name[("spotproof:gke:GpuNodePools", "gke-prod-gpu")]["urn"]
    assert by_name[("spotproof:gke:GpuNodePools", "gke-prod-gpu")]["parent"] == "gke-prod"
    assert by_name[("spotproof:gke:HybridCluster", "gke-prod")]["parent"] == "spotproof-gke-prod"
    assert (
        by_name[("pulumi:providers:kubernetes", "gke-prod-kubernetes")]["inputs"]["kubeconfig"]
        == "[secret]"
    )


def test_tree_nests_children_under_their_components(gke_dev: PlanResult) -> None:
    lines = render(gke_dev.recording).splitlines()
    assert lines[1].split() == ["+", "pulumi:pulumi:Stack", "spotproof-gke-dev"]
    assert any(
        "├─ spotproof:gke:HybridCluster" in line and line.endswith("gke-dev") for line in lines
    )
    assert any("│  │  ├─ gcp:storage/bucket:Bucket" in line for line in lines)


@pytest.mark.parametrize("stack", ["gke-dev", "gke-prod"])
def test_every_manifest_written_passes_kubernetes_validate_strict(
    stack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(capsys, "plan", "--stack", stack, "--out", str(tmp_path), "--project-dir", str(REPO))
    written = {f: yaml.safe_load(f.read_text()) for f in sorted(tmp_path.glob("*.yaml"))}
    # Kueue's, KEDA's, GKE's ComputeClass and Managed Service for Prometheus objects have no
    # schema in kubernetes-validate; plan.schemas.kueue, plan.schemas.keda,
    # plan.schemas.compute_class and plan.schemas.gmp check them.
    files = [
        f
        for f, obj in written.items()
        if not obj["apiVersion"].startswith(
            ("kueue.", "keda.", "cloud.google.com/", "monitoring.googleapis.com/")
        )
    ]
    kinds = {written[f]["kind"] for f in files}
    assert {"Namespace", "PriorityClass", "ServiceAccount", "PodDisruptionBudget", "Job"} <= kinds
    assert stack != "gke-dev" or "Deployment" in kinds  # the batch workers
    version = stack_config(stack)["spotproof:kubernetesVersion"]
    validator = Path(sys.executable).with_name("kubernetes-validate")
    done = subprocess.run(
        [str(validator), "--strict", "-k", version, *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == len(files)


def test_written_job_keeps_whole_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(
        capsys, "plan", "--stack", "gke-dev", "--out", str(tmp_path), "--project-dir", str(REPO)
    )
    job = yaml.safe_load(next(tmp_path.glob("*-job-*.yaml")).read_text())
    assert job["spec"]["backoffLimit"] == 3 and isinstance(job["spec"]["backoffLimit"], int)


def test_job_stripped_of_its_spot_toleration_is_caught(gke_dev: PlanResult) -> None:
    pod = gke_dev.recording.one(JOB, "gke-dev-smoke-job").inputs["spec"]["template"]["spec"]
    pod["tolerations"] = [t for t in pod["tolerations"] if t["key"] != "spotproof.dev/capacity"]

    result = spotproof_plan.check(gke_dev.spec, gke_dev.recording)

    assert result.exit_code == 1
    [violation] = [v for v in result.violations if v.policy == "scheduling-fit"]
    assert violation.resource == "gke-dev-smoke-job"
    assert "fits no pool of class spot-gpu" in violation.message
    assert "spotproof.dev/capacity=spot:NoSchedule not tolerated" in violation.message


def test_system_deployment_that_would_fit_spot_is_caught(gke_dev: PlanResult) -> None:
    job = gke_dev.recording.one(JOB, "gke-dev-smoke-job")
    # Turn the real Job's pod into a kube-system add-on that tolerates everything.
    pod = copy.deepcopy(job.inputs["spec"]["template"]["spec"])
    pod.update(
        tolerations=[{"operator": "Exists"}],
        nodeSelector={},
        priorityClassName="system-cluster-critical",
    )
    pod.pop("affinity")
    pod["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    gke_dev.recording.resources.append(
        Resource(
            type="kubernetes:apps/v1:Deployment",
            name="rogue-addon",
            urn=job.urn + "-rogue",
            parent=job.parent,
            custom=True,
            inputs={
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "rogue-addon", "namespace": "kube-system"},
                "spec": {
                    "selector": {"matchLabels": {"app": "rogue"}},
                    "template": {"metadata": {"labels": {"app": "rogue"}}, "spec": pod},
                },
            },
        )
    )

    result = spotproof_plan.check(gke_dev.spec, gke_dev.recording)

    messages = [v.message for v in result.violations if v.policy == "system-off-spot"]
    assert result.exit_code == 1
    assert messages == [
        "system workload Deployment kube-system/rogue-addon can land on reclaimable pool(s) "
        "a100-flex, l4-spot, t4-spot"
    ]


def test_spot_pool_without_its_taint_lets_platform_add_ons_onto_spot(gke_dev: PlanResult) -> None:
    pool = gke_dev.recording.one(POOL, "gke-dev-l4-spot").inputs["nodeConfig"]
    # A CPU spot pool with its taint forgotten: no GPU taint keeps add-ons away either.
    pool["taints"] = []
    pool["guestAccelerators"] = []

    result = spotproof_plan.check(gke_dev.spec, gke_dev.recording)

    policies = {(v.policy, v.resource) for v in result.violations}
    assert ("system-off-spot", "platform-add-ons") in policies
    assert ("gke-spot-pool-isolated", "gke-dev-l4-spot") in policies


def test_schema_violation_in_a_manifest_is_caught(gke_dev: PlanResult) -> None:
    gke_dev.recording.one(JOB, "gke-dev-smoke-job").inputs["spec"]["backoffLimits"] = 3
    result = spotproof_plan.check(gke_dev.spec, gke_dev.recording)
    [violation] = result.violations
    assert violation.policy == "kubernetes-schema"
    assert "'backoffLimits' was unexpected" in violation.message


ROGUE_PROGRAM = """
import pulumi_kubernetes as k8s
from spotproof.program import main

main()
# A system add-on that tolerates every taint: it could be scheduled onto spot nodes.
k8s.apps.v1.Deployment(
    "rogue-addon",
    metadata={"name": "rogue-addon", "namespace": "kube-system"},
    spec={
        "selector": {"matchLabels": {"app": "rogue"}},
        "template": {
            "metadata": {"labels": {"app": "rogue"}},
            "spec": {"tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        },
    },
)
"""


def test_plan_exits_1_when_the_program_declares_a_system_workload_that_fits_spot(
    make_project: Callable[..., Path], tmp_path: Path
) -> None:
    root = make_project(stack_config("gke-dev"), program=ROGUE_PROGRAM)
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spotproof.cli",
            "plan",
            "--stack",
            "gke-test",
            "--json",
            str(report),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    violations = json.loads(report.read_text())["violations"]
    assert [(v["policy"], v["resource"]) for v in violations] == [
        ("system-off-spot", "rogue-addon")
    ]
    assert "[system-off-spot] rogue-addon" in done.stdout
