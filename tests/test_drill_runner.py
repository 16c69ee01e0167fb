"""What the drill's runner decides around the stages: whom it drills without ``--yes``, the
grace it judges by, and how a reclaim the cloud gave up on ends the wait. Against the
replaying API server (``tests/kube_replay.py``) with the cloud played by the replay."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillError, DrillRefused
from spotproof.drill.instances import Instance
from spotproof.drill.kube_api import connect
from spotproof.drill.reclaim import Reclaimed
from spotproof.drill.report import DrillReport
from spotproof.drill.runner import DrillOptions, run_drill
from spotproof.drill.subject import Subject
from tests.kube_replay import JOB, NAMESPACE, SCENARIOS, Replay
from tests.support import run_cli
from tests.test_drill_end_to_end import FAST, ReplayedReclaim


@pytest.fixture
def replay() -> Iterator[Replay]:
    server = Replay()
    yield server
    server.close()


def _kubeconfig_subject(cloud: Cloud) -> Subject:
    """A workload drilled from ``--kubeconfig`` alone: no plan, so no declared grace."""
    return Subject(cloud, "Job", NAMESPACE, JOB)


def _drill(
    replay: Replay,
    tmp_path: Path,
    scenario: str,
    subject: Subject,
    *,
    cloud: type[ReplayedReclaim] = ReplayedReclaim,
    options: DrillOptions = FAST,
) -> DrillReport:
    """``subject`` drilled while the replay plays ``scenario``, the cloud played by ``cloud``."""
    api = connect(str(replay.kubeconfig(tmp_path / "kubeconfig")))
    reclaimer = cloud(replay, SCENARIOS[scenario](replay))
    return run_drill(
        subject, api, reclaimer, options, progress=lambda _line: None, clock=replay.clock
    )


def test_a_kubeconfig_drill_judges_by_the_grace_its_pod_declares(
    replay: Replay, tmp_path: Path
) -> None:
    # The AKS drain evicts the pod with the 25 s it declares (not Kubernetes' default 30).
    report = _drill(replay, tmp_path, "aks", _kubeconfig_subject(Cloud.AKS))

    assert report.passed, report.failures
    assert not any("less than" in failure for failure in report.failures)


def test_a_plan_whose_grace_differs_from_the_pods_is_noted_and_the_pod_judged(
    replay: Replay, tmp_path: Path
) -> None:
    subject = Subject(Cloud.AKS, "Job", NAMESPACE, JOB, stack="aks-dev", declared_grace=60.0)

    report = _drill(replay, tmp_path, "aks", subject)

    assert report.passed, report.failures
    assert (
        "the plan declares 60 s of grace and the pod 25 s: judged by the pod's, which the "
        "kubelet gives"
    ) in report.notes


class FailingReclaim(ReplayedReclaim):
    """The cloud accepts the reclaim, then its own action fails: nothing reaches the node."""

    def reclaim(self, instance: Instance) -> Reclaimed:
        self.reclaimed.append(instance)
        return Reclaimed(instance, time.time(), "EXP1", "FIS experiment EXP1")

    def check(self) -> None:
        if self.reclaimed:
            raise DrillError(
                "FIS experiment EXP1 on i-0123: action interrupt is failed: not authorized to "
                "perform ec2:SendSpotInstanceInterruptions"
            )


def test_a_reclaim_the_cloud_fails_after_accepting_it_ends_the_drill_in_the_clouds_words(
    replay: Replay, tmp_path: Path
) -> None:
    patient = DrillOptions(target_seconds=10, signal_seconds=60, resume_seconds=10)
    started = time.monotonic()

    subject = _kubeconfig_subject(Cloud.GKE)
    report = _drill(replay, tmp_path, "gke", subject, cloud=FailingReclaim, options=patient)

    assert time.monotonic() - started < 20  # not the 60 s the pod's end was given
    assert report.failures[0] == (
        "FIS experiment EXP1 on i-0123: action interrupt is failed: not authorized to "
        "perform ec2:SendSpotInstanceInterruptions"
    )


# --- a cluster drilled from --kubeconfig, through the command --------------------------------

EKS_GRANT = {
    "region": "us-east-1",
    "experimentTemplateId": "EXT123",
    "targetTagKey": "spotproof.io/drill-target",
    "operatorPolicyArn": "arn:aws:iam::123456789012:policy/ml-drill",
}


def _drill_eks_cluster(
    replay: Replay,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    *more: str,
    **outputs: object,
) -> tuple[int, str, str]:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({"cluster_name": "ml", "drill": EKS_GRANT, **outputs}))
    return run_cli(
        capsys,
        "drill",
        *("--cloud", "eks", "--kubeconfig", str(replay.kubeconfig(tmp_path / "kubeconfig"))),
        *("--context", "replay", "--outputs", str(path), "--namespace", NAMESPACE, "--job", JOB),
        *("--target-timeout", "10", *more),
    )


def test_a_kubeconfig_cluster_not_marked_disposable_is_not_drilled_without_yes(
    replay: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _drill_eks_cluster(replay, tmp_path, capsys)

    assert code == 2 and err.count("\n") == 1, out
    assert (
        f"the cluster of Job {NAMESPACE}/{JOB} is not known to be disposable (its --outputs do "
        'not say "disposable": true), and a drill reclaims real nodes under real work; '
        "allowed: --yes to drill it anyway"
    ) in err
    # Only the API server's clock was read: nothing of the workload, no permission.
    assert [path.rstrip("/") for path in replay.requests] == ["/version"]
    assert replay.reviews == []


@pytest.mark.parametrize("more", [("--yes",), ()], ids=["yes", "disposable"])
def test_yes_or_outputs_saying_disposable_let_a_kubeconfig_drill_go_on(
    replay: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str], more: tuple[str, ...]
) -> None:
    outputs = {} if more else {"disposable": True}
    code, _, err = _drill_eks_cluster(replay, tmp_path, capsys, *more, **outputs)

    # Past the refusal: it waited for the workload, which this cluster does not run.
    assert code == 2 and "not known to be disposable" not in err
    assert f"Job {NAMESPACE}/{JOB}: not found" in err


def test_a_disposable_value_that_is_no_boolean_is_named_with_what_is_allowed(
    replay: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _drill_eks_cluster(replay, tmp_path, capsys, disposable="yes")

    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert (
        '"disposable" is "yes"; allowed: true (the cluster may lose work to a drill) or false'
        in (err)
    )


def test_a_stack_is_refused_naming_the_setting_that_marks_it_disposable() -> None:
    subject = Subject(Cloud.GKE, "Job", NAMESPACE, JOB, stack="gke-prod", protected=True)

    with pytest.raises(DrillRefused) as refused:
        run_drill(subject, None, None, DrillOptions())  # type: ignore[arg-type]

    assert str(refused.value).startswith(
        "stack gke-prod is protected (it does not say spotproof:disposable: true)"
    )
