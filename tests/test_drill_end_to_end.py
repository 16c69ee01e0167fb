"""``spotproof drill`` from the first stage to the report: the runner and the command against
a fake API server replaying each documented reclaim path (``tests/kube_replay.py``), the
cloud's side played by the reclaim that starts the replay, and the plan's paths from the
stacks' own offline plans.

The command-line test goes through Compute Engine's SDK with every HTTP request answered at
the ``requests`` adapter, so what is drilled there is the reclaim as the SDK sends it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillRefused, GrantMissing
from spotproof.drill.grants import grant_from_outputs
from spotproof.drill.instances import Instance
from spotproof.drill.kube_api import connect
from spotproof.drill.reclaim import Reclaimed
from spotproof.drill.runner import DrillOptions, run_drill
from spotproof.drill.store_watch import StoreWatch
from spotproof.drill.subject import Subject
from spotproof.drill.timeline import Mark, Timeline
from spotproof.plan import PlanResult
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from tests.kube_replay import JOB, NAMESPACE, SCENARIOS, Replay, Scenario
from tests.support import run_cli
from tests.test_drill_reclaim_gke import ComputeApi

FAST = DrillOptions(target_seconds=10, signal_seconds=10, resume_seconds=10, finish_seconds=10)


class ReplayedReclaim:
    """The cloud's side of a drill: the reclaim request starts the scripted path."""

    def __init__(self, replay: Replay, scenario: Scenario) -> None:
        self.replay, self.scenario = replay, scenario
        self.reclaimed: list[Instance] = []
        self.undone = 0

    def verify(self, instance: Instance) -> str:
        return "spot (replayed)"

    def reclaim(self, instance: Instance) -> Reclaimed:
        self.reclaimed.append(instance)
        self.replay.play(self.scenario.steps)
        return Reclaimed(instance, time.time(), "replay-1", "a replayed reclaim")

    def check(self) -> None:
        """The cloud carries the reclaim out: the replay plays it."""

    def undo(self) -> None:
        self.undone += 1


@pytest.fixture
def replay() -> Iterator[Replay]:
    server = Replay()
    yield server
    server.close()


def _drill(
    replay: Replay,
    tmp_path: Path,
    scenario: Scenario,
    subject: Subject,
    **kwargs: Any,
) -> tuple[Any, ReplayedReclaim]:
    reclaim = ReplayedReclaim(replay, scenario)
    api = connect(str(replay.kubeconfig(tmp_path / "kubeconfig")))
    report = run_drill(
        subject, api, reclaim, FAST, progress=lambda _line: None, clock=replay.clock, **kwargs
    )
    return report, reclaim


def _subject(cloud: Cloud, plan: PlanResult | None = None, **more: Any) -> Subject:
    paths = ()
    if plan is not None:
        [outcome] = [o for o in plan.outcomes if o.workload.name == "spotproof-smoke"]
        paths = outcome.paths
    fields = {"declared_grace": 25.0, "paths": paths, **more}
    return Subject(cloud, "Job", NAMESPACE, JOB, **fields)


def test_a_gke_reclaim_that_recovers_as_planned_passes(
    replay: Replay, tmp_path: Path, gke_dev: PlanResult
) -> None:
    scenario = SCENARIOS["gke"](replay)

    report, reclaim = _drill(replay, tmp_path, scenario, _subject(Cloud.GKE, gke_dev))

    assert report.passed, report.failures
    assert [i.name for i in reclaim.reclaimed] == [scenario.reclaimed]
    [outcome] = report.verdict.reclaims
    assert (outcome.ending, outcome.exit_code, outcome.final_step) == (
        "TerminationByKubelet",
        143,
        437,
    )
    assert (outcome.resumed_from, outcome.steps_lost, outcome.pool) == (437, 0, "spot-a100")
    assert report.differences == []
    assert reclaim.undone == 1


def test_an_eviction_where_the_plan_predicted_a_plain_delete_fails_the_drill(
    replay: Replay, tmp_path: Path, eks_dev: PlanResult
) -> None:
    scenario = SCENARIOS["karpenter"](replay)

    report, _ = _drill(
        replay, tmp_path, scenario, _subject(Cloud.EKS, eks_dev, declared_grace=60.0)
    )

    assert report.verdict.passed  # the workload recovered ...
    assert not report.passed  # ... but not along the path the plan predicted
    assert any(
        "the pod ended by EvictionByEvictionAPI, not plain delete" in f for f in report.failures
    )


def test_a_node_that_vanishes_fails_the_drill_and_says_so(replay: Replay, tmp_path: Path) -> None:
    scenario = SCENARIOS["vanished"](replay)

    report, _ = _drill(replay, tmp_path, scenario, _subject(Cloud.GKE))

    assert "reclaim 1: SIGTERM never reached the trainer: the node was gone first" in (
        report.failures
    )
    [outcome] = report.verdict.reclaims
    assert (outcome.ending, outcome.resumed_from) == ("DeletionByPodGC", 400)


def test_the_store_is_read_for_the_final_checkpoint(
    replay: Replay, tmp_path: Path, gke_dev: PlanResult
) -> None:
    scenario = SCENARIOS["gke"](replay)
    url = (tmp_path / "checkpoints").as_uri()
    original = replay.objects[("pods", NAMESPACE, scenario.original)]
    original["spec"]["containers"][0]["env"][0]["value"] = url
    scenario.steps.append((11.4, lambda _r: CheckpointStore(url).save(437, {"state": b"w"})))

    def watch_store(checkpoint_url: str, timeline: Timeline) -> StoreWatch:
        assert checkpoint_url == url
        return StoreWatch(CheckpointStore(url), timeline, poll_seconds=0.05).start()

    report, _ = _drill(
        replay, tmp_path, scenario, _subject(Cloud.GKE, gke_dev), store_watch=watch_store
    )

    stored = [e for e in report.timeline.of(Mark.CHECKPOINT) if e.detail.get("source") == "store"]
    assert [e.detail["step"] for e in stored] == [437]
    assert report.passed, report.failures


def test_a_protected_stack_is_not_drilled_without_yes(replay: Replay, tmp_path: Path) -> None:
    scenario = SCENARIOS["gke"](replay)
    subject = _subject(Cloud.GKE, stack="gke-prod", protected=True)

    with pytest.raises(DrillRefused, match="stack gke-prod is protected"):
        _drill(replay, tmp_path, scenario, subject)


def test_ctrl_c_during_the_reclaim_leaves_no_watch_running(replay: Replay, tmp_path: Path) -> None:
    scenario = SCENARIOS["gke"](replay)
    reclaim = ReplayedReclaim(replay, scenario)

    def interrupted(instance: Instance) -> Reclaimed:
        raise KeyboardInterrupt

    reclaim.reclaim = interrupted  # type: ignore[method-assign]
    api = connect(str(replay.kubeconfig(tmp_path / "kubeconfig")))

    with pytest.raises(KeyboardInterrupt):
        run_drill(_subject(Cloud.GKE), api, reclaim, FAST, progress=lambda _l: None)

    assert reclaim.undone == 1
    assert [t.name for t in threading.enumerate() if t.name.startswith("drill-")] == []


# --- the command, through Compute Engine's SDK -------------------------------------------------

PROJECT, ZONE = "ml-proj", "us-central1-a"
TOKEN = {"access_token": "t", "expires_in": 3600, "token_type": "Bearer"}


@pytest.fixture
def compute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ComputeApi]:
    """Compute Engine and Google's token endpoint answer every ``requests`` session from here;
    the caller's credentials are a user's refresh token, as ``gcloud auth
    application-default login`` leaves them."""
    credentials = tmp_path / "adc.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "c",
                "client_secret": "s",
                "refresh_token": "r",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    stub = ComputeApi()
    stub.answer("POST", "/token", 200, TOKEN)
    monkeypatch.setattr(
        requests.adapters.HTTPAdapter, "send", lambda _self, request, **_kw: stub.send(request)
    )
    yield stub


def _outputs(tmp_path: Path, **drill: str) -> Path:
    """A cluster's outputs file that marks it disposable: drilled without ``--yes``."""
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({"cluster_name": "ml", "disposable": True, "drill": drill}))
    return path


GRANT = {
    "project": PROJECT,
    "role": f"projects/{PROJECT}/roles/spotproof_drill_ml",
    "instancePrefix": "gke-ml-",
}


@pytest.mark.parametrize("skew", [0, -40], ids=["clock-agrees", "clock-40s-behind"])
def test_the_command_drills_a_gke_cluster_through_simulate_maintenance_event(
    replay: Replay,
    tmp_path: Path,
    *,
    compute: ComputeApi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    skew: float,
) -> None:
    scenario = SCENARIOS["gke"](replay)
    instance = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{scenario.reclaimed}"
    vm = {
        "name": scenario.reclaimed,
        "status": "RUNNING",
        "scheduling": {"provisioningModel": "SPOT", "preemptible": False},
        "labels": {"goog-k8s-cluster-name": "ml"},
    }
    compute.answer("GET", instance, 200, vm)
    operation = {"kind": "compute#operation", "name": "op-1", "status": "RUNNING"}
    compute.answer("POST", f"{instance}/simulateMaintenanceEvent", 200, operation)
    sent = compute.send

    def send(request: requests.PreparedRequest) -> requests.Response:
        if (request.url or "").endswith("/simulateMaintenanceEvent"):
            replay.play(scenario.steps)
        return sent(request)

    monkeypatch.setattr(compute, "send", send)
    # This machine's clock on the replay's scripted time, as the API server stamps it, or
    # off it by ``skew``: the drill corrects it from the API server's Date header.
    local = SimpleNamespace(time=lambda: replay.clock() + skew)
    monkeypatch.setattr("spotproof.drill.command.time", local)
    report_path = tmp_path / "out" / "drill.json"

    code, out, err = run_cli(
        capsys,
        "drill",
        *("--cloud", "gke", "--kubeconfig", str(replay.kubeconfig(tmp_path / "kubeconfig"))),
        *("--outputs", str(_outputs(tmp_path, **GRANT)), "--namespace", NAMESPACE, "--job", JOB),
        *("--finish-timeout", "10", "--resume-timeout", "10", "--json", str(report_path)),
    )

    assert (code, err) == (0, ""), out
    assert "simulateMaintenanceEvent" in out and "PASSED" in out
    assert ("off the API server's: corrected" in out) == bool(skew)
    posts = [s for s in compute.sent if s.method == "POST" and s.path != "/token"]
    assert [s.path for s in posts] == [f"{instance}/simulateMaintenanceEvent"]
    written = json.loads(report_path.read_text())
    assert written["passed"] is True
    assert [r["resumed_from"] for r in written["reclaims"]] == [437]
    assert report_path.with_suffix(".png").stat().st_size > 10_000


def test_a_stack_deployed_without_the_grant_is_told_which_setting_adds_it(
    replay: Replay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"cluster_name": "ml"}))

    code, out, err = run_cli(
        capsys,
        "drill",
        *("--cloud", "gke", "--kubeconfig", str(replay.kubeconfig(tmp_path / "kubeconfig"))),
        *("--outputs", str(outputs), "--job", JOB),
    )

    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "set spotproof:drill.enabled true, run pulumi up" in err


def test_without_a_stack_the_command_names_every_flag_it_lacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(capsys, "drill", "--cloud", "eks")

    assert code == 2 and err.count("\n") == 1
    assert "--kubeconfig, --outputs, --job or --jobset must be given" in err


def test_a_grant_output_missing_keys_names_them_and_the_setting() -> None:
    partial = {"drill": {"project": PROJECT, "role": GRANT["role"]}}

    with pytest.raises(GrantMissing) as missing:
        grant_from_outputs(Cloud.GKE, partial, "stack gke-dev")

    assert str(missing.value) == (
        "the 'drill' output of stack gke-dev lacks instancePrefix; run pulumi up with this "
        "spotproof and spotproof:drill.enabled true"
    )
