"""Turn SIGTERM into a checkpoint instead of lost work.

Kubernetes tells a pod its node is going away with SIGTERM, then SIGKILLs it when the grace
period ends (15 s for non-system pods on GKE spot nodes). :class:`PreemptionGuard` only
*records* the signal: the training loop finishes the step it is in, sees
:attr:`PreemptionGuard.preempted`, commits a final checkpoint within
:meth:`PreemptionGuard.remaining` seconds and exits with ``exit_codes.PREEMPTED``.

Doing the save in the signal handler itself would be wrong: the handler interrupts the
main thread anywhere, possibly halfway through an optimizer update, and would checkpoint a
state that never existed.

The handler takes no lock either. It runs in the main thread between two bytecodes, so a
lock the main thread holds at that moment is never released: ``threading.Event.set()``
there deadlocks when the signal lands while the main thread is inside the same event's
``wait()`` with its condition's lock re-acquired, which a gang rank sleeping a few
milliseconds between steps hit about one time in three when both ranks were signalled at
once ("Synchronization primitives such as threading.Lock should not be used within signal
handlers", https://docs.python.org/3/library/signal.html). It sets a flag and writes a
byte to a pipe (a write is async-signal-safe); :meth:`PreemptionGuard.wait` sleeps in
``select`` on the pipe's other end.

The same pipe is the interpreter's wake-up fd (``signal.set_wakeup_fd``), where CPython's
C-level handler writes the signal's number the moment it arrives, whatever the main thread
is doing. A main thread blocked in C++ (a collective whose peer is gone,
``runtime.liveness``) never gets to run a Python handler, so without it no other thread
could learn that the pod is being torn down. :meth:`wait` reads those numbers too. A
program that already uses the wake-up fd (an asyncio loop in the main thread) keeps it,
and the guard then sees signals through its handler alone.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


_LOOK_AGAIN = 0.25
"""Seconds a waiter sleeps at most before it looks at the flag again."""

FINAL_SAVE_MARGIN = 0.5
"""Seconds of the grace period kept back from the final save: to report and exit before
SIGKILL."""


_OURS: set[int] = set()
"""The write ends of the guards' pipes that are the wake-up fd now."""


def _not_in_a_child() -> None:
    """A forked child (a data loader's worker, a pool's) keeps the wake-up fd, so a SIGTERM
    sent to the child would land in the parent's pipe and read there as the parent's own
    preemption: the child starts without it."""
    if _OURS:
        with contextlib.suppress(ValueError):  # forked from a thread that is not main
            theirs = signal.set_wakeup_fd(-1)
            if theirs not in _OURS:
                signal.set_wakeup_fd(theirs)
        _OURS.clear()


os.register_at_fork(after_in_child=_not_in_a_child)


class PreemptionGuard:
    """Context manager that traps preemption signals for the duration of a training loop.

    ``grace_seconds`` is the budget from signal to SIGKILL (the pod's
    ``terminationGracePeriodSeconds``); :meth:`remaining` counts it down.
    """

    def __init__(self, grace_seconds: float, signals: Iterable[signal.Signals] = DEFAULT_SIGNALS):
        self.grace_seconds = grace_seconds
        self.signals = tuple(signals)
        self.signal_received: signal.Signals | None = None
        self.received_at: float | None = None
        self._signalled = False
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        os.set_blocking(self._wake_read, False)  # several threads may drain it
        self._previous: dict[signal.Signals, Any] = {}
        self._woken_by_interpreter = False

    def __enter__(self) -> PreemptionGuard:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        if threading.current_thread() is threading.main_thread():
            theirs = signal.set_wakeup_fd(self._wake_write, warn_on_full_buffer=False)
            if theirs != -1:  # the program's own (or an outer guard's): keep it
                signal.set_wakeup_fd(theirs)
            self._woken_by_interpreter = theirs == -1
            if self._woken_by_interpreter:
                _OURS.add(self._wake_write)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._woken_by_interpreter:
            signal.set_wakeup_fd(-1)
            _OURS.discard(self._wake_write)
            self._woken_by_interpreter = False

    def __del__(self) -> None:
        for descriptor in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(descriptor)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self._note(signum)
        with contextlib.suppress(OSError):  # full: a wake-up byte is already waiting
            os.write(self._wake_write, b"\0")

    def _note(self, signum: int) -> None:
        if self.received_at is None:  # the first signal starts the clock; repeats change nothing
            self.received_at = time.monotonic()
            self.signal_received = signal.Signals(signum)
        self._signalled = True

    @property
    def preempted(self) -> bool:
        return self._signalled

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a signal arrives (for loops that sleep between steps); True if one
        has, False when ``timeout`` passed first. Any thread may wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._signalled:
            left = _LOOK_AGAIN if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            # Bounded: another waiter may drain the byte this one was woken for.
            readable, _, _ = select.select([self._wake_read], [], [], min(left, _LOOK_AGAIN))
            if readable:
                self._drain()
        return True

    def _drain(self) -> None:
        """Read the pipe: the interpreter's bytes are signal numbers, the handler's zeros."""
        try:
            numbers = os.read(self._wake_read, 512)
        except BlockingIOError:  # another waiter drained it first
            return
        for signum in self.signals:
            if signum in numbers:
                self._note(signum)
                return

    def remaining(self) -> float:
        """Seconds of the grace period left; the full budget before any signal."""
        if self.received_at is None:
            return self.grace_seconds
        return max(0.0, self.grace_seconds - (time.monotonic() - self.received_at))
