"""spotproof's torchrun (``runtime.warm_torchrun``): torchrun's agent, with Python workers
forked warm from a preloaded forkserver, each seeing what ``python -u script.py`` gives it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from multiprocessing import forkserver
from pathlib import Path

import pytest

from spotproof.runtime import exit_codes, launcher, settings
from spotproof.runtime.warm_torchrun import PythonWorker, _forkable, python_worker

WORKER = """\
import atexit, json, os, signal, sys, threading, time
preloaded = "torch" in sys.modules
import numpy
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = os.environ["RANK"]
def record(**fields):
    with open(os.environ["RECORDS"], "a") as out:
        out.write(json.dumps({"rank": rank, "restart": restart, **fields}) + "\\n")
with open(f"/proc/{os.getppid()}/cmdline", "rb") as server:
    forked_by = server.read().decode().split("\\0")
record(
    preloaded=preloaded, argv=sys.argv, path0=sys.path[0], name=__name__,
    unbuffered=os.environ.get("PYTHONUNBUFFERED"), forked_by=forked_by,
    stdout=type(sys.stdout.buffer).__name__, draw=int(numpy.random.randint(1 << 30)),
)
if os.environ.get("WAIT_FOR_SIGTERM"):
    def stop(*_):
        record(event="sigterm")
        sys.exit(143)
    signal.signal(signal.SIGTERM, stop)
    record(event="waiting")
    time.sleep(600)
if restart == 0:
    sys.exit(3)
def at_exit():  # __main__ is still this script's module, as in python's own teardown
    record(event="atexit", main_kept=sys.modules["__main__"].__dict__.get("at_exit") is at_exit)
atexit.register(at_exit)
threading.Thread(target=lambda: (time.sleep(0.3), record(event="thread"))).start()
"""


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _agent(tmp_path: Path, *flags: str, **env: str) -> subprocess.Popen[bytes]:
    script = tmp_path / "scripts" / "train.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(WORKER)
    command = [sys.executable, "-m", launcher.WARM_TORCHRUN_MODULE, "--standalone"]
    command += ["--nproc-per-node=2", "--monitor-interval=0.1", *flags]
    command += ["--no-python", sys.executable, "-u", str(script), "a", "b"]
    # Not unbuffered itself: its workers' output must be unbuffered by the warm start.
    variables = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    variables |= {"RECORDS": str(tmp_path / "records.jsonl"), **env}
    return subprocess.Popen(command, env=variables, cwd=tmp_path, stdout=subprocess.DEVNULL)


def test_this_interpreter_running_a_script_is_forked_warm() -> None:
    assert python_worker(sys.executable, ["-u", "train.py", "--lr", "1"]) == PythonWorker(
        "train.py", False, ("--lr", "1")
    )


def test_this_interpreter_running_a_module_is_forked_warm() -> None:
    assert python_worker(sys.executable, ["-m", "pkg.train", "x"]) == PythonWorker(
        "pkg.train", True, ("x",)
    )


@pytest.mark.parametrize(
    "command, args",
    [
        ("/bin/sh", ["-c", "python train.py"]),
        (sys.executable, ["-X", "dev", "train.py"]),
        (sys.executable, ["-c", "print(1)"]),
        (sys.executable, []),
        ("no-such-program", ["train.py"]),
    ],
    ids=["a shell", "another interpreter flag", "a -c program", "no script", "not found"],
)
def test_any_other_command_runs_as_torchrun_runs_it(command: str, args: list[str]) -> None:
    assert python_worker(command, args) is None


def test_another_pythons_workers_run_as_torchrun_runs_them(tmp_path: Path) -> None:
    """The same binary in another folder (a venv's python links to the system's) has
    other packages: it is not this interpreter."""
    other = tmp_path / "bin" / "python"
    other.parent.mkdir()
    other.symlink_to(os.path.realpath(sys.executable))
    assert python_worker(str(other), ["train.py"]) is None


def test_warm_imports_are_module_names_separated_by_commas() -> None:
    env = {settings.WARM_IMPORTS.name: "transformers, my_model.layers"}
    assert settings.WARM_IMPORTS.read(env) == ("transformers", "my_model.layers")
    assert settings.WARM_IMPORTS.read({}) == ()


def test_warm_imports_that_are_not_module_names_are_refused_in_one_line() -> None:
    with pytest.raises(settings.ConfigError) as refused:
        settings.WARM_IMPORTS.read({settings.WARM_IMPORTS.name: "torch;os.system('x')"})
    assert "\n" not in str(refused.value)
    assert settings.WARM_IMPORTS.name in str(refused.value)


def test_spotproofs_torchrun_reads_as_torchrun_to_the_plan() -> None:
    command = [launcher.WARM_TORCHRUN, "--shutdown-timeout=80", "--no-python", "python", "t.py"]
    assert launcher.is_torchrun(command)
    assert launcher.shutdown_timeout(command, {}) == 80
    assert launcher.exit_after_sigterm(command) == launcher.TORCHRUN_EXIT_AFTER_SIGTERM


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """An agent of 2 workers whose first attempt fails (exit 3), restarted once."""
    tmp_path = tmp_path_factory.mktemp("restarted")
    agent = _agent(tmp_path, "--max-restarts=1")
    assert agent.wait(timeout=300) == 0
    return tmp_path, _records(tmp_path / "records.jsonl")


@pytest.mark.processes
def test_every_start_and_restart_runs_the_script_as_python_would_with_torch_preloaded(
    restarted: tuple[Path, list[dict]],
) -> None:
    tmp_path, records = restarted
    starts = [r for r in records if "preloaded" in r]
    assert sorted((r["rank"], r["restart"]) for r in starts) == [
        ("0", 0),
        ("0", 1),
        ("1", 0),
        ("1", 1),
    ]
    script = str(tmp_path / "scripts" / "train.py")
    for start in starts:
        assert start["preloaded"], start  # the first start too: the forkserver is eager
        assert start["argv"] == [script, "a", "b"]
        assert start["path0"] == str(tmp_path / "scripts")
        assert (start["name"], start["unbuffered"]) == ("__main__", "1")
        assert start["stdout"] == "FileIO"  # python -u's: no buffer between print and fd 1
    # numpy's unseeded generator, imported into the forkserver, is each worker's own.
    assert len({start["draw"] for start in starts}) == len(starts)
    # Ended as an interpreter ends: its non-daemon threads joined, then atexit.
    assert all(r["main_kept"] for r in records if r.get("event") == "atexit")
    ends = [(r["rank"], r["event"]) for r in records if r.get("event")]
    assert sorted(ends) == [("0", "atexit"), ("0", "thread"), ("1", "atexit"), ("1", "thread")]
    for rank in ("0", "1"):
        assert ends.index((rank, "thread")) < ends.index((rank, "atexit"))


@pytest.mark.processes
def test_the_forkserver_is_forked_from_the_agent_not_started_as_a_second_interpreter(
    restarted: tuple[Path, list[dict]],
) -> None:
    """A second interpreter would import torch again: ``python -c 'from
    multiprocessing.forkserver import main; ...'``. Forked, it is the agent's command."""
    starts = [r for r in restarted[1] if "forked_by" in r]
    assert starts
    for start in starts:
        assert launcher.WARM_TORCHRUN_MODULE in start["forked_by"], start["forked_by"]


def test_an_agent_alone_in_its_process_forks_its_forkserver() -> None:
    assert _forkable(forkserver.ForkServer(), threads=1) == (sys.version_info < (3, 14))


def test_an_agent_running_another_thread_spawns_its_forkserver() -> None:
    """Forking a process while another of its threads runs could copy a lock held forever."""
    assert not _forkable(forkserver.ForkServer(), threads=2)


def test_a_forkserver_already_running_is_not_started_again() -> None:
    running = forkserver.ForkServer()
    running._forkserver_pid = os.getpid()  # type: ignore[attr-defined]
    assert not _forkable(running, threads=1)


@pytest.mark.processes
def test_sigterm_reaches_every_warm_worker_and_the_agent_exits_as_torchrun_does(
    tmp_path: Path,
) -> None:
    agent = _agent(tmp_path, WAIT_FOR_SIGTERM="1")
    records = tmp_path / "records.jsonl"
    deadline = time.monotonic() + 300
    while sum(r.get("event") == "waiting" for r in _records(records)) < 2:
        assert agent.poll() is None and time.monotonic() < deadline, _records(records)
        time.sleep(0.1)
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=120) == launcher.TORCHRUN_EXIT_AFTER_SIGTERM
    stopped = sorted(r["rank"] for r in _records(records) if r.get("event") == "sigterm")
    assert stopped == ["0", "1"]


def test_the_console_script_is_installed_beside_torchrun() -> None:
    """The replace-rank pods run it by name, as they ran torchrun."""
    assert shutil.which(launcher.WARM_TORCHRUN, path=os.path.dirname(sys.executable))


@pytest.mark.processes
def test_warm_imports_that_are_not_module_names_stop_the_agent_in_one_line(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never')\n")
    command = [sys.executable, "-m", launcher.WARM_TORCHRUN_MODULE, "--standalone"]
    command += ["--nproc-per-node=1", "--no-python", sys.executable, str(script)]
    env = {**os.environ, settings.WARM_IMPORTS.name: "torch; rm -rf /"}
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert settings.WARM_IMPORTS.name in done.stderr and "never" not in done.stdout
