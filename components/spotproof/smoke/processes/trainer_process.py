"""A trainer subprocess whose JSON-lines events can be awaited as they arrive: read from
its stdout (the reference trainer's), or from a file of its own (``SPOTPROOF_EVENTS``: a
user's trainer, whose stdout is its own output); and, for a trainer nothing paces, held
still (SIGSTOP) at the event the rehearsal wants to interrupt it at."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotproof.runtime import settings
from spotproof.runtime.python_program import PythonWorker, python_worker
from spotproof.smoke.processes.warm import ForkedTrainer, Zygote

Event = dict[str, Any]
TRAINER = "spotproof.smoke.train"
POLL_SECONDS = 0.02
"""How often an events file is read while nothing waits to hold the process..."""
HOLD_POLL_SECONDS = 0.002
"""...and while something does: a trainer of fast steps runs few of them past the event
before it is held."""
KEPT_OUTPUT_LINES = 2000
"""Lines of a process's output kept (the newest), for the lines shown when it fails."""


def _uuid1_without_libuuid() -> None:
    """Make this process's version-1 UUIDs in Python, not with libuuid.

    The harnesses freeze trainers and workers with SIGSTOP to aim their kills. Where
    uuid-runtime is installed (common on desktop Linux; Debian's libuuid1 recommends it),
    libuuid's time-based generator, which Python's ``uuid.uuid1`` calls and the Azure SDKs
    call for every request's id, serialises all callers with ``flock`` on
    ``/var/lib/libuuid/clock.txt``. A process frozen inside that call holds the lock, and
    every other ``uuid1`` on the machine waits: the harness's own look at the bucket hung
    until the test's timeout. CPython falls back to its own generator when
    ``uuid._generate_time_safe`` is None (``uuid.uuid1``)."""
    if getattr(uuid, "_generate_time_safe", None) is not None:
        uuid._generate_time_safe = None  # type: ignore[attr-defined]


_uuid1_without_libuuid()


@dataclass
class TrainerProcess:
    """``python -m <module>`` (the trainer by default), or ``argv`` (the trainer as a pod
    would start it: through torchrun, say), with ``env``; times are seconds since
    ``origin``. Like a container, it is the whole tree of processes it starts: a SIGTERM
    goes to its first process alone, as the kubelet sends it to PID 1, and a SIGKILL takes
    every descendant too, as when the node vanishes."""

    env: Mapping[str, str]
    origin: float
    index: int = 0
    events: list[tuple[float, Event]] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    """Its lines on stderr (with an :attr:`events_file`, its stdout's too), the newest kept."""
    module: str = TRAINER
    argv: Sequence[str] | None = None
    on_event: Callable[[Event], None] | None = None
    """Called with each event as it is read (the rehearsal's metrics), in the reader's
    thread."""
    on_end: Callable[[], None] | None = None
    """Called once its output has ended: the process is gone (its metrics with it)."""
    zygote: Zygote | None = None
    """Where the trainer is forked from, warm (``smoke.processes.warm``): the reference
    trainer, or an ``argv`` that is this interpreter running a script or a module (a user's
    ``python train.py``); None starts it afresh, as does any other ``argv``."""
    events_file: Path | None = None
    """Where the process appends its events (``SPOTPROOF_EVENTS`` is set to it); None: its
    stdout. With a file, :attr:`stderr` holds its stdout and stderr together: its output."""
    pause_on: Callable[[Event], bool] | None = None
    """Hold the process (:meth:`run_until`) at the first event that matches this."""
    held_below: Callable[[int], bool] | None = None
    """Hold only what runs below the processes of its tree this matches (by PID): a pod's
    torchrun agent, whose keep-alives its gang's other agents watch (an agent held for
    three seconds looks to them like a vanished node). None: hold every process."""
    held: bool = False
    """Whether the process is stopped (SIGSTOP) where an event held it."""

    def __post_init__(self) -> None:
        self._changed = threading.Condition()
        self._tree: list[int] = []
        self.started = self.now()
        self.popen: subprocess.Popen[str] | ForkedTrainer
        env = dict(self.env)
        if self.events_file is not None:
            self.events_file.touch()
            self._events_in = self.events_file.open("rb")
            self._partial = b""
            env[settings.SPOTPROOF_EVENTS.name] = str(self.events_file)
        program = self._warm_program(env)
        if self.zygote is not None and self.argv is None and self.module == TRAINER:
            self.popen = self.zygote.spawn({**os.environ, **env})
        elif self.zygote is not None and program is not None:
            self.popen = self.zygote.spawn(
                {**os.environ, **env}, program, merge_output=self.events_file is not None
            )
        else:
            self.popen = subprocess.Popen(
                list(self.argv) if self.argv else [sys.executable, "-m", self.module],
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if self.events_file else subprocess.PIPE,
                text=True,
            )
        events, output = (
            (self._tail_events, self.popen.stdout)
            if self.events_file is not None
            else (self._read_events, self.popen.stderr)
        )
        self._readers = [
            threading.Thread(target=events, daemon=True),
            threading.Thread(target=self._read_output, args=(output,), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def now(self) -> float:
        return time.monotonic() - self.origin

    def _warm_program(self, env: Mapping[str, str]) -> PythonWorker | None:
        """The Python program :attr:`argv` runs, where the zygote can run it as a fresh
        ``python`` would: this interpreter running a script that exists, or a module
        (``runtime.python_program.python_worker``); None when it must start as it is (a
        missing script then fails as ``python`` fails it)."""
        if self.zygote is None or not self.argv:
            return None
        path = env.get("PATH", os.environ.get("PATH"))
        program = python_worker(self.argv[0], self.argv[1:], path=path)
        if program is None or not (program.module or os.path.isfile(program.target)):
            return None
        return program

    def _read_events(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._take(line)
        self._ended()

    def _tail_events(self) -> None:
        """Read the events file as the process appends to it, until the process is gone."""
        while True:
            gone = self.popen.poll() is not None
            self.drain()
            if gone:
                break
            time.sleep(POLL_SECONDS if self.pause_on is None else HOLD_POLL_SECONDS)
        self._ended()

    def drain(self) -> None:
        """Take every whole line appended to the events file since the last read."""
        with self._changed:
            if self._events_in.closed:
                return
            chunk = self._events_in.read()
            if not chunk:
                return
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for line in lines:
                self._take(line)

    def _take(self, line: str | bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:  # not JSON, or not even text: output, not an event
            return
        if not isinstance(event, dict) or "event" not in event:
            return
        if self.on_event is not None:
            self.on_event(event)
        with self._changed:
            if self.pause_on is not None and self.pause_on(event):
                self.pause_on = None
                self._hold()
            self.events.append((self.now(), event))
            self._changed.notify_all()

    def _ended(self) -> None:
        if self.events_file is not None:
            with self._changed:
                self._events_in.close()
        if self.on_end is not None:
            self.on_end()
        with self._changed:
            self._changed.notify_all()

    def _read_output(self, stream: Any) -> None:
        for line in stream:
            self.stderr.append(line.rstrip())
            if len(self.stderr) > 2 * KEPT_OUTPUT_LINES:
                del self.stderr[:KEPT_OUTPUT_LINES]

    # --- holding a trainer nothing paces ----------------------------------------------

    def run_until(self, match: Callable[[Event], bool], timeout: float = 120) -> Event | None:
        """Let the process run (again) until an event matches, and hold it there: every
        process of it stopped, as soon as the event is read. A user's trainer may train a
        hundred steps in a second; held, it is interrupted where the rehearsal placed the
        interruption, on a loaded machine as on an idle one. Returns the event (the process
        held), or None if the process ended first."""
        with self._changed:  # the reader holds the process under this lock too
            if not self.hold_at(match):
                self.release()
        return self.wait_for(match, timeout)

    def hold_at(self, match: Callable[[Event], bool]) -> bool:
        """Hold the process at the first event that matches, from now on, without letting
        it go if it is held; True when one already has (it is held at once). Needs an
        :attr:`events_file`, which is read as soon as it is written to, not a pipe read
        whenever its reader gets to it."""
        assert self.events_file is not None, "only a process with an events file is held"
        with self._changed:
            if any(match(e) for _, e in self.events):
                self._hold()
                return True
            self.pause_on = match
            return False

    def _hold(self) -> None:
        """SIGSTOP to the first process, then to every process below it; or, with
        :attr:`held_below`, to every process below the ones it matches."""
        if self.held or self.popen.poll() is not None:
            return
        if self.held_below is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGSTOP)
            self._tree = descendants(self.popen.pid)
        else:
            tree = [self.popen.pid, *descendants(self.popen.pid)]
            above = [pid for pid in tree if self.held_below(pid)]
            self._tree = [pid for parent in above for pid in descendants(parent)]
        for pid in self._tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        self.held = True

    def release(self) -> None:
        """Let a held process run on (SIGCONT to every process it was held with)."""
        if not self.held:
            return
        self.held = False
        for pid in [*self._tree, self.popen.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def wait_for(self, match: Callable[[Event], bool], timeout: float = 120) -> Event | None:
        """The first event (past or future) that matches; None if the process ends first."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for _, event in self.events[seen:]:
                    if match(event):
                        return event
                seen = len(self.events)
                if self.popen.poll() is not None and not self._readers[0].is_alive():
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"trainer {self.index}: no matching event in {timeout:.0f} s"
                    )
                self._changed.wait(min(remaining, 0.2))

    def first(self, name: str) -> Event | None:
        return next((e for _, e in self.events if e.get("event") == name), None)

    def of(self, name: str) -> list[Event]:
        return [e for _, e in self.events if e.get("event") == name]

    @property
    def last_step(self) -> int:
        steps = [e["step"] for _, e in self.events if e.get("event") in ("step", "resumed")]
        return max(steps, default=0)

    def last_seen(self, since: float) -> str:
        """This process's last event and stderr line, timed from ``since`` (seconds since
        ``origin``): one line saying what it was doing when it was last heard from."""
        if not self.events:
            said = "no event"
        else:
            at, event = self.events[-1]
            fields = " ".join(f"{k}={v}" for k, v in event.items() if k != "event")
            said = f"{event.get('event')} ({fields}) at {at - since:+.2f} s"
        stderr = f", stderr: {self.stderr[-1]}" if self.stderr else ""
        return f"trainer {self.index} last said {said}{stderr}"

    def send(self, signum: signal.Signals) -> None:
        """``signum`` to the first process (SIGKILL: to every process). A held process
        is let go after it, as a pod that receives a signal runs to handle it."""
        if self.popen.poll() is not None:
            return
        if signum != signal.SIGKILL:
            self.popen.send_signal(signum)
            if signum not in (signal.SIGSTOP, signal.SIGCONT):
                self.release()
            return
        # Found before the first process dies (its orphans are then re-parented), killed
        # after it: the first process must not outlive a child it waits for, or a launch
        # script reports the child's death (exit 137) instead of dying with it (-9).
        below = descendants(self.popen.pid)
        self.popen.send_signal(signum)
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def finish(self, timeout: float | None = None) -> int | None:
        """Wait for exit; None if still running after ``timeout``."""
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        for reader in self._readers:
            reader.join(5)
        self.ended = self.now()
        return code

    ended: float | None = None


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first), from ``/proc``: what a container's
    cgroup holds besides its first process, sessions of their own included."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        children = [c for p in frontier for c in parents.get(p, [])]
        found += children
        frontier = children
    return found


def runs_module(pid: int, module: str) -> bool:
    """Whether process ``pid`` is ``python -m module ...``: its own program, not a process
    (a shell, a launch script) that merely has those words among its arguments."""
    with contextlib.suppress(OSError):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return argv[1:3] == [b"-m", module.encode()]
    return False


def container_exit_code(returncode: int | None) -> int | None:
    """What the container runtime reports: 128 + N for a process killed by signal N."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode
