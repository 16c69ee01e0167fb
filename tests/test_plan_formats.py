"""``spotproof plan --format`` and ``--all``: what CI reads. Markdown tables for a job
summary, GitHub annotations at the stack file's line, JSON on stdout, every stack at once."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from spotproof.plan import PlanResult
from spotproof.plan.reporting import formats
from tests.support import REPO, run_cli, stack_config

pytestmark = pytest.mark.processes

# Breaks one pool after the program built it: GKE spot pools with locationPolicy ANY must
# start from 0 nodes, so the plan reports that pool.
SPOT_POOL_WITH_NODES = """
import pulumi
from spotproof.program import main


def start_with_nodes(args):
    if args.type_ == "gcp:container/nodePool:NodePool" and args.name.endswith("t4-spot"):
        props = {**args.props, "initial_node_count": 2}
        return pulumi.ResourceTransformationResult(props, args.opts)
    return None


pulumi.runtime.register_stack_transformation(start_with_nodes)
main()
"""


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_markdown_counts_resources_per_type_and_tables_every_check(
    gke_dev: PlanResult,
) -> None:
    text = formats.markdown(gke_dev)
    pools = Counter(r.type for r in gke_dev.recording.resources)["gcp:container/nodePool:NodePool"]
    assert f"| `gcp:container/nodePool:NodePool` | {pools} |" in text
    assert "| Job spotproof/spotproof-smoke | l4-spot, t4-spot" in text
    assert "| Job spotproof/spotproof-smoke | l4-spot | yes |" in text
    assert (
        "| Job spotproof/spotproof-smoke | GKE spot (l4-spot, t4-spot) | 0 s | 15 s of 15 s |"
        in (text)
    )
    assert text.startswith("### `gke-dev`: ✅ 0 violations")


def test_github_format_annotates_the_pool_line_of_a_violation(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(stack_config("gke-dev"), program=SPOT_POOL_WITH_NODES)
    summary = root / "summary.md"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GITHUB_WORKSPACE", str(root))
        patch.setenv("GITHUB_STEP_SUMMARY", str(summary))
        code, out, _ = run_cli(
            capsys, "plan", "--stack", "gke-test", "--format", "github", "--project-dir", str(root)
        )
    line = _line_of(root / "stacks" / "Pulumi.gke-test.yaml", "name: t4-spot")
    assert code == 1
    assert f"::error file=stacks/Pulumi.gke-test.yaml,line={line},title=" in out
    assert "gke-test-t4-spot: initialNodeCount 2 on a locationPolicy ANY pool" in out
    assert "❌ 1 violation(s)" in summary.read_text()


def test_github_format_annotates_the_line_of_a_bad_value(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = stack_config("gke-dev")
    config["spotproof:gpuPools"][1]["gpusPerNode"] = 3
    root = make_project(config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GITHUB_WORKSPACE", str(root))
        code, out, err = run_cli(
            capsys, "plan", "--stack", "gke-test", "--format", "github", "--project-dir", str(root)
        )
    line = _line_of(root / "stacks" / "Pulumi.gke-test.yaml", "gpusPerNode: 3")
    assert code == 2
    assert out.startswith(f"::error file=stacks/Pulumi.gke-test.yaml,line={line},")
    assert "gpusPerNode = 3: n1-standard-8 cannot carry 3 x nvidia-tesla-t4" in err


def test_a_bad_project_default_is_annotated_in_pulumi_yaml(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = stack_config("gke-dev")
    del config["spotproof:kubernetesVersion"]
    root = make_project(config)
    project = yaml.safe_load((root / "Pulumi.yaml").read_text())
    project["config"] = {"spotproof:kubernetesVersion": {"value": "1.20"}}
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GITHUB_WORKSPACE", str(root))
        code, out, _ = run_cli(
            capsys, "plan", "--stack", "gke-test", "--format", "github", "--project-dir", str(root)
        )
    line = _line_of(root / "Pulumi.yaml", "spotproof:kubernetesVersion")
    assert code == 2
    assert out.startswith(f"::error file=Pulumi.yaml,line={line},")


def test_annotation_messages_and_properties_are_escaped() -> None:
    where = formats.Location(Path("/repo/stacks/Pulumi.a,b.yaml"), 3)
    line = formats.command("error", "50% of\nnodes", where, Path("/repo"), title="x: y")
    assert line == "::error file=stacks/Pulumi.a%2Cb.yaml,line=3,title=x%3A y::50%25 of%0Anodes"


def test_all_plans_every_stack_and_exits_with_the_worst_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "project"
    shutil.copytree(REPO / "infra", root / "infra")
    shutil.copy(REPO / "Pulumi.yaml", root)
    (root / "stacks").mkdir()
    for stack in ("gke-dev", "eks-dev"):
        shutil.copy(REPO / "stacks" / f"Pulumi.{stack}.yaml", root / "stacks")
    (root / "stacks" / "Pulumi.broken.yaml").write_text("config:\n  spotproof:cloud: azure\n")
    code, out, err = run_cli(
        capsys, "plan", "--all", "--format", "json", "--project-dir", str(root)
    )
    reports = json.loads(out)
    assert code == 2
    assert sorted(reports) == ["broken", "eks-dev", "gke-dev"]
    assert reports["gke-dev"]["violations"] == [] and reports["eks-dev"]["violations"] == []
    assert "spotproof:cloud = 'azure'" in reports["broken"]["error"]
    assert err.startswith("spotproof plan: broken: spotproof:cloud = 'azure'")


def test_all_writes_one_json_report_and_one_manifest_folder_per_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run_cli(
        capsys,
        "plan",
        "--all",
        "--json",
        str(tmp_path / "reports"),
        "--out",
        str(tmp_path / "manifests"),
        "--project-dir",
        str(REPO),
    )
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (REPO / "stacks").iterdir())
    assert code == 0
    assert sorted(p.stem for p in (tmp_path / "reports").iterdir()) == stacks
    assert all(any((tmp_path / "manifests" / s).glob("*.yaml")) for s in stacks)


def test_stack_and_all_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        run_cli(capsys, "plan", "--stack", "gke-dev", "--all")
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert "not allowed with argument" in err and len(err.strip().splitlines()) == 1


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version  # noqa: PLC0415

    with pytest.raises(SystemExit) as done:
        run_cli(capsys, "--version")
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"spotproof {version('spotproof')}"


def test_without_nodejs_the_skipped_karpenter_schema_check_fails_unless_allowed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(tmp_path))  # no `node` here
        code, out, _ = run_cli(capsys, "plan", "--stack", "eks-dev", "--project-dir", str(REPO))
        allowed, _, _ = run_cli(
            capsys, "plan", "--stack", "eks-dev", "--allow-skipped", "--project-dir", str(REPO)
        )
    assert code == 1 and allowed == 0  # a check that could not run has not passed
    assert "skipped: Karpenter schema check (4 objects): Node.js not found" in out
    assert "0 violations in the checks that ran (1 skipped, above)" in out
