"""PreemptionGuard: SIGTERM is recorded, the step in flight finishes, the budget counts down."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from spotproof.runtime.guard import PreemptionGuard

pytestmark = pytest.mark.processes

LOOP = textwrap.dedent(
    """
    import sys, time
    from spotproof.runtime.guard import PreemptionGuard
    with PreemptionGuard(grace_seconds=5) as guard:
        step = 0
        print("ready", flush=True)
        while not guard.preempted:
            print(f"begin {step}", flush=True)
            time.sleep(0.3)  # a training step that must not be cut in half
            print(f"end {step}", flush=True)
            step += 1
        print(f"saving after step {step - 1} with {guard.remaining():.1f}s left", flush=True)
    sys.exit(143)
    """
)


def test_sigterm_mid_step_lets_the_step_finish_before_saving() -> None:
    process = subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines = [process.stdout.readline().strip() for _ in range(3)]  # ready, begin 0, end 0
    assert lines == ["ready", "begin 0", "end 0"]
    assert process.stdout.readline().strip() == "begin 1"
    process.send_signal(signal.SIGTERM)
    rest = process.stdout.read().split("\n")
    assert process.wait(10) == 143
    assert rest[0] == "end 1"
    assert rest[1].startswith("saving after step 1 with 4.")


def test_remaining_counts_down_from_the_first_signal_only() -> None:
    with PreemptionGuard(grace_seconds=2, signals=[signal.SIGUSR1]) as guard:
        assert guard.remaining() == 2 and not guard.preempted
        signal.raise_signal(signal.SIGUSR1)
        first = guard.received_at
        time.sleep(0.2)
        signal.raise_signal(signal.SIGUSR1)
        assert guard.preempted and guard.received_at == first
        assert 1.5 < guard.remaining() < 1.85


def test_previous_handlers_are_restored_on_exit() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    with PreemptionGuard(grace_seconds=1, signals=[signal.SIGUSR2]):
        assert signal.getsignal(signal.SIGUSR2) != before
    assert signal.getsignal(signal.SIGUSR2) == before


def test_wait_returns_as_soon_as_a_signal_arrives() -> None:
    with PreemptionGuard(grace_seconds=1, signals=[signal.SIGUSR1]) as guard:
        assert guard.wait(0.01) is False
        signal.raise_signal(signal.SIGUSR1)
        assert guard.wait(5) is True


_SIGNALLED_WHILE_WAITING = """
import os, signal, threading, time
from spotproof.runtime.guard import PreemptionGuard

with PreemptionGuard(grace_seconds=5, signals=[signal.SIGUSR1]) as guard:
    finished = threading.Event()

    def pester():
        while not finished.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.0002)

    thread = threading.Thread(target=pester)
    thread.start()
    stop = time.monotonic() + 2
    while time.monotonic() < stop:
        guard.wait(0.0001)  # as a trainer sleeps between steps
    finished.set()
    thread.join()
print("done", guard.preempted)
"""


def test_signals_landing_while_the_trainer_waits_between_steps_never_hang_it() -> None:
    """The handler takes no lock: one the main thread held when the signal landed would
    never be released. With threading.Event.set() in the handler this run broke within a
    fraction of a second (a hang, or an error out of Event.wait that killed the process)."""
    done = subprocess.run(
        [sys.executable, "-c", _SIGNALLED_WHILE_WAITING],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "done True\n"), done.stderr
