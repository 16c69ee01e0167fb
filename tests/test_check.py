"""``spotproof check``: the shipped examples pass against a stack, and each broken variant
fails naming its rule, its key's line and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spotproof.policy.pod_security import restricted
from tests.support import REPO, run_cli

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
JOB = REPO / "examples" / "finetune-job.yaml"
GANG = REPO / "examples" / "pretrain-jobset.yaml"


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "check", *argv, "--project-dir", str(REPO))


def _broken(
    tmp_path: Path, source: Path, old: str, new: str, at: str | None = None
) -> tuple[Path, int]:
    """``source`` with ``old`` replaced by ``new`` once, and the line of the first text
    ``at`` in the result (default: the change itself)."""
    text = source.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / source.name
    broken = text.replace(old, new)
    path.write_text(broken)
    marker = new if at is None else at
    return path, broken[: broken.index(marker)].count("\n") + 1


def test_the_shipped_examples_pass_against_gke_dev(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(EXAMPLES) >= 2
    code, out, err = _check(capsys, *map(str, EXAMPLES), "--stack", "gke-dev")
    assert (code, err) == (0, ""), out
    assert out.strip() == "0 findings: 4 object(s) in 2 file(s), against stack gke-dev"


@pytest.mark.parametrize(
    ("old", "new", "at", "finding"),
    [
        (  # pitfall 5: a typo in a selector leaves the pod Pending
            "nodeSelector: {spotproof.dev/pool-class: spot-gpu}",
            "nodeSelector: {spotproof.dev/pool-class: spot-gpus}",
            None,
            "[scheduling-fit] Job spotproof/llm-finetune fits no pool: a100-flex: taint "
            "spotproof.dev/capacity=flex-start:NoSchedule not tolerated (the toleration of that "
            "key has value 'spot', the taint 'flex-start'), nodeSelector "
            "spotproof.dev/pool-class=spot-gpus not on the node",
        ),
        (  # pitfall 5: a typo in a toleration's key
            "{key: spotproof.dev/capacity, operator",
            "{key: spotproof.dev/capacty, operator",
            "tolerations:",
            "[scheduling-fit] Job spotproof/llm-finetune fits no pool of class spot-gpu: "
            "l4-spot: taint spotproof.dev/capacity=spot:NoSchedule not tolerated",
        ),
        (  # pitfall 1: a grace period the cloud's notice cannot honour
            "terminationGracePeriodSeconds: 15 ",
            "terminationGracePeriodSeconds: 60 ",
            None,
            "[preemption-path] Job spotproof/llm-finetune on GKE spot (l4-spot, t4-spot) gets "
            "15 s of grace, less than the 60 s it declares",
        ),
        (
            "restartPolicy: Never",
            "restartPolicy: OnFailure",
            None,
            "[k8s-job-preemption-safe] restartPolicy must be Never",
        ),
        (  # preemptions would burn backoffLimit
            "      - action: Ignore              # the node was reclaimed",
            "      - action: Count               # the node was reclaimed",
            "podFailurePolicy:",
            "[k8s-job-preemption-safe] podFailurePolicy must Ignore DisruptionTarget",
        ),
        (  # pitfall 4: checkpoints on a volume that dies with the node
            "value: gs://spotproof-dev-gke-dev-checkpoints/checkpoints/llm-finetune}",
            "value: /tmp/checkpoints}",
            "{name: CHECKPOINT_URL",
            "[checkpoint-on-ephemeral-storage] Job spotproof/llm-finetune: container trainer "
            "checkpoints to /tmp/checkpoints (env CHECKPOINT_URL) on emptyDir volume scratch, "
            "lost with the node when l4-spot, t4-spot is reclaimed or expires",
        ),
        (
            'limits: {memory: 16Gi, nvidia.com/gpu: "1"}',
            "limits: {memory: 16Gi}",
            None,
            "[k8s-job-preemption-safe] container trainer targets GPU nodes without a GPU limit",
        ),
        (  # below the autoscaler's expendable cutoff, or missing
            "priorityClassName: spotproof-spot-batch ",
            "priorityClassName: spotproof-nope ",
            None,
            "[priority-class-exists] Job spotproof/llm-finetune: PriorityClass spotproof-nope "
            "does not exist",
        ),
        (  # Pod Security "restricted": the Job is admitted and every pod refused
            "            allowPrivilegeEscalation: false\n",
            "",
            "          securityContext:\n            capabilities",
            "[pod-security] Job spotproof/llm-finetune: namespace spotproof enforces Pod "
            'Security "restricted:latest", which on Kubernetes 1.33 refuses every pod of it: '
            "allowPrivilegeEscalation != false (container trainer)",
        ),
        (
            "        seccompProfile: {type: RuntimeDefault}\n",
            "",
            "          securityContext:\n            allowPrivilegeEscalation",
            "[pod-security] Job spotproof/llm-finetune: namespace spotproof enforces Pod "
            'Security "restricted:latest", which on Kubernetes 1.33 refuses every pod of it: '
            "seccompProfile unset, on the pod and on container trainer",
        ),
        (
            "        runAsNonRoot: true\n",
            "        runAsNonRoot: false\n",
            "      securityContext:",
            "[pod-security] Job spotproof/llm-finetune: namespace spotproof enforces Pod "
            'Security "restricted:latest", which on Kubernetes 1.33 refuses every pod of it: '
            "runAsNonRoot=false (pod); runAsNonRoot != true "
            "(container trainer)",
        ),
        (
            "        - {name: scratch, emptyDir: {sizeLimit: 10Gi}}",
            "        - {name: scratch, hostPath: {path: /tmp}}",
            "      volumes:",
            "[pod-security] Job spotproof/llm-finetune: namespace spotproof enforces Pod "
            'Security "restricted:latest", which on Kubernetes 1.33 refuses every pod of it: '
            "restricted volume type hostPath (volume scratch)",
        ),
        (  # a field the field guide's source material invented
            "  backoffLimit: 3 ",
            "  maxParallelism: 3 ",
            None,
            "[kubernetes-schema] Job/spotproof/llm-finetune: spec: Additional properties are "
            "not allowed ('maxParallelism' was unexpected)",
        ),
    ],
)
def test_each_broken_job_fails_at_the_line_of_its_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *,
    old: str,
    new: str,
    at: str | None,
    finding: str,
) -> None:
    path, line = _broken(tmp_path, JOB, old, new, at)
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    # A field the API server refuses makes the file invalid input (exit 2).
    assert code == (2 if "[kubernetes-schema]" in finding else 1), out
    assert f"{path}:{line}: {finding}" in out, out


def test_a_finding_stays_at_its_key_when_its_message_is_reworded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line comes from the key path the rule gives, not from its words: the container
    named otherwise, the finding is still at that container's securityContext."""
    monkeypatch.setattr(restricted, "named", lambda container: f"the {container['name']} one")
    path, line = _broken(
        tmp_path,
        JOB,
        "            allowPrivilegeEscalation: false\n",
        "",
        at="          securityContext:\n            capabilities",
    )
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 1, out
    assert (
        f"{path}:{line}: [pod-security] Job spotproof/llm-finetune: namespace spotproof "
        'enforces Pod Security "restricted:latest", which on Kubernetes 1.33 refuses every '
        "pod of it: allowPrivilegeEscalation != false (the trainer one)"
    ) in out, out


def test_a_gang_meeting_at_c10d_on_a_name_only_dns_settles_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, line = _broken(
        tmp_path,
        GANG,
        "                    - --master-port=29500\n",
        "                    - --rdzv-backend=c10d\n"
        "                    - --rdzv-endpoint=llm-pretrain-workers-0-0.llm-pretrain:29400\n",
        at="                  command:",
    )
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 1
    assert (
        f"{path}:{line}: [rendezvous-host] JobSet spotproof/llm-pretrain/workers: container "
        "trainer meets at torchrun's c10d rendezvous on llm-pretrain-workers-0-0.llm-pretrain"
    ) in out


def test_a_gang_larger_than_its_pools_can_hold_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = GANG.read_text().replace("parallelism: 2", "parallelism: 30")
    path = tmp_path / "gang.yaml"
    path.write_text(text.replace("completions: 2", "completions: 30"))
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 1
    assert (
        "[gang-capacity] JobSet spotproof/llm-pretrain/workers needs 30 pods of 1 GPU(s) at "
        "once, but the pools it gets nodes from hold at most 28 (l4-spot: 12, t4-spot: 16)"
    ) in out


def test_a_job_runs_no_more_pods_at_once_than_its_completions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _broken(tmp_path, GANG, "parallelism: 2", "parallelism: 30")
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 0, out


def test_a_gang_whose_reclaims_fail_the_jobset_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _broken(
        tmp_path, GANG, "action: RestartJobSetAndIgnoreMaxRestarts", "action: RestartJobSet"
    )
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 1
    assert (
        "[gang-restart] JobSet spotproof/llm-pretrain/workers: every reclaim spends one of its "
        "3 maxRestarts; add a rule RestartJobSetAndIgnoreMaxRestarts on PodFailurePolicy"
    ) in out


def test_a_gang_without_a_budget_over_all_its_pods_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, line = _broken(
        tmp_path, GANG, "  minAvailable: 2", "  minAvailable: 1", at="  name: llm-pretrain"
    )
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 1
    assert (
        f"{path}:{line}: [gang-budget] JobSet spotproof/llm-pretrain/workers: no "
        "PodDisruptionBudget keeps all 2 pods of the gang"
    ) in out


def test_gpu_pods_of_one_parallel_job_are_told_to_become_a_gang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _broken(tmp_path, JOB, "  backoffLimit: 3 ", "  parallelism: 4\n  backoffLimit: 3 ")
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 1
    assert "[gang-restart] Job spotproof/llm-finetune: 4 GPU pods of one Job" in out


SYSTEM_ANYWHERE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: metrics-agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: metrics-agent}}
  template:
    metadata: {labels: {app: metrics-agent}}
    spec:
      tolerations:
        - operator: Exists
      containers:
        - {name: agent, image: registry.k8s.io/metrics-server:v0.7.2}
"""


def test_a_system_workload_that_could_land_on_spot_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(SYSTEM_ANYWHERE)
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 1
    assert (
        f"{path}:9: [system-off-spot] system workload Deployment kube-system/metrics-agent "
        "can land on reclaimable pool(s)"
    ) in out


def test_a_job_aimed_at_a_queued_pool_without_a_queue_fails_naming_the_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        JOB.read_text()
        .replace("spot-gpu}", "flex-start}")
        .replace(
            "{key: spotproof.dev/capacity, operator: Equal, value: spot,",
            "{key: spotproof.dev/capacity, operator: Equal, value: flex-start,",
        )
    )
    path = tmp_path / "flex.yaml"
    path.write_text(text.replace('nvidia.com/gpu: "1"}', 'nvidia.com/gpu: "8"}'))
    code, out, _ = _check(capsys, str(path), "--stack", "gke-prod")
    assert code == 1
    assert "h100-flex: queued-provisioning pool: nodes come only through a" in out
    assert "(fix: label the Job or JobSet kueue.x-k8s.io/queue-name: " in out

    labelled = path.read_text().replace(
        "  namespace: spotproof\nspec:\n  backoffLimit",
        "  namespace: spotproof\n  labels: {kueue.x-k8s.io/queue-name: h100-flex}\n"
        "spec:\n  backoffLimit",
    )
    path.write_text(labelled)
    code, out, _ = _check(capsys, str(path), "--stack", "gke-prod")
    assert code == 0, out


def test_without_a_stack_only_what_needs_no_cluster_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, line = _broken(tmp_path, JOB, "restartPolicy: Never", "restartPolicy: OnFailure")
    code, out, _ = _check(capsys, str(path))
    assert code == 1
    assert f"{path}:{line}: [k8s-job-preemption-safe] restartPolicy must be Never" in out
    assert "against no stack (schemas and Job rules only)" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("kind: Job\n  bad: [indent\n", ":2: not valid YAML"),
        ("- just\n- a list\n", ":1: not a Kubernetes object (allowed: a mapping with apiVersion"),
        ("# nothing here\n", "no Kubernetes objects in the files given"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "input.yaml"
    if content is not None:
        path.write_text(content)
    code, _, err = _check(capsys, str(path), "--stack", "gke-dev")
    assert code == 2
    assert err.startswith("spotproof check: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_an_unknown_stack_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _check(capsys, str(JOB), "--stack", "nope")
    assert code == 2
    assert err.startswith("spotproof check: ") and "nope" in err


def test_json_lists_each_finding_with_file_line_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, line = _broken(tmp_path, JOB, "restartPolicy: Never", "restartPolicy: OnFailure")
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev", "--format", "json")
    report = json.loads(out)
    assert code == report["exit_code"] == 1
    assert report["stack"] == "gke-dev" and report["objects"] == 2
    assert {"file": str(path), "line": line, "rule": "k8s-job-preemption-safe"}.items() <= (
        report["findings"][0].items()
    )


def test_github_format_annotates_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    path, line = _broken(tmp_path, JOB, "restartPolicy: Never", "restartPolicy: OnFailure")
    code, out, _ = _check(capsys, str(path), "--stack", "gke-dev", "--format", "github")
    assert code == 1
    assert (
        f"::error file={path.name},line={line},title=spotproof check%3A k8s-job-preemption-safe::"
        "restartPolicy must be Never"
    ) in out
    assert f"| `{path}:{line}` | `k8s-job-preemption-safe` |" in summary.read_text()
