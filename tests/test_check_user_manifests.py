"""``spotproof check`` on the manifests users write: every mistake of an object reported
at once, near misses named with what was meant, the reclaim mistakes no schema sees, and
manifests given as folders, on standard input, against a stack file named by its path."""

from __future__ import annotations

import io
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import REPO, run_cli

JOB = (REPO / "examples" / "finetune-job.yaml").read_text()
STACK_FILE = REPO / "stacks" / "Pulumi.gke-dev.yaml"


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "check", *argv, "--stack", str(STACK_FILE))


def _job(tmp_path: Path, *changes: tuple[str, str]) -> Path:
    text = JOB
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def _line(path: Path, text: str) -> int:
    content = path.read_text()
    return content[: content.index(text)].count("\n") + 1


def test_every_mistake_of_one_object_is_reported_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _job(
        tmp_path,
        ("backoffLimit: 3", "backoffLimit: three"),
        ("restartPolicy: Never", "restartPolicy: Sometimes"),
        ("image: ghcr.io/acme/llm-train:1.4", "image: 5"),
        ("{key: nvidia.com/gpu, operator: Equal", "{key: nvidia.com/gpu, operator: Maybe"),
        ("terminationGracePeriodSeconds: 15", "terminationGracePeriodSeconds: [15]"),
    )
    code, out, _ = _check(capsys, str(path))
    assert code == 2
    expected = {
        "backoffLimit: three": "spec.backoffLimit: 'three' is not of type 'integer'",
        "restartPolicy: Sometimes": "restartPolicy: 'Sometimes' is not one of OnFailure, Never",
        "image: 5": "containers.0.image: 5 is not of type 'string'",
        "operator: Maybe": "tolerations[1].operator: 'Maybe' is not one of Exists, Equal",
        "terminationGracePeriodSeconds: [15]": "terminationGracePeriodSeconds: [15] is not of",
    }
    for written, message in expected.items():
        assert f"{path}:{_line(path, written)}: [kubernetes-schema]" in out, out
        assert message in out
    assert out.count("[kubernetes-schema]") == 5
    assert out.splitlines()[-1].endswith("the API server would refuse 1 of the objects (exit 2)")


def test_a_refused_field_does_not_stop_the_rules_judging_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _job(
        tmp_path,
        ("backoffLimit: 3", "backoffLimit: three"),
        ("nodeSelector: {spotproof.dev/pool-class: spot-gpu}", "nodeSelector: {a: b}"),
    )
    code, out, _ = _check(capsys, str(path))
    assert code == 2
    assert "[kubernetes-schema]" in out and "[scheduling-fit]" in out


def test_a_toleration_of_the_wrong_effect_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _job(
        tmp_path,
        (
            "{key: spotproof.dev/capacity, operator: Equal, value: spot, effect: NoSchedule}",
            "{key: spotproof.dev/capacity, operator: Equal, value: spot, effect: NoExecute}",
        ),
    )
    code, out, _ = _check(capsys, str(path))
    assert code == 1
    assert (
        "l4-spot: taint spotproof.dev/capacity=spot:NoSchedule not tolerated (the toleration "
        "of that key has effect NoExecute, the taint NoSchedule)"
    ) in out


@pytest.mark.parametrize(
    ("old", "new", "finding"),
    [
        (
            "{key: spotproof.dev/capacity, operator",
            "{key: spotproof.dev/capacty, operator",
            "toleration key spotproof.dev/capacty is no taint of any pool; did you mean "
            "spotproof.dev/capacity?",
        ),
        (
            "nodeSelector: {spotproof.dev/pool-class: spot-gpu}",
            "nodeSelector: {spotproof.dev/pool-clas: spot-gpu}",
            "nodeSelector key spotproof.dev/pool-clas is no label of any pool's nodes; did you "
            "mean spotproof.dev/pool-class?",
        ),
    ],
    ids=["toleration", "nodeSelector"],
)
def test_a_misspelt_key_is_named_with_the_key_the_fleet_has(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, finding: str
) -> None:
    path = _job(tmp_path, (old, new))
    code, out, _ = _check(capsys, str(path))
    assert code == 1
    line = _line(path, "nodeSelector:" if new.startswith("nodeSelector") else "tolerations:")
    assert f"{path}:{line}: [scheduling-keys] Job spotproof/llm-finetune: {finding}" in out


def test_a_well_known_node_label_is_never_taken_for_a_misspelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _job(
        tmp_path,
        (
            "nodeSelector: {spotproof.dev/pool-class: spot-gpu}",
            "nodeSelector: {spotproof.dev/pool-class: spot-gpu, kubernetes.io/arch: amd64}",
        ),
    )
    _, out, _ = _check(capsys, str(path))
    assert "[scheduling-keys]" not in out


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("[bash, -c, \"trap 'exit 0' TERM; python train.py\"]", "exits 0 on SIGTERM"),
        ("[sh, -c, \"trap 'save; exit 0' SIGTERM INT\\npython train.py\"]", "exits 0 on SIGTERM"),
        ("[sh, -c, \"trap '' 15; exec python train.py\"]", "ignores SIGTERM"),
        (
            "[python, -c, 'import signal, sys; "
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit())']",
            "exits 0 on SIGTERM",
        ),
    ],
    ids=["trap-exit-0", "trap-then-exit-0", "trap-ignore", "python-handler"],
)
def test_a_job_that_answers_sigterm_with_success_or_silence_is_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, says: str
) -> None:
    path = _job(tmp_path, ("command: [python, train.py]", f"command: {command}"))
    code, out, _ = _check(capsys, str(path))
    assert code == 1
    assert f"{path}:{_line(path, 'command:')}: [sigterm-exit-zero]" in out, out
    assert says in out


def test_a_trap_that_saves_and_exits_143_is_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = (
        "trap 'kill -TERM $child; wait $child; exit 143' TERM; python train.py & child=$!; wait"
    )
    path = _job(tmp_path, ("command: [python, train.py]", f'command: [sh, -c, "{script}"]'))
    code, out, _ = _check(capsys, str(path))
    assert (code, "[sigterm-exit-zero]" in out) == (0, False), out


def test_a_bare_pod_on_spot_is_found_and_a_job_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(tmp_path)
    pod = tmp_path / "pod.yaml"
    spec = JOB.split("    spec:\n", 1)[1].split("---")[0]
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: probe, namespace: spotproof}\nspec:\n"
        + "\n".join(line[4:] for line in spec.splitlines())
        + "\n"
    )
    code, out, _ = _check(capsys, str(pod), str(job))
    assert code == 1
    assert "[bare-pod-on-reclaimable] Pod spotproof/probe runs bare on reclaimable pool(s) " in out
    assert "nothing recreates a Pod whose node is reclaimed; run it from a Job" in out
    assert out.count("[bare-pod-on-reclaimable]") == 1


def test_a_grace_above_the_notice_is_one_finding_not_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _job(
        tmp_path, ("terminationGracePeriodSeconds: 15", "terminationGracePeriodSeconds: 600")
    )
    code, out, _ = _check(capsys, str(path))
    assert code == 1
    assert out.count("finding") == 1 and "[preemption-path]" in out


def test_a_folder_is_every_manifest_under_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "k8s")
    (tmp_path / "k8s" / "README.md").write_text("not a manifest")
    (tmp_path / "k8s" / ".hidden").mkdir()
    (tmp_path / "k8s" / ".hidden" / "broken.yaml").write_text("kind: [")
    code, out, _ = _check(capsys, str(tmp_path / "k8s"))
    assert code == 0
    assert out.strip() == "0 findings: 4 object(s) in 2 file(s), against stack gke-dev"


def test_an_empty_folder_is_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _check(capsys, str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        f"spotproof check: {tmp_path}: no manifests in it; allowed: a folder holding "
        "*.yaml, *.yml, *.json\n"
    )


def test_standard_input_is_read_with_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = JOB.replace("command: [python, train.py]", "command: [sh, -c, \"trap '' TERM; x\"]")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, out, _ = _check(capsys, "-")
    assert code == 1
    assert "<stdin>:" in out and "[sigterm-exit-zero]" in out


def test_a_stack_file_path_works_outside_any_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert not any((parent / "Pulumi.yaml").exists() for parent in [tmp_path, *tmp_path.parents])
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    code, out, err = run_cli(
        capsys, "check", "job.yaml", "--stack", os.path.relpath(STACK_FILE, tmp_path)
    )
    assert (code, err) == (0, ""), out
    assert "against stack gke-dev" in out


def test_a_path_that_is_not_a_stack_file_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(tmp_path)
    code, out, err = run_cli(capsys, "check", str(job), "--stack", str(REPO / "Pulumi.yaml"))
    assert (code, out) == (2, "")
    assert err.startswith("spotproof check: --stack ") and "not a stack file" in err


def test_a_custom_resource_without_a_schema_is_named_unchecked_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monitor = tmp_path / "monitor.yaml"
    monitor.write_text(
        "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\n"
        "metadata: {name: trainer, namespace: spotproof}\n"
        "spec: {selector: {matchLabels: {app: x}}, endpoints: [{port: metrics}]}\n"
    )
    code, out, _ = _check(capsys, str(monitor), str(_job(tmp_path)))
    assert code == 0, out
    assert out.strip().endswith("not checked (no schema for their kind): ServiceMonitor trainer")


def test_a_stack_whose_program_imports_a_missing_module_is_one_line(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = make_project({"gcp:region": "us-central1"}, stack="prod", program="import acme_nets\n")
    code, out, err = run_cli(
        capsys, "check", str(_job(tmp_path)), "--stack", str(root / "stacks" / "Pulumi.prod.yaml")
    )
    assert (code, out) == (2, "")
    assert err == (
        "spotproof check: the program imports 'acme_nets', which is not installed in this "
        "environment\n"
    )


def test_a_program_importing_a_module_that_moved_is_told_where_it_lives_now(
    make_project: Callable[..., Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = make_project(
        {"gcp:region": "us-central1"},
        stack="prod",
        program="from spotproof.spec.gke import GkeGpuPool\n",
    )
    code, out, err = run_cli(
        capsys, "check", str(_job(tmp_path)), "--stack", str(root / "stacks" / "Pulumi.prod.yaml")
    )
    assert (code, out) == (2, "")
    assert err == (
        "spotproof check: the program imports 'spotproof.spec', which is now spotproof.fleet\n"
    )


def test_a_toleration_for_a_taint_no_pool_carries_is_named_with_the_taint_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Written for another cluster's spot pools: no key of this stack's is like it, so only
    the taints the pools carry say what it should have been."""
    path = _job(
        tmp_path,
        (
            "{key: spotproof.dev/capacity, operator: Equal, value: spot, effect: NoSchedule}",
            "{key: provisioning-tier, operator: Equal, value: preemptible, effect: NoSchedule}",
        ),
    )
    code, out, _ = _check(capsys, str(path))
    assert code == 1
    [fit] = [line for line in out.splitlines() if "[scheduling-fit]" in line]
    assert (
        "its toleration provisioning-tier=preemptible:NoSchedule matches no taint of these "
        "pools, which carry spotproof.dev/capacity=spot:NoSchedule"
    ) in fit


def test_a_checkpoint_on_an_empty_dir_is_found_even_when_the_job_fits_no_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _job(
        tmp_path,
        (
            "{name: CHECKPOINT_URL, value: gs://spotproof-dev-gke-dev-checkpoints/checkpoints/"
            "llm-finetune}",
            "{name: CHECKPOINT_DIR, value: /tmp/checkpoints}",
        ),
        (
            "nodeSelector: {spotproof.dev/pool-class: spot-gpu}",
            "nodeSelector: {spotproof.dev/pool-class: spot-gpu, gpu: h100}",
        ),
    )
    code, out, _ = _check(capsys, str(path))
    assert code == 1
    findings = {line.split("] ")[0].split("[")[-1] for line in out.splitlines() if "] " in line}
    assert {"scheduling-fit", "checkpoint-on-ephemeral-storage"} <= findings, out
