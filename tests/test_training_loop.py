"""``from spotproof import training``: a user's loop of a model, an optimizer and a
scheduler, preempted (SIGTERM) and killed (SIGKILL) for real, resumes to the weights of
a run never interrupted, bit for bit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spotproof.runtime.run_settings import RunSettings
from spotproof.runtime.settings import ConfigError

pytestmark = pytest.mark.processes

SCRIPT = textwrap.dedent(
    """
    import hashlib, os, time

    import torch

    from spotproof import training

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    with training(model=model, optimizer=optimizer, scheduler=scheduler) as run:
        print("resumed", run.step, flush=True)
        for step in run.steps(int(os.environ["TOTAL"])):
            data = torch.Generator().manual_seed(step)
            x = torch.randn(16, 8, generator=data)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            print("step", step + 1, flush=True)
            time.sleep(float(os.environ.get("STEP_SECONDS", "0")))
    weights = [t.tolist() for t in model.state_dict().values()]
    print("done", hashlib.sha256(repr((weights, scheduler.state_dict())).encode()).hexdigest())
    """
)
TOTAL = 60


def _start(script: Path, url: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "CHECKPOINT_URL": url,
            "CHECKPOINT_INTERVAL": "10",
            "GRACE_SECONDS": "30",
            "TOTAL": str(TOTAL),
            **env,
        },
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    out, err = process.communicate(timeout=300)
    return process.returncode, out.splitlines() + [f"stderr: {line}" for line in err.splitlines()]


def _until_step(process: subprocess.Popen[str], step: int) -> list[str]:
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line.strip())
        if line.startswith("step ") and int(line.split()[1]) >= step:
            return seen
    raise AssertionError(f"the run ended before step {step}: {seen}")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("user") / "train.py"
    path.write_text(SCRIPT)
    return path


@pytest.fixture(scope="module")
def reference_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"file://{tmp_path_factory.mktemp('reference')}"


@pytest.fixture(scope="module")
def reference(script: Path, reference_url: str) -> str:
    code, lines = _finish(_start(script, reference_url))
    assert code == 0, lines
    return lines[-1]


@pytest.mark.parametrize("kill", [signal.SIGTERM, signal.SIGKILL], ids=["preempted", "killed"])
def test_an_interrupted_loop_resumes_to_the_uninterrupted_weights(
    script: Path, tmp_path: Path, reference: str, kill: signal.Signals
) -> None:
    url = f"file://{tmp_path}/interrupted"
    first = _start(script, url, STEP_SECONDS="0.05")
    _until_step(first, 25)
    first.send_signal(kill)
    code, lines = _finish(first)
    assert code == (143 if kill is signal.SIGTERM else -signal.SIGKILL), lines

    code, lines = _finish(_start(script, url))
    assert code == 0, lines
    resumed = int(lines[0].split()[1])
    assert resumed >= 25 if kill is signal.SIGTERM else resumed in (20, 30)
    assert lines[-1] == reference


def test_a_finished_run_started_again_finishes_at_once(
    script: Path, reference_url: str, reference: str
) -> None:
    code, lines = _finish(_start(script, reference_url))
    assert code == 0
    assert lines[0] == f"resumed {TOTAL}" and lines[-1] == reference
    assert not any(line.startswith("step ") for line in lines)


def test_a_missing_interval_exits_2_in_one_line(script: Path, tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if k != "CHECKPOINT_INTERVAL"}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=False,
        env={**environment, "CHECKPOINT_URL": f"file://{tmp_path}/x", "TOTAL": "5"},
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(
        'spotproof event=exit code=2 reason="CHECKPOINT_INTERVAL is required'
    )
    assert done.stderr.count("\n") == 1


def test_a_gang_without_its_rendezvous_exits_2_naming_it(script: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=False,
        env={
            **os.environ,
            "CHECKPOINT_URL": f"file://{tmp_path}/x",
            "CHECKPOINT_INTERVAL": "5",
            "TOTAL": "5",
            "WORLD_SIZE": "2",
        },
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert 'reason="MASTER_ADDR is required' in done.stderr and done.stderr.count("\n") == 1


def test_another_runs_checkpoints_are_refused_rather_than_half_loaded(
    script: Path, reference_url: str, reference: str, tmp_path: Path
) -> None:
    other = tmp_path / "other.py"
    other.write_text(script.read_text().replace("torch.nn.Linear(8, 1)", "torch.nn.Linear(3, 1)"))
    code, lines = _finish(_start(other, reference_url))
    assert code == 2, lines
    assert lines[-1].startswith(
        'stderr: spotproof event=exit code=2 reason="no checkpoint under the CHECKPOINT_URL fits'
    )


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"grace_seconds": -5}, "grace_seconds=-5: allowed a number of seconds above 0"),
        ({"grace_seconds": float("nan")}, "grace_seconds=nan: allowed a number of seconds"),
        ({"grace_seconds": float("inf")}, "grace_seconds=inf: allowed a number of seconds"),
        ({"interval": 0}, "interval=0: allowed a whole number >= 1"),
        ({"interval": True}, "interval=True: allowed a whole number >= 1"),
        ({"identity": {"seed": [1]}}, "identity['seed'] = [1]: allowed a str, int, float or bool"),
    ],
)
def test_a_setting_given_in_code_is_checked_as_the_environment_is(
    given: dict[str, object], says: str
) -> None:
    """A grace of -5 or nan would abandon every final save: refused before anything runs."""
    env = {"CHECKPOINT_URL": "file:///tmp/x", "CHECKPOINT_INTERVAL": "5"}
    with pytest.raises(ConfigError) as raised:
        RunSettings.from_env(env, **given)  # type: ignore[arg-type]
    assert str(raised.value) == says or str(raised.value).startswith(says)
