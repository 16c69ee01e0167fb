"""Trainers forked from a zygote that has imported them behave as trainers started afresh:
the same digest, the same exit codes and signals, and none outlives the zygote."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.processes.warm import ForkedTrainer, Zygote, warm_trainers

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with warm_trainers() as warm:
        yield warm


def _env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    env = {
        "CHECKPOINT_URL": f"file://{tmp_path}/ckpt",
        "CHECKPOINT_INTERVAL": "10",
        "TOTAL_STEPS": "30",
        "MODEL_MB": "1",
    }
    return env | overrides


def _forked(zygote: Zygote, env: dict[str, str]) -> TrainerProcess:
    return TrainerProcess(env, time.monotonic(), zygote=zygote)


def test_a_forked_trainer_ends_with_the_digest_of_one_started_afresh(
    zygote: Zygote, tmp_path: Path
) -> None:
    forked = _forked(zygote, _env(tmp_path / "warm"))
    afresh = TrainerProcess(_env(tmp_path / "cold"), time.monotonic())

    assert forked.finish(timeout=60) == afresh.finish(timeout=120) == exit_codes.COMPLETED
    assert forked.first("done") == afresh.first("done") is not None


def test_a_forked_trainer_sent_sigterm_saves_and_exits_preempted(
    zygote: Zygote, tmp_path: Path
) -> None:
    trainer = _forked(zygote, _env(tmp_path, TOTAL_STEPS="100000", STEP_SECONDS="0.01"))
    trainer.wait_for(lambda e: e["event"] == "resumed", timeout=60)
    time.sleep(0.2)
    trainer.send(signal.SIGTERM)

    assert trainer.finish(timeout=30) == exit_codes.PREEMPTED
    assert [e["kind"] for e in trainer.of("checkpoint")][-1] == "final"


def test_a_forked_trainer_killed_reports_the_signal_as_popen_does(
    zygote: Zygote, tmp_path: Path
) -> None:
    trainer = _forked(zygote, _env(tmp_path, TOTAL_STEPS="100000", STEP_SECONDS="0.01"))
    trainer.wait_for(lambda e: e["event"] == "resumed", timeout=60)
    trainer.send(signal.SIGKILL)

    assert trainer.finish(timeout=30) == -signal.SIGKILL


def test_a_forked_trainer_with_a_bad_setting_says_so_in_one_line(zygote: Zygote) -> None:
    trainer = _forked(zygote, {"TOTAL_STEPS": "0", "PATH": os.environ["PATH"]})

    assert trainer.finish(timeout=30) == exit_codes.BAD_CONFIG
    assert trainer.stderr == ["spotproof.smoke.train: TOTAL_STEPS='0': allowed 1 to 1000000000000"]


def test_a_forked_trainer_reads_the_environment_it_was_given_not_the_zygotes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHECKPOINT_INTERVAL", "3")
    with warm_trainers() as started_with_3:
        trainer = _forked(started_with_3, _env(tmp_path, CHECKPOINT_INTERVAL="5", TOTAL_STEPS="15"))
        assert trainer.finish(timeout=60) == exit_codes.COMPLETED

    assert [e["step"] for e in trainer.of("checkpoint")] in ([5, 10, 15], [5, 15])


def test_closing_the_zygote_kills_the_trainers_it_forked(tmp_path: Path) -> None:
    zygote = Zygote()
    trainer = _forked(zygote, _env(tmp_path, TOTAL_STEPS="100000", STEP_SECONDS="0.01"))
    trainer.wait_for(lambda e: e["event"] == "resumed", timeout=60)
    pid = trainer.popen.pid

    zygote.close()

    assert trainer.finish(timeout=30) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_zygote_that_cannot_start_says_why_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match=r"^the trainer's zygote did not start: [^\n]+$"):
        Zygote(timeout=10)


# --- a user's own `python train.py`, forked -----------------------------------------------

SCRIPT = """\
import atexit, json, os, sys, threading, time
import numpy, torch
record = {
    "argv": sys.argv, "name": __name__, "path0": sys.path[0], "cwd": os.getcwd(),
    "threads": torch.get_num_threads(), "mine": os.environ.get("MINE"),
    "draw": int(numpy.random.randint(1 << 30)),
}
print(json.dumps({"event": "started", **record}))
class Mine:  # what an atexit handler or a thread may pickle, as __main__.Mine
    pass
def at_exit():
    print(json.dumps({"event": "atexit", "main_kept": sys.modules["__main__"].Mine is Mine}))
atexit.register(at_exit)
threading.Thread(target=lambda: (time.sleep(0.2), print(json.dumps({"event": "thread"})))).start()
if os.environ.get("HANG"):
    print("said before hanging")  # not flushed: PYTHONUNBUFFERED must carry it
    time.sleep(600)
if os.environ.get("RAISE") == "error":
    raise ValueError("the script failed")
if os.environ.get("RAISE") == "interrupt":
    raise KeyboardInterrupt
exit_with = os.environ.get("EXIT", "0")
sys.exit(int(exit_with) if exit_with.isdigit() else exit_with)
"""


def _script(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(SCRIPT)
    return root


def _program(zygote: Zygote, tmp_path: Path, **env: str) -> TrainerProcess:
    """``python train.py a b`` in ``tmp_path``'s project, as ``spotproof smoke --command``
    starts it: its events are its stdout, merged with its stderr."""
    return TrainerProcess(
        {"PATH": os.environ["PATH"], **env},
        time.monotonic(),
        argv=[sys.executable, "train.py", "a", "b"],
        zygote=zygote,
        events_file=tmp_path / "events.jsonl",
    )


def _said(process: TrainerProcess) -> list[dict]:
    return [json.loads(line) for line in process.stderr if line.startswith("{")]


def test_a_users_script_is_forked_warm_and_runs_as_python_runs_it(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _script(tmp_path / "acme")
    monkeypatch.chdir(project)
    events = tmp_path / "events.jsonl"
    process = _program(zygote, tmp_path, MINE="yes", OMP_NUM_THREADS="5", EXIT="3")

    assert isinstance(process.popen, ForkedTrainer)
    assert process.finish(timeout=60) == 3
    said = _said(process)
    assert not events.read_text()  # the events file is the trainer's; this one prints
    [started] = [e for e in said if e["event"] == "started"]
    assert started["argv"] == ["train.py", "a", "b"] and started["name"] == "__main__"
    assert (started["path0"], started["cwd"]) == (str(project), str(project))
    assert (started["mine"], started["threads"]) == ("yes", 5)
    # Ended as an interpreter ends: its non-daemon threads joined, then atexit, with its
    # own module still __main__.
    assert [e["event"] for e in said][1:] == ["thread", "atexit"]
    assert said[-1]["main_kept"]


def test_two_forked_scripts_draw_different_unseeded_numbers(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy's global generator, which torch's compiler stack imports into the zygote, is
    seeded afresh in each child, as each fresh interpreter seeds its own."""
    monkeypatch.chdir(_script(tmp_path / "acme"))
    draws = []
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        process = _program(zygote, tmp_path / run)
        assert process.finish(timeout=60) == 0
        draws += [e["draw"] for e in _said(process) if e["event"] == "started"]
    assert len(set(draws)) == 2, draws


@pytest.mark.parametrize(
    "env, code, said",
    [
        ({"EXIT": "bye"}, 1, "bye"),  # SystemExit with a message: printed, exit 1
        ({"RAISE": "error"}, 1, "ValueError: the script failed"),
        ({"RAISE": "interrupt"}, -signal.SIGINT, "KeyboardInterrupt"),
    ],
)
def test_a_forked_script_ends_with_the_code_and_words_python_would_leave(  # noqa: PLR0917
    zygote: Zygote,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    code: int,
    said: str,
) -> None:
    monkeypatch.chdir(_script(tmp_path / "acme"))
    process = _program(zygote, tmp_path, **env)

    assert process.finish(timeout=60) == code
    lines = [line for line in process.stderr if line.strip()]
    assert said in lines, lines
    # The traceback comes before the threads are joined and atexit runs, as Python's does.
    assert lines.index(said) < next(i for i, line in enumerate(lines) if '"atexit"' in line)


def test_a_users_unflushed_line_arrives_at_once_when_pythonunbuffered_is_set(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_script(tmp_path / "acme"))
    process = _program(zygote, tmp_path, HANG="1", PYTHONUNBUFFERED="1")
    deadline = time.monotonic() + 60
    while "said before hanging" not in process.stderr and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send(signal.SIGKILL)

    assert "said before hanging" in process.stderr
    assert process.finish(timeout=30) == -signal.SIGKILL


@pytest.mark.parametrize(
    "argv",
    [
        ["/bin/sh", "-c", "python train.py"],
        [sys.executable, "-X", "dev", "train.py"],
        [sys.executable, "missing.py"],  # fails as python fails it: exit 2, its own words
    ],
)
def test_any_other_command_starts_afresh(
    zygote: Zygote, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_script(tmp_path / "acme"))
    process = TrainerProcess(
        {"PATH": os.environ["PATH"]}, time.monotonic(), argv=argv, zygote=zygote
    )
    process.send(signal.SIGKILL)
    process.finish(timeout=30)

    assert not isinstance(process.popen, ForkedTrainer)
