"""The runtime in one loop: resume, save every interval, save and leave on a reclaim.

::

    from spotproof import training

    with training(model=model, optimizer=optimizer, scheduler=scheduler) as run:
        for step in run.steps(total_steps):
            train_one_step(step)

What it does, with the same guarantees as the pieces it is made of:

- **Resume.** On entering, the newest checkpoint under ``CHECKPOINT_URL`` whose every part
  verifies and whose state loads into the objects given is restored into them, read
  straight into the model's and optimizer's tensors (``runtime.checkpointer.in_place``;
  one that does not fit, or whose part fails verification, is skipped for the one before
  it, which overwrites all of it). Without a checkpoint training starts at step 0; when
  checkpoints exist and none restores, one refused (another run's URL) or failed after
  it began loading, it exits 2, since the objects given may hold part of a state and
  cannot be built again from here. ``run.step`` is where it resumed. One process: a
  gang's ranks use ``GangCheckpointStore``.
- **Save.** Every ``CHECKPOINT_INTERVAL`` steps the state of every object given (anything
  with ``state_dict()`` and ``load_state_dict()``: a model, an optimizer, a scheduler, a
  stateful data loader), the RNG states and the step are copied into one reused buffer
  and uploaded in the background (``AsyncCheckpointer``); a checkpoint counts once its
  manifest commits. The final save, once training has stopped, uploads from the tensors
  themselves, without that copy (``StateBuffer.views``).
- **Leave on a reclaim.** SIGTERM (the kubelet's, on a spot reclaim or a drain) ends the
  loop at the next step boundary: the final checkpoint is saved within what is left of
  ``GRACE_SECONDS`` (abandoned, not cut off mid-upload, when the store is too slow: the
  checkpoint before it stays the newest), and the process exits 143, which the Job's
  ``podFailurePolicy`` retries without counting a failure. The completed state is saved
  too, so a rerun of a finished Job finishes at once.
- **Metrics.** Where ``METRICS_PORT`` is set, the run serves Prometheus metrics there
  (``runtime.metrics``: saves, restores, the reclaim and its final save, the step) and,
  leaving on a reclaim, waits within the grace for one more scrape.
- **Bad settings** exit 2 (``BAD_CONFIG``: the Job fails at once) and a store that cannot
  be reached exits 1 (``STORAGE_UNAVAILABLE``: retried), each with one line on stderr.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, NoReturn, Protocol

import torch

from spotproof.runtime import exit_codes, launcher, metrics, settings
from spotproof.runtime.checkpointer import in_place, torch_state
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import (
    Checkpoint,
    CheckpointStore,
    ReadsInPlace,
    RestoreError,
    SaveCancelled,
    SaveResult,
)
from spotproof.runtime.guard import FINAL_SAVE_MARGIN, PreemptionGuard
from spotproof.runtime.messages import redacted
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage import StorageError, StorageURLError


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> Any: ...


class Training:
    """One training run's checkpoints; made by :func:`training`."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        others: Mapping[str, Stateful],
        *,
        url: str,
        interval: int,
        grace_seconds: float,
    ) -> None:
        self.model, self.optimizer, self.others = model, optimizer, dict(others)
        self.url, self.interval, self.grace_seconds = url, interval, grace_seconds
        self.step = 0
        """The step training resumes at (0 without a checkpoint), then the steps done."""
        self.resumed_from: int | None = None
        """The step of the checkpoint restored on entering; None when there was none."""
        self._buffer = torch_state.StateBuffer()
        self._guard = PreemptionGuard(grace_seconds)
        self._store: CheckpointStore | None = None
        self._saver: AsyncCheckpointer | None = None
        self._refused: list[str] = []
        """Why each checkpoint that verified did not restore, newest first."""
        self._touched = False
        """Whether a restore began writing into the objects given (``in_place``)."""
        self._served: metrics.Served | None = None
        self._recorder: metrics.TrainerMetrics | None = None
        self._resumed: dict[str, Any] = {}

    def __enter__(self) -> Training:
        # The handler first: a SIGTERM while the checkpoint downloads still ends in an
        # orderly exit 143 at the first step boundary.
        self._guard.__enter__()
        try:
            self._serve_metrics()
            self._store = CheckpointStore(self.url)
            started = time.perf_counter()
            latest = self._store.load_latest(restore=ReadsInPlace(self._restore))
        except (StorageURLError, ConfigError) as error:
            self._guard.__exit__(None, None, None)
            _leave(exit_codes.BAD_CONFIG, str(error))
        except StorageError as error:
            self._guard.__exit__(None, None, None)
            _leave(exit_codes.STORAGE_UNAVAILABLE, str(error))
        if latest is None and (self._refused or self._touched):
            # A failed restore may have loaded part of its state: training on from it
            # would be training from a checkpoint that was never whole.
            self._guard.__exit__(None, None, None)
            why = self._refused[-1] if self._refused else "one failed verification half-loaded"
            _leave(
                exit_codes.BAD_CONFIG,
                f"no checkpoint under the CHECKPOINT_URL fits these objects ({why}); "
                "allowed: the URL of this run's checkpoints, or a new one",
            )
        if latest is not None:
            self.step = self.resumed_from = latest.step
            self._resumed["restore_seconds"] = time.perf_counter() - started
        self._observe("resumed", step=self.step, **self._resumed)
        self._saver = AsyncCheckpointer(self._store, on_done=self._saved)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            if self._saver is not None and kind is None:
                self._saver.wait()
        finally:
            self._guard.__exit__(kind, error, trace)

    @property
    def preempted(self) -> bool:
        """Whether SIGTERM has arrived."""
        return self._guard.preempted

    def steps(self, total: int) -> Iterator[int]:
        """The steps still to train, from :attr:`step` to ``total``: saves every interval
        after a step, and on SIGTERM saves the final checkpoint and exits 143."""
        while self.step < total:
            if self.preempted:
                self._leave_preempted()
            yield self.step
            self.step += 1
            self._observe("step", step=self.step)
            if not self._buffer.ready:  # the optimizer has state now: size the buffer once
                self._buffer.prepare(self.model, self.optimizer, **self._extra())
            if self.preempted:
                self._leave_preempted()
            if self.step % self.interval == 0 and self.step < total:
                metadata = metrics.save_metadata("periodic")
                self._saver_ready().save_async(self.step, self._capture, metadata)
        self._saver_ready().save_final(self.step, self._views, metrics.save_metadata("final"))

    def _capture(self) -> dict[str, bytes | memoryview]:
        return self._buffer.capture(self.model, self.optimizer, self.step, **self._extra())

    def _views(self) -> dict[str, Any]:
        """The final save's blobs: training has stopped, so the tensors are uploaded from
        their own memory (a copy is needed only off the CPU)."""
        return self._buffer.views(self.model, self.optimizer, self.step, **self._extra())

    def _extra(self) -> dict[str, Any]:
        return {name: state.state_dict() for name, state in self.others.items()}

    def _restore(self, checkpoint: Checkpoint) -> None:
        try:
            pending = in_place.InPlaceLoad(self.model, self.optimizer, checkpoint)
            saved = pending.extra
            missing = sorted(set(self.others) - set(saved))
            if missing:
                raise RestoreError(f"the checkpoint holds no state for {', '.join(missing)}")
            self._touched = True
            pending.load()
            self._resumed = metrics.resumed_fields({}, checkpoint.metadata)
            self._resumed["bytes"] = checkpoint.nbytes
            for name, stateful in self.others.items():
                try:
                    stateful.load_state_dict(saved[name])
                except (RuntimeError, TypeError, ValueError, KeyError) as error:
                    raise RestoreError(f"the state does not fit {name}: {error}") from None
        except RestoreError as refused:
            self._refused.append(str(refused))
            raise

    def _leave_preempted(self) -> NoReturn:
        deadline = self._guard.remaining() - FINAL_SAVE_MARGIN
        signal = self._guard.signal_received
        self._observe("preempted", step=self.step, signal=signal.name if signal else "SIGTERM")
        try:
            result = self._saver_ready().save_final(
                self.step, self._views, metrics.save_metadata("final"), deadline_seconds=deadline
            )
            if result.durable:
                grace_left = self._guard.remaining()
                self._observe(
                    "final_save", step=self.step, outcome="committed", grace_left=grace_left
                )
            else:
                self._observe("final_save", step=self.step, outcome="refused")
        except SaveCancelled as abandoned:
            self._observe("final_save", step=self.step, outcome="late")
            print(f"spotproof: final checkpoint abandoned: {abandoned}", file=sys.stderr)
        except StorageError:
            self._observe("final_save", step=self.step, outcome="refused")
            raise
        finally:  # a refused save's counts are the ones most worth reading
            if self._served is not None:
                self._served.endpoint.await_scrape(metrics.last_scrape_budget(self._guard))
        raise SystemExit(exit_codes.PREEMPTED)

    def _serve_metrics(self) -> None:
        self._served = metrics.served(os.environ, metrics.names.TRAINER)
        if self._served is not None:
            self._recorder = metrics.TrainerMetrics(self._served.registry, self.interval)

    def _observe(self, event: str, **fields: Any) -> None:
        if self._recorder is not None:
            self._recorder.observe({"event": event, **fields})

    def _saved(self, result: SaveResult, kind: str) -> None:
        if not result.committed:
            self._observe("checkpoint_refused", step=result.step, kind=kind)
            return
        self._observe(
            "checkpoint",
            step=result.step,
            kind=kind,
            seconds=result.seconds,
            bytes=result.bytes,
            blocked_seconds=result.blocked_seconds,
        )

    def _saver_ready(self) -> AsyncCheckpointer:
        if self._saver is None:
            raise RuntimeError("use training(...) as a context manager: with training(...) as run")
        return self._saver


def training(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    url: str | None = None,
    interval: int | None = None,
    grace_seconds: float | None = None,
    **others: Stateful,
) -> Training:
    """Checkpointed training of ``model`` and ``optimizer`` and any other ``Stateful``
    given by name (``scheduler=...``, ``data=...``).

    Settings not given are read from the environment the Job sets: ``CHECKPOINT_URL``,
    ``CHECKPOINT_INTERVAL`` and ``GRACE_SECONDS`` (``spotproof.runtime.settings`` gives
    each one's meaning, range and default). A bad one exits 2 in one line."""
    try:
        env = os.environ
        resolved = {
            "url": url or settings.CHECKPOINT_URL.read(env),
            "interval": interval
            if interval is not None
            else settings.CHECKPOINT_INTERVAL.read(env),
            # Under torchrun the agent, not the pod, may end the grace first.
            "grace_seconds": launcher.worker_grace(
                grace_seconds if grace_seconds is not None else settings.GRACE_SECONDS.read(env),
                env,
            ),
        }
        if settings.WORLD_SIZE.read(env) > 1:
            raise ConfigError(
                "WORLD_SIZE > 1: training() checkpoints one process; a gang's ranks each "
                "save their shard with spotproof.runtime.checkpointer.gang.GangCheckpointStore"
            )
    except ConfigError as error:
        _leave(exit_codes.BAD_CONFIG, str(error))
    if not isinstance(resolved["interval"], int) or resolved["interval"] < 1:
        raise ValueError(f"interval={resolved['interval']!r}: allowed: a whole number >= 1")
    return Training(model, optimizer, others, **resolved)


def _leave(code: int, message: str) -> NoReturn:
    print(f"spotproof: {redacted(message)}", file=sys.stderr)
    raise SystemExit(code)
