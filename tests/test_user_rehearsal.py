"""``spotproof smoke --command``: a user's own trainer, in a project of their own outside
this checkout, rehearsed as they would run it: once uninterrupted, once through
preemptions, a hard kill inside a save and a kill while restoring, alone or as a gang
under the real torchrun; judged by its exit codes, its steps lost and its final digest,
and, when the digest differs, told which part of its state it loses on a resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spotproof.plan import PlanResult
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.reports.records import SmokeConfig
from spotproof.smoke.runs.stack import command_rehearsal
from spotproof.smoke.user.state_diff import explain, not_deterministic
from tests.support import run_cli

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

TRAIN = textwrap.dedent(
    """
    import os

    import torch

    from spotproof import training

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    STEPS = int(os.environ.get("TRAIN_STEPS", "60"))

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 100))

    with training(model=model, optimizer=optimizer, scheduler=warmup) as run:
        print(f"rank {run.rank} starts at step {run.step}", flush=True)
        for step in run.steps(STEPS):
            batch = torch.Generator().manual_seed(step * 1000 + run.rank)  # each rank's data
            x = torch.randn(32, 16, generator=batch)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            if torch.distributed.is_initialized():  # data parallel: average the gradients
                for parameter in model.parameters():
                    torch.distributed.all_reduce(parameter.grad)
                    parameter.grad /= torch.distributed.get_world_size()
            optimizer.step()
            warmup.step()
    print(f"trained {STEPS} steps", flush=True)
    """
)
"""A user's trainer: a model, its optimizer and a warm-up schedule, handed to training();
deterministic; 60 steps unless ``TRAIN_STEPS`` says otherwise. In a gang the ranks train
one model data-parallel: each its own data, the gradients averaged over the group
training() joined."""
FORGETS_SCHEDULER = TRAIN.replace("optimizer=optimizer, scheduler=warmup", "optimizer=optimizer")
SPOTPROOF = Path(sys.executable).with_name("spotproof")
"""The console script of this checkout's environment, as a user's own venv has one."""


@dataclass(frozen=True)
class Rehearsed:
    code: int
    out: str
    err: str
    report: dict[str, Any]


def _project(root: Path, script: str) -> Path:
    """A user's project outside this checkout: a directory holding their train.py."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(script)
    return root


def _smoke(project: Path, *argv: str, command: str = "python train.py") -> Rehearsed:
    """``spotproof smoke --command`` started in ``project`` as its user starts it, with
    the environment's ``python`` first on PATH."""
    report = project / "out" / "rehearsal.json"
    env = {**os.environ, "PATH": f"{SPOTPROOF.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(SPOTPROOF), "smoke", "--command", command, *argv, "--json", str(report)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=840,
    )
    body = json.loads(report.read_text()) if report.exists() else {}
    return Rehearsed(done.returncode, done.stdout, done.stderr, body)


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Rehearsed:
    """The user's trainer as one process, against moto's S3: a preemption and a hard kill,
    and a replacement killed while it restores."""
    project = _project(tmp_path_factory.mktemp("alone") / "acme", TRAIN)
    return _smoke(project, "--preemptions", "1", "--hard-kills", "1")


@pytest.fixture(scope="module")
def gang(tmp_path_factory: pytest.TempPathFactory) -> Rehearsed:
    """The user's trainer as a gang of 2 ranks, each started through the launch script and
    torchrun: one rank preempted, one killed inside a save, the gang killed as it restores."""
    project = _project(tmp_path_factory.mktemp("gang") / "acme", TRAIN)
    return _smoke(project, "--nodes", "2", "--preemptions", "1", "--hard-kills", "1")


@pytest.fixture(scope="module")
def forgetful(tmp_path_factory: pytest.TempPathFactory) -> Rehearsed:
    """The same trainer, but one that does not hand its scheduler to training()."""
    project = _project(tmp_path_factory.mktemp("forgetful") / "acme", FORGETS_SCHEDULER)
    return _smoke(project, "--preemptions", "1", "--hard-kills", "0")


# --- a trainer that resumes right passes ----------------------------------------------


def test_a_users_trainer_passes_the_rehearsal_as_one_process(alone: Rehearsed) -> None:
    assert (alone.code, alone.err) == (0, ""), alone.out
    assert "PASSED: the interrupted run ended with the reference digest" in alone.out
    assert alone.report["passed"] is True
    assert alone.report["digest"] == alone.report["reference_digest"] is not None


def test_the_script_decides_how_many_steps_it_trains(alone: Rehearsed) -> None:
    assert alone.report["config"]["total_steps"] == 60
    assert "60 steps in" in alone.out and "checkpointing every 10" in alone.out


def test_each_interruption_is_judged_against_what_it_may_lose(alone: Rehearsed) -> None:
    kinds = {i["kind"]: i for i in alone.report["interruptions"]}
    assert set(kinds) == {"preemption", "hard-kill", "restore-kill"}
    preempted = kinds["preemption"]
    assert (preempted["exit_code"], preempted["steps_lost"]) == (143, 0)
    killed = kinds["hard-kill"]
    assert killed["exit_code"] == -signal.SIGKILL and killed["kill_point"] == "in-upload"
    assert killed["steps_lost"] <= killed["max_steps_lost"] <= 2 * 10


def test_a_replacement_killed_while_restoring_costs_nothing(alone: Rehearsed) -> None:
    [restore] = [i for i in alone.report["interruptions"] if i["kind"] == "restore-kill"]
    assert restore["exit_code"] == -signal.SIGKILL
    assert restore["kill_point"] == "in-restore"
    assert restore["upload_step"] == restore["at_step"] == restore["resumed_from"]
    assert restore["steps_lost"] == 0
    assert "killed while it read the checkpoint of step" in alone.out


def test_the_report_says_where_the_time_went(alone: Rehearsed) -> None:
    spent = alone.report["time_spent"]
    assert {"emulator", "reference_run", "interrupted_run", "process_startups"} <= set(spent)
    assert {"waiting_out_graces", "processes", "total"} <= set(spent)
    assert spent["processes"] == 5  # the reference, then four starts of the interrupted run
    assert spent["total"] >= spent["reference_run"] + spent["interrupted_run"]
    assert "time spent:" in alone.out and "process start-ups" in alone.out


def test_a_gang_of_the_users_trainer_passes_under_torchrun(gang: Rehearsed) -> None:
    assert (gang.code, gang.err) == (0, ""), gang.out
    assert "as a gang of 2 ranks" in gang.out
    assert gang.report["digest"] == gang.report["reference_digest"] is not None
    kinds = sorted(i["kind"] for i in gang.report["interruptions"])
    assert kinds == ["hard-kill", "preemption", "restore-kill"]
    [killed] = [i for i in gang.report["interruptions"] if i["kind"] == "hard-kill"]
    assert killed["kill_point"] == "in-upload" and killed["peers_not_waiting"] == []


# --- a trainer that loses state is told which ------------------------------------------


def test_a_trainer_that_keeps_its_scheduler_to_itself_fails_naming_it(
    forgetful: Rehearsed,
) -> None:
    assert forgetful.code == 1, forgetful.out + forgetful.err
    assert forgetful.report["passed"] is False
    assert "does not hand its scheduler to training()" in forgetful.out
    assert "scheduler=scheduler" in forgetful.report["diagnosis"][-1]


def test_the_state_that_differs_is_named_from_the_first_save_after_the_resume(
    forgetful: Rehearsed,
) -> None:
    [preempted] = [i for i in forgetful.report["interruptions"] if i["kind"] == "preemption"]
    resumed = preempted["resumed_from"]
    first = forgetful.report["diagnosis"][0]
    assert first.startswith("optimizer differs from the save of step ")
    assert f"(the first save after the resume at step {resumed})" in first


def test_a_deterministic_trainer_is_run_twice_before_its_resume_is_blamed(
    forgetful: Rehearsed,
) -> None:
    report = forgetful.report
    assert report["second_reference_digest"] == report["reference_digest"]
    assert "second_reference_run" in report["time_spent"]
    assert not any("not deterministic" in line for line in report["diagnosis"])


# --- what the diagnosis says ------------------------------------------------------------


def test_two_uninterrupted_runs_that_differ_make_the_trainer_not_deterministic() -> None:
    line = not_deterministic(
        {"model": "a", "optimizer": "b", "rng": "c"},
        {"model": "x", "optimizer": "b", "rng": "y"},
        {10: {"model": "a0"}, 20: {"model": "a1"}},
        {10: {"model": "a0"}, 20: {"model": "x1"}},
    )
    assert line.startswith("the trainer is not deterministic: two uninterrupted runs ended")
    assert "model, rng (from the save of step 20 on)" in line


def test_a_part_handed_to_training_that_differs_is_named_with_its_own_state() -> None:
    reference = {10: {"model": "m", "data": "d1"}, 20: {"model": "m2", "data": "d2"}}
    interrupted = {10: {"model": "m", "data": "d1"}, 20: {"model": "m2", "data": "other"}}
    lines = explain({}, {}, reference, interrupted, [15])
    assert (
        lines[0]
        == "data differs from the save of step 20 on (the first save after the resume at step 15)"
    )
    assert lines[-1].startswith("data's state_dict() does not hold all of its state")


# --- holding a trainer nothing paces -----------------------------------------------------

FAST_STEPS = textwrap.dedent(
    """
    import json, os, time
    events = os.open(os.environ["SPOTPROOF_EVENTS"], os.O_WRONLY | os.O_APPEND)
    for step in range(1, 1_000_001):
        os.write(events, (json.dumps({"event": "step", "step": step}) + "\\n").encode())
        time.sleep(0.001)
    """
)
"""A trainer whose steps take a millisecond, each one an event in its events file."""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_trainer_of_fast_steps_is_held_where_the_rehearsal_interrupts_it(
    tmp_path: Path,
) -> None:
    script = tmp_path / "fast.py"
    script.write_text(FAST_STEPS)
    process = TrainerProcess(
        {}, time.monotonic(), argv=[sys.executable, str(script)], events_file=tmp_path / "e"
    )
    try:
        held = process.run_until(lambda e: e["step"] >= 300, timeout=60)
        assert held is not None and held["step"] == 300
        assert _state(process.popen.pid) == "T" and process.held  # stopped, not running on
        time.sleep(0.1)
        process.drain()
        seen = process.last_step
        assert seen < 300 + 200  # a million steps without the hold
        time.sleep(0.3)
        process.drain()
        assert process.last_step == seen  # nothing more while held
        again = process.run_until(lambda e: e["step"] >= seen + 100, timeout=60)
        assert again is not None and _state(process.popen.pid) == "T"
    finally:
        process.send(signal.SIGKILL)
        process.finish()


# --- the stack's path, and input that cannot be rehearsed --------------------------------


def test_a_command_is_rehearsed_on_the_path_of_the_stacks_training_workload(
    eks_dev: PlanResult,
) -> None:
    base = SmokeConfig(store="s3", interval=10)
    rehearsed = command_rehearsal(eks_dev, base, time_scale=0.1)
    config = rehearsed.config
    assert rehearsed.workload == "Job spotproof/spotproof-smoke"  # all eks-dev trains
    assert (config.interval, config.store) == (50, "s3")
    assert config.grace_seconds == pytest.approx(9.0)  # 90 s, scaled
    assert config.sigterm_after == pytest.approx(3.0)  # Karpenter's drain, scaled
    assert config.job is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--command", "no-such-trainer --fast"], "'no-such-trainer' is not found"),
        (["--command", "python train.py && echo done"], "'&&' needs a shell"),
        (["--command", "EPOCHS=3 python train.py"], "the variable 'EPOCHS=3' needs a shell"),
        (["--command", "python 'train.py"], "No closing quotation"),
        (["--command", "python train.py", "--steps", "100"], "--steps: your script decides"),
        (["--command", "python train.py", "--batch"], "allowed: --batch or --command"),
    ],
)
def test_a_command_that_cannot_be_rehearsed_exits_2_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "smoke", *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and says in err, err


def test_a_trainer_that_refuses_its_configuration_exits_2_in_one_line(tmp_path: Path) -> None:
    script = TRAIN.replace("scheduler=warmup)", "scheduler=warmup, interval=0)")
    done = _smoke(_project(tmp_path / "acme", script), "--store", "file")
    assert done.code == 2, done.out + done.err
    assert done.err.count("\n") == 1
    assert "exited 2 (bad configuration) before it trained: interval=0" in done.err
