"""Turn SIGTERM into a checkpoint instead of lost work.

Kubernetes tells a pod its node is going away with SIGTERM, then SIGKILLs it when the grace
period ends (15 s for non-system pods on GKE spot nodes). :class:`PreemptionGuard` only
*records* the signal: the training loop finishes the step it is in, sees
:attr:`PreemptionGuard.preempted`, commits a final checkpoint within
:meth:`PreemptionGuard.remaining` seconds and exits with ``exit_codes.PREEMPTED``.

Doing the save in the signal handler itself would be wrong: the handler interrupts the
main thread anywhere, possibly halfway through an optimizer update, and would checkpoint a
state that never existed.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


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
        self._event = threading.Event()
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> PreemptionGuard:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
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

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received_at is None:  # the first signal starts the clock; repeats change nothing
            self.received_at = time.monotonic()
            self.signal_received = signal.Signals(signum)
        self._event.set()

    @property
    def preempted(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a signal arrives (for loops that sleep between steps)."""
        return self._event.wait(timeout)

    def remaining(self) -> float:
        """Seconds of the grace period left; the full budget before any signal."""
        if self.received_at is None:
            return self.grace_seconds
        return max(0.0, self.grace_seconds - (time.monotonic() - self.received_at))
