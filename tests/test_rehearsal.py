"""``spotproof smoke --stack``: the rehearsal plays the stack's own Job and preemption path,
and a path that never delivers SIGTERM fails it, unless the platform gives none by design
(it is then rehearsed as kills)."""

from __future__ import annotations

import pytest

from spotproof import plan as spotproof_plan
from spotproof.plan import PlanResult
from spotproof.smoke.emulation.job_controller import DISRUPTION_TARGET, JobController, JobPolicy
from spotproof.smoke.reports.records import SmokeConfig
from spotproof.smoke.runs.solo import run_smoke
from spotproof.smoke.runs.stack import rehearsal
from tests.support import REPO, plan_of, run_cli

pytestmark = pytest.mark.processes

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
BASE = SmokeConfig(store="file", preemptions=1, hard_kills=0, total_steps=240)


def test_rehearsal_takes_interval_seed_grace_and_policy_from_the_rendered_job(
    eks_dev: PlanResult,
) -> None:
    rehearsed = rehearsal(eks_dev, BASE, total_steps=None, time_scale=0.1)

    config = rehearsed.config
    assert (config.interval, config.seed) == (50, 0)
    assert config.grace_seconds == pytest.approx(9.0)  # 90 s, scaled
    assert config.sigterm_after == pytest.approx(3.0)  # Karpenter's drain, scaled
    assert config.gone_after == pytest.approx(12.0)  # the two-minute notice, scaled
    assert config.job is not None and config.job.backoff_limit == 3
    assert rehearsed.job_env["MODEL_MB"] == "64"


def test_gke_rehearsal_sends_sigterm_at_once_with_15_seconds(gke_dev: PlanResult) -> None:
    config = rehearsal(gke_dev, BASE, total_steps=None, time_scale=1).config
    assert (config.sigterm_after, config.grace_seconds, config.gone_after) == (0, 15, 30)
    # Nothing to wait for between notice and SIGTERM: steps keep their own pace.
    assert config.step_seconds == BASE.step_seconds


def test_aks_rehearsal_sends_sigterm_at_once_with_the_30_second_notice(aks_dev: PlanResult) -> None:
    rehearsed = rehearsal(aks_dev, BASE, total_steps=None, time_scale=1)
    config = rehearsed.config
    # AKS's node auto-drain evicts as the Preempt event arrives; the VM is gone 30 s later.
    assert (config.sigterm_after, config.grace_seconds, config.gone_after) == (0, 30, 30)
    assert rehearsed.path is not None and "AKS node auto-drain" in rehearsed.path.line()


@pytest.mark.parametrize(
    ("stack", "store"), [("gke-dev", "gcs"), ("eks-dev", "s3"), ("aks-dev", "azure")]
)
def test_rehearsal_emulates_the_store_the_job_writes_to(stack: str, store: str) -> None:
    base = SmokeConfig(store="s3")
    assert rehearsal(plan_of(stack), base, total_steps=None, time_scale=1).config.store == store


def test_a_named_store_overrides_the_jobs_own(aks_dev: PlanResult) -> None:
    config = rehearsal(aks_dev, BASE, total_steps=None, time_scale=1, store="file").config
    assert config.store == "file"


def test_path_without_sigterm_makes_the_rehearsal_fail(eks_dev: PlanResult) -> None:
    [pool] = [r for r in eks_dev.recording.of_type(NODE_POOL) if "gpu-spot" in r.name]
    del pool.inputs["spec"]["template"]["spec"]["terminationGracePeriod"]
    broken = spotproof_plan.check(eks_dev.spec, eks_dev.recording)
    config = rehearsal(broken, BASE, total_steps=240, time_scale=0.025).config
    assert config.sigterm_after is None

    report = run_smoke(config, progress=lambda _line: None)

    assert not report.passed
    [preemption] = report.interruptions
    assert preemption.sigterm_after is None and preemption.steps_lost
    assert any("lost" in failure and "(at most 0)" in failure for failure in report.failures)
    # The drill's judge, reading the rehearsal as a cluster's timeline, agrees.
    assert report.drill_failures is not None
    assert any("SIGTERM never reached the trainer" in f for f in report.drill_failures)


def test_an_unannounced_path_is_rehearsed_as_kills_that_lose_at_most_two_intervals(
    aks_prod: PlanResult,
) -> None:
    """AKS node auto-provisioning: nothing drains, so the node goes with the trainer in it.
    Not a mistake of the stack: the rehearsal passes when the loss stays within what a kill
    may lose, and the drill's judge, which judges graceful reclaims, has none to judge."""
    config = rehearsal(aks_prod, BASE, total_steps=240, time_scale=0.05, store="file").config
    assert (config.sigterm_after, config.unannounced) == (None, True)

    report = run_smoke(config, progress=lambda _line: None)

    assert report.passed, report.failures
    [reclaim] = report.interruptions
    assert reclaim.sigterm_after is None and reclaim.max_steps_lost == 2 * config.interval
    assert report.digest == report.reference_digest
    assert report.drill_failures is None


def test_eks_stack_rehearsal_passes_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        "smoke",
        "--stack",
        "eks-dev",
        "--project-dir",
        str(REPO),
        "--store",
        "file",
        # At 0.05 the 30 s drain is 1.5 s and the 90 s grace 4.5 s: steps are stretched
        # to span half an interval of that drain, the rehearsal's own time.
        "--time-scale",
        "0.05",
        "--preemptions",
        "1",
        "--hard-kills",
        "1",
        "--steps",
        "300",
    )
    assert (code, err) == (0, ""), out
    assert "SIGTERM 1.5 s after the notice" in out
    assert "judged as a drill (spotproof.drill.judge): PASSED" in out
    assert "PASSED" in out


def test_aks_stack_rehearsal_passes_against_azurite(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        "smoke",
        # At 0.5 the 30 s grace is 15 s: AKS sends SIGTERM at the notice, so the scale
        # stretches no step, and a loaded machine still commits its final save in time.
        *("--stack", "aks-dev", "--project-dir", str(REPO), "--time-scale", "0.5"),
        *("--preemptions", "1", "--hard-kills", "1", "--steps", "300"),
    )
    assert (code, err) == (0, ""), out
    assert "store: azure (az://" in out
    assert "AKS node auto-drain evicts at once" in out
    assert "PASSED" in out


def test_unknown_stack_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "smoke", "--stack", "nope", "--project-dir", str(REPO))
    assert code == 2 and err.count("\n") == 1 and "unknown stack 'nope'" in err


# --- the Job controller, from the rendered policy --------------------------------------

SMOKE_POLICY = JobPolicy(
    backoff_limit=1,
    rules=(
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [2]},
        },
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "Ignore",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]},
        },
    ),
    container="trainer",
)


def test_disrupted_pods_are_ignored_and_never_spend_the_backoff_limit() -> None:
    job = JobController(SMOKE_POLICY)
    for _ in range(5):
        job.pod_failed(143, {DISRUPTION_TARGET}, "preemption")
        job.pod_failed(None, {DISRUPTION_TARGET}, "node gone")
    assert job.failed is None and job.counted == 0


def test_bad_config_exit_fails_the_job_at_once() -> None:
    job = JobController(SMOKE_POLICY)
    job.pod_failed(2, set(), "bad config")
    assert job.failed == "bad config matched a FailJob rule"


def test_crashes_beyond_the_backoff_limit_fail_the_job() -> None:
    job = JobController(SMOKE_POLICY)
    job.pod_failed(1, set(), "crash 1")
    job.pod_failed(1, set(), "crash 2")
    assert job.failed is not None and "2 failures counted against backoffLimit 1" in job.failed


def test_without_a_disruption_rule_preemptions_spend_the_backoff_limit() -> None:
    job = JobController(JobPolicy(backoff_limit=0))
    job.pod_failed(143, {DISRUPTION_TARGET}, "preemption")
    assert job.failed is not None
