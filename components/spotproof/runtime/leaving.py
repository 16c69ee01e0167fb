"""How a ``training()`` run leaves, and the exit code each way leaves behind.

The exit code is a contract with the Job that runs the trainer (``runtime.exit_codes``),
so every way out ends in exactly one of them, with an ``exit`` event that says which and
why (``runtime.events``):

- **completed**, 0, once the completed state is committed;
- **preempted**, 143: SIGTERM reached a rank, every rank stopped at the same step, and
  each saved its shard of it within what is left of the grace (or abandoned the save when
  the store is too slow for it, and said so). A rank stopped by a peer's notice has no
  grace of its own running; its save gets the pod's grace from the stop, since the
  signalled peer records its shard within its own or is killed and never does;
- **peer lost**, 3: a rank of the gang is gone without notice (a collective failed); there
  is nothing to save, since no step can commit without that rank's shard;
- **bad configuration**, 2, and **storage unavailable**, 1, with the one line that says why.

A rank that stopped because of a peer (its notice, or its loss) then waits to be torn down
before it leaves, so that the reclaimed rank's Job fails first (``runtime.checkpointer.gang``,
"Stopping because of a peer"); torn down it exits 143, left waiting ``PEER_WAIT_SECONDS``
it exits 3. A preempted process also waits, within its grace, for one last scrape of its
metrics (``runtime.metrics.endpoint``).

A rank blocked in a collective whose peer is gone (``runtime.liveness``) cannot take any
of these ways itself: its gang's watch thread finds the peer lost and, once the main thread
has had :data:`HANDOFF_SECONDS` to take a way out at its next agreement and has not, takes
the peer-lost way for it, from the watch thread. One thread leaves, whichever asks first;
the other waits for the exit.

One process leaves by ``SystemExit``, so the trainer's own code can clean up; a gang's rank
leaves with ``os._exit`` once everything it wrote is flushed: gloo's destructors abort the
process about one time in three with a pair to a vanished peer open, and the abort (134)
would hide the exit code the failure policy reads. So does a rank whose gang never
assembled: torch's store client, still retrying, would abort the finalizing interpreter.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Any, NoReturn, Protocol

import torch.distributed as dist

from spotproof.runtime import exit_codes, group, metrics, settings
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import CommitFailed, SaveCancelled
from spotproof.runtime.checkpointer.gang import await_teardown
from spotproof.runtime.events import Events
from spotproof.runtime.guard import FINAL_SAVE_MARGIN, PreemptionGuard
from spotproof.runtime.messages import redacted
from spotproof.runtime.run_settings import RunSettings
from spotproof.runtime.storage import StorageError

HANDOFF_SECONDS = 3.0
"""How long the watch thread leaves a lost peer to the main thread, which hears of it at
its next agreement, at most a step away, before it takes the way out itself."""


class LeavingRun(Protocol):
    """What leaving reads of the run it ends: ``runtime.loop.Training`` is one. Named here
    so that the ways out depend on the few things they touch, not on the loop that calls
    them (the loop imports this module)."""

    env: Mapping[str, str]
    settings: RunSettings
    step: int
    gang: group.Solo
    guard: PreemptionGuard
    events: Events

    def saver(self) -> AsyncCheckpointer: ...

    def views(self) -> dict[str, Any]: ...

    def metadata(self, final: bool) -> dict[str, Any]: ...


class Leaving:
    """The ways out of one run (a :class:`LeavingRun`: ``runtime.loop.Training``)."""

    def __init__(self, run: LeavingRun) -> None:
        self.run = run
        self.served: metrics.Served | None = None
        self._lock = threading.Lock()
        self._leaver: int | None = None
        """The thread taking the way out (its ident); None until one has."""
        self._taken = threading.Event()
        """Set once a thread has taken the way out."""

    def _leave_from_here(self) -> None:
        """Claim the way out for this thread; a thread that comes second waits for the
        first one's exit, which ends the process."""
        me = threading.get_ident()
        with self._lock:
            if self._leaver is None:
                self._leaver = me
                self._taken.set()
            first = self._leaver == me
        if not first:
            threading.Event().wait()

    def yield_to_another_leaver(self) -> None:
        """Wait for the exit if another thread has taken the way out (the watch thread,
        for a main thread that was blocked and has since raised what it raised)."""
        if self._taken.is_set():
            self._leave_from_here()

    def lost_while_blocked(self, reason: str) -> None:
        """Called from the gang's watch thread once a rank is known lost: leaves as a rank
        stopped by a peer, unless the main thread takes a way out within
        :data:`HANDOFF_SECONDS`."""
        watch = self.run.gang.watch
        if self._taken.wait(HANDOFF_SECONDS) or (watch is not None and watch.stopped):
            return  # the main thread is on its way out, or done with the gang
        self.run.gang.lost = True
        self._leave_from_here()
        # "watch": the main thread had not left within the handoff, blocked in a
        # collective whose peer is gone (or in a step longer than the handoff).
        self.run.events.emit("peer_lost", reason=redacted(reason), by="watch")
        self._stopped_by_peer(exit_codes.PEER_LOST)

    def events(self) -> Events:
        """The run's events, recorded as metrics where ``METRICS_PORT`` serves them."""
        run = self.run
        rank = settings.RANK.read(run.env)
        self.served = metrics.served(run.env, metrics.names.TRAINER)
        observe = None
        if self.served is not None:
            recorder = metrics.TrainerMetrics(
                self.served.registry, run.settings.interval, speaks_for_run=rank == 0
            )
            observe = recorder.observe
        return Events(run.env, rank=rank, observe=observe)

    @staticmethod
    def refuse(message: str) -> NoReturn:
        """A setting :func:`~spotproof.runtime.loop.training` cannot go on with: exit 2,
        said where the run's own events would go, or on stderr alone where even those
        settings are what is wrong."""
        try:
            events = Events(os.environ)
        except settings.ConfigError:
            events = Events({})
        events.emit("exit", code=exit_codes.BAD_CONFIG, reason=redacted(message))
        events.close()
        raise SystemExit(exit_codes.BAD_CONFIG)

    def is_peer_lost(self, error: BaseException | None) -> bool:
        """Whether ``error``, out of the trainer's step, means a rank of the gang is gone:
        ours, or a failed collective of the trainer's own model. torch raises those as
        ``DistError`` or, from gloo's transport (a peer's connection reset), as a plain
        ``RuntimeError`` out of ``torch.distributed`` (torch 2.13 ``distributed_c10d.py``
        around the C++ call): told apart from the trainer's own errors by where it was
        raised, so a bug in the model is still the crash it is."""
        if self.run.gang.world_size == 1 or error is None:
            return False
        if isinstance(error, group.PeerLost | dist.DistError):
            return True
        return isinstance(error, RuntimeError) and _raised_in_torch_distributed(error)

    def preempted_before_training(self) -> NoReturn:
        """SIGTERM while the gang assembled: nothing trained, nothing to save."""
        self._leave_from_here()
        self._said_preempted(0)
        self.exit(exit_codes.PREEMPTED)

    def peer_lost(self, error: BaseException | None) -> NoReturn:
        self._leave_from_here()
        self.run.gang.lost = True
        self.run.events.emit("peer_lost", reason=redacted(str(error)))
        self._stopped_by_peer(exit_codes.PEER_LOST)

    def preempted(self) -> NoReturn:
        """The final save of the step every rank stopped at, then 143."""
        self._leave_from_here()
        run = self.run
        step = run.step
        self._said_preempted(step)
        guard = run.guard
        left = guard.remaining() if guard.preempted else run.settings.grace_seconds
        try:
            saver = run.saver()
            result = saver.save_final(
                step,
                run.views,
                run.metadata(True),
                deadline_seconds=left - FINAL_SAVE_MARGIN,
            )
            if result.durable:
                grace_left = round(guard.remaining(), 4)
                took = {"seconds": round(run.settings.grace_seconds - grace_left, 4)}
                run.events.emit(
                    "final_save",
                    step=step,
                    outcome="committed",
                    grace_left=grace_left,
                    **(took if guard.preempted else {}),
                )
            else:
                run.events.emit("final_save", step=step, outcome="refused", reason=result.reason)
        except SaveCancelled as abandoned:
            run.events.emit(
                "checkpoint_refused", step=step, kind="final", reason=str(abandoned), late=True
            )
            run.events.emit("final_save", step=step, outcome="late", reason=str(abandoned))
        except CommitFailed as error:  # no answer: committed or not, the next start sees
            run.events.emit("final_save", step=step, outcome="unknown", reason=redacted(str(error)))
        except StorageError as error:
            run.events.emit("final_save", step=step, outcome="refused", reason=redacted(str(error)))
        except group.PeerLost as error:
            run.events.emit("final_save", step=step, outcome="refused", reason=str(error))
            run.gang.lost = True
        finally:  # a refused save's counts are the ones most worth reading
            if self.served is not None and guard.preempted:
                self.served.endpoint.await_scrape(metrics.last_scrape_budget(guard))
        run.gang.close()  # together: every rank's shard is recorded by now
        if guard.preempted:
            self.exit(exit_codes.PREEMPTED)
        self._stopped_by_peer(exit_codes.PREEMPTED)

    def completed(self) -> None:
        self._leave_from_here()
        self.run.events.emit("exit", code=exit_codes.COMPLETED)
        self.run.events.close()

    def exit(self, code: int, reason: str = "") -> NoReturn:
        """Leave with ``code``; ``reason`` (one line) says why where it is not the code's
        own meaning."""
        self._leave_from_here()
        # Not announced: a rank leaving alone is one its gang must find silent; one leaving
        # with its gang said so as the gang closed.
        self.run.gang.stop_watching(announce=False)
        fields: dict[str, Any] = {"code": code}
        if reason:
            fields["reason"] = redacted(reason)
        self.run.events.emit("exit", **fields)
        self.run.events.close()
        if threading.current_thread() is threading.main_thread():  # only it may
            self.run.guard.__exit__(None, None, None)
        if self.run.gang.world_size > 1 or group.rendezvous_pending():
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise SystemExit(code)

    def _said_preempted(self, step: int) -> None:
        guard = self.run.guard
        signal = guard.signal_received.name if guard.signal_received else "a peer's"
        grace_left = round(guard.remaining(), 3)
        self.run.events.emit("preempted", step=step, signal=signal, grace_left=grace_left)

    def _stopped_by_peer(self, code: int) -> NoReturn:
        """Wait to be torn down (SIGTERM), then leave with ``code``; ``PEER_LOST`` when no
        teardown comes."""
        run = self.run
        guard = run.guard
        if not guard.preempted:
            seconds = run.settings.peer_wait_seconds
            run.events.emit("awaiting_teardown", seconds=seconds)
            if not await_teardown(guard, seconds):
                self.exit(exit_codes.PEER_LOST)
        self.exit(code)


def _raised_in_torch_distributed(error: BaseException) -> bool:
    """Whether the innermost Python frame ``error`` passed through is torch.distributed's."""
    trace = error.__traceback__
    innermost = None
    while trace is not None:
        innermost, trace = trace.tb_frame, trace.tb_next
    filename = innermost.f_code.co_filename if innermost is not None else ""
    return f"{os.sep}torch{os.sep}distributed{os.sep}" in filename
