"""A trainer subprocess whose JSON-lines events can be awaited as they arrive."""

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

from spotproof.smoke.warm import ForkedTrainer, Zygote

Event = dict[str, Any]
TRAINER = "spotproof.smoke.train"


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
    module: str = TRAINER
    argv: Sequence[str] | None = None
    on_event: Callable[[Event], None] | None = None
    """Called with each event as it is read (the rehearsal's metrics), in the reader's
    thread."""
    on_end: Callable[[], None] | None = None
    """Called once its output has ended: the process is gone (its metrics with it)."""
    zygote: Zygote | None = None
    """Where the trainer is forked from, warm (``smoke.warm``); None starts it afresh, as
    does an ``argv``."""

    def __post_init__(self) -> None:
        self._changed = threading.Condition()
        self.started = self.now()
        self.popen: subprocess.Popen[str] | ForkedTrainer
        if self.zygote is not None and self.argv is None and self.module == TRAINER:
            self.popen = self.zygote.spawn({**os.environ, **self.env})
        else:
            self.popen = subprocess.Popen(
                list(self.argv) if self.argv else [sys.executable, "-m", self.module],
                env={**os.environ, **self.env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        self._readers = [
            threading.Thread(target=self._read_events, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def now(self) -> float:
        return time.monotonic() - self.origin

    def _read_events(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if self.on_event is not None:
                self.on_event(event)
            with self._changed:
                self.events.append((self.now(), event))
                self._changed.notify_all()
        if self.on_end is not None:
            self.on_end()
        with self._changed:
            self._changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr.append(line.rstrip())

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
        if self.popen.poll() is not None:
            return
        if signum != signal.SIGKILL:
            self.popen.send_signal(signum)
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


def container_exit_code(returncode: int | None) -> int | None:
    """What the container runtime reports: 128 + N for a process killed by signal N."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode
