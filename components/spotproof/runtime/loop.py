"""The runtime in one loop, for one process or one rank of a gang: resume, save every
interval, save and leave on a reclaim.

::

    from spotproof import training

    with training(model=model, optimizer=optimizer, scheduler=scheduler) as run:
        for step in run.steps(total_steps):
            train_one_step(step)

What it does, with the same guarantees as the pieces it is made of:

- **One rank or a gang.** Alone, or as rank ``RANK`` of ``WORLD_SIZE`` processes (as
  torchrun or a JobSet's pod sets them; ``runtime.group`` says how it joins them). In a
  gang each rank hands over the state it holds (its shard, or its replica) and saves that;
  the step is committed once every rank's shard is (``runtime.checkpointer.gang``). With
  ``MEMORY_TIER_DIR`` a gang saves to the node's memory and a peer's first
  (``runtime.checkpointer.tiers``).
- **Resume.** On entering, the newest checkpoint under ``CHECKPOINT_URL`` whose every part
  verifies and whose state loads into the objects given is restored into them, straight
  into the model's and optimizer's tensors (``runtime.checkpointer.in_place``; one that
  does not fit, or whose part fails verification, is skipped for the one before it, which
  overwrites all of it); a gang's ranks agree on the newest step every rank can restore.
  Without a checkpoint training starts at step 0; when checkpoints exist and none restores,
  one refused (another run's URL, another ``identity``) or failed after it began loading,
  it exits 2, since the objects given may hold part of a state and cannot be built again
  from here. ``run.step`` is where it resumed.
- **Save.** Every ``CHECKPOINT_INTERVAL`` steps the state of every object given (anything
  with ``state_dict()`` and ``load_state_dict()``: a model, an optimizer, a scheduler, a
  stateful data loader), the RNG states and the step are copied into one reused buffer
  and uploaded in the background (``AsyncCheckpointer``); a checkpoint counts once its
  manifest commits. The final save, once training has stopped, uploads from the tensors
  themselves, without that copy (``StateBuffer.views``).
- **Leave on a reclaim.** SIGTERM (the kubelet's, on a spot reclaim or a drain) ends the
  loop at the next step boundary, on every rank of a gang at the same step: the final
  checkpoint is saved within what is left of ``GRACE_SECONDS`` (abandoned, not cut off
  mid-upload, when the store is too slow: the checkpoint before it stays the newest) and
  the process exits 143, which the Job's ``podFailurePolicy`` retries without counting a
  failure. A gang's rank stopped by a peer, or left by one that is gone, waits to be torn
  down first (``runtime.checkpointer.gang``, "Stopping because of a peer"); one whose peer
  dies in the middle of a save learns it within a second, since the ranks wait for a save
  in flight together. The completed
  state is saved too, so a rerun of a finished Job finishes at once.
- **Telling.** Every event goes to the metrics, to stderr in a line a person reads, and to
  a program where ``SPOTPROOF_EVENTS`` asks (``runtime.events``).
- **Bad settings** exit 2 (``BAD_CONFIG``: the Job fails at once) and a store that cannot
  be reached exits 1 (``STORAGE_UNAVAILABLE``: retried), each with one line on stderr.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Protocol

import torch

from spotproof.runtime import exit_codes, group, metrics, settings
from spotproof.runtime.checkpointer import fingerprint, in_place, torch_state
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import (
    Checkpoint,
    CheckpointStore,
    ReadsInPlace,
    RestoreError,
    SaveResult,
)
from spotproof.runtime.checkpointer.manifest import GangMismatch
from spotproof.runtime.checkpointer.tiers import BUCKET, HeldResult
from spotproof.runtime.events import Events
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.leaving import Leaving
from spotproof.runtime.messages import redacted
from spotproof.runtime.run_settings import RunSettings
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage import StorageError, StorageURLError

SETTLE_POLL_SECONDS = 1.0
"""How long a gang's rank waits on its save in flight between asking the others about
theirs: how late, at most, it learns that a peer died mid-save."""


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
        run: RunSettings,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.model, self.optimizer, self.others = model, optimizer, dict(others)
        self.settings = run
        self.env = os.environ if env is None else env
        self.step = 0
        """The step training resumes at (0 without a checkpoint), then the steps done."""
        self.resumed_from: int | None = None
        """The step of the checkpoint restored on entering; None when there was none."""
        self.gang: group.Solo = group.Solo()
        self._buffer = torch_state.StateBuffer()
        self.guard = PreemptionGuard(run.grace_seconds)
        self._store: CheckpointStore | None = None
        self._saver: AsyncCheckpointer | None = None
        self._refused: list[str] = []
        """Why each checkpoint that verified did not restore, newest first."""
        self._touched = False
        """Whether a restore began writing into the objects given (``in_place``)."""
        self._resumed: dict[str, Any] = {}
        # Until __enter__ knows where events go, stderr alone says why a start failed.
        log = {settings.SPOTPROOF_LOG.name: settings.SPOTPROOF_LOG.read(self.env)}
        self.events = Events(log, rank=settings.RANK.read(self.env))
        self._leaving = Leaving(self)

    # --- entering: join, resume -------------------------------------------------------------

    def __enter__(self) -> Training:
        # The handler first: a SIGTERM while the gang assembles or the checkpoint downloads
        # still ends in an orderly exit 143.
        self.guard.__enter__()
        leaving = self._leaving
        try:
            self.events = leaving.events()
            self.gang = group.join(self.env, self.guard)
            if self.gang.watch is not None:
                self.gang.watch.start(leaving.lost_while_blocked)
            started = time.perf_counter()
            self.events.emit("restoring", rank=self.gang.rank)
            self._store = self.gang.store(
                self.settings.url, keep=self.settings.keep, part_bytes=self.settings.part_bytes
            )
            latest = self.gang.latest(self._store, self._skipped, ReadsInPlace(self._restore))
        except group.RendezvousInterrupted:
            leaving.preempted_before_training()
        except group.PeerLost as error:
            leaving.peer_lost(error)
        except (StorageURLError, ConfigError, GangMismatch) as error:
            leaving.exit(exit_codes.BAD_CONFIG, str(error))
        except StorageError as error:
            leaving.exit(exit_codes.STORAGE_UNAVAILABLE, str(error))
        if latest is None and (self._refused or self._touched):
            # A failed restore may have loaded part of its state: training on from it
            # would be training from a checkpoint that was never whole.
            why = self._refused[-1] if self._refused else "one failed verification half-loaded"
            leaving.exit(
                exit_codes.BAD_CONFIG,
                f"no checkpoint under the CHECKPOINT_URL fits these objects ({why}); "
                "allowed: the URL of this run's checkpoints, or a new one",
            )
        tier = getattr(self._store, "loaded_from", "") or (BUCKET if latest else "")
        if latest is not None:
            self.step = self.resumed_from = latest.step
            self._resumed["restore_seconds"] = round(time.perf_counter() - started, 4)
        self.events.emit(
            "resumed",
            step=self.step,
            rank=self.gang.rank,
            writer=self._store.writer_id,
            tier=tier,
            **self._resumed,
        )
        self._saver = self.gang.checkpointer(
            self._store,
            on_start=lambda step, kind: self.events.emit("saving", step=step, kind=kind),
            on_done=self._saved,
            on_retention_failed=lambda step, why: self.events.emit(
                "retention_failed", step=step, reason=why
            ),
        )
        return self

    def _skipped(self, step: int, reason: str) -> None:
        self.events.emit("skipped", step=step, reason=reason)

    def _restore(self, checkpoint: Checkpoint) -> None:
        # Only what the checkpoint recorded: one from before identities were kept is taken.
        ours = {k: v for k, v in self.settings.identity.items() if k in checkpoint.metadata}
        theirs = {k: checkpoint.metadata[k] for k in ours}
        if theirs != ours:
            raise ConfigError(
                f"{redacted(self.settings.url)} holds step {checkpoint.step} of another run "
                f"({_spelled(theirs)}; this one has {_spelled(ours)}): give this run its own "
                "CHECKPOINT_URL"
            )
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

    # --- training -------------------------------------------------------------------------

    @property
    def preempted(self) -> bool:
        """Whether SIGTERM has arrived at this process."""
        return self.guard.preempted

    @property
    def rank(self) -> int:
        return self.gang.rank

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``, or less when SIGTERM comes first (True then)."""
        return self.guard.wait(seconds)

    def steps(self, total: int) -> Iterator[int]:
        """The steps still to train, from :attr:`step` to ``total``: saves every interval
        after a step, and when SIGTERM reaches any rank saves the final checkpoint and
        exits 143. Ends with the completed state saved."""
        stopping = self._anyone_stopping()
        while self.step < total and not stopping:
            yield self.step
            self.step += 1
            self.events.emit("step", printed=self.settings.emit_steps, step=self.step)
            if not self._buffer.ready:  # the optimizer has state now: size the buffer once
                self._buffer.prepare(self.model, self.optimizer, **self._extra())
            stopping = self._anyone_stopping()
            if not stopping and self.step % self.settings.interval == 0 and self.step < total:
                self._settle_previous_save()
                self._stored(
                    lambda: self.saver().save_async(self.step, self._capture, self.metadata(False))
                )
        if stopping:
            self._leaving.preempted()
        self._stored(lambda: self.saver().save_final(self.step, self.views, self.metadata(True)))
        digest, states = self.digests()
        self.events.emit("done", step=self.step, digest=digest, states=states)

    def _stored(self, save: Callable[[], object]) -> None:
        """``save``, or the exit for a store that cannot be reached (a periodic upload's
        failure surfaces at the next save, which waits for it), or that refuses the URL
        itself (a folder of it linked out of its root: no retry mends that)."""
        try:
            save()
        except StorageURLError as error:
            self._leaving.exit(exit_codes.BAD_CONFIG, str(error))
        except StorageError as error:
            self._leaving.exit(exit_codes.STORAGE_UNAVAILABLE, str(error))

    def _settle_previous_save(self) -> None:
        """Before a gang's periodic save, wait for the one in flight together: every rank
        asks, each second, whether anyone's is still running. A save waits for the other
        ranks (rank 0 for their shards, the others for rank 0's commit), so a rank whose
        peer died mid-save would wait out the whole shard timeout alone; asking together, it
        learns of the loss from the next collective, within a second, and leaves as a rank
        stopped by a peer. Every rank gets the same answers, so all ask equally often."""
        if self.gang.world_size == 1 or self._saver is None:
            return
        saver = self._saver
        try:
            while self.gang.anyone(not saver.settled(SETTLE_POLL_SECONDS)):
                pass
        except group.PeerLost as error:
            self._leaving.peer_lost(error)

    def _anyone_stopping(self) -> bool:
        """Whether any rank has been signalled; every rank asks after the same steps."""
        try:
            return self.gang.anyone(self.guard.preempted)
        except group.PeerLost as error:
            self._leaving.peer_lost(error)

    def digests(self) -> tuple[str | None, dict[str, str] | None]:
        """The digest of the whole state (every rank's, in a gang) and one per part, where
        a program reads the events or ``SPOTPROOF_STATE_DIGESTS`` asks; else None, None
        (hashing the whole state is no work for a run nobody compares)."""
        # Asked of every rank together: a rank hashing alone would wait for the others.
        if not self.gang.anyone(self.events.to_program or self.settings.state_digests):
            return None, None
        states = fingerprint.state_digests(self.model, self.optimizer, self._extra())
        per_rank = self.gang.exchange(states)
        parts = {
            name: fingerprint.combined(0, {str(r): s[name] for r, s in enumerate(per_rank)})  # type: ignore[index]
            for name in states
        }
        return fingerprint.combined(self.step, parts), parts

    def _capture(self) -> dict[str, bytes | memoryview]:
        return self._buffer.capture(self.model, self.optimizer, self.step, **self._extra())

    def views(self) -> dict[str, Any]:
        """The final save's blobs: training has stopped, so the tensors are uploaded from
        their own memory (a copy is needed only off the CPU)."""
        return self._buffer.views(self.model, self.optimizer, self.step, **self._extra())

    def _extra(self) -> dict[str, Any]:
        return {name: state.state_dict() for name, state in self.others.items()}

    def metadata(self, final: bool) -> dict[str, Any]:
        found = {
            **self.settings.identity,
            **metrics.save_metadata("final" if final else "periodic"),
        }
        if self.settings.state_digests:
            found["states"] = fingerprint.state_digests(self.model, self.optimizer, self._extra())
        return found

    def _saved(self, result: SaveResult, kind: str) -> None:
        """The ``checkpoint`` event once ``result`` is committed, or why it was not."""
        if isinstance(result, HeldResult):  # in memory and on a peer; the bucket has older
            self.events.emit("checkpoint_held", step=result.step, replicated=result.replicated)
            return
        if not result.committed:
            self.events.emit(
                "checkpoint_refused", step=result.step, kind=kind, reason=result.reason
            )
            return
        fields: dict[str, Any] = {
            "kind": kind,
            "bytes": result.bytes,
            "blocked_seconds": round(result.blocked_seconds, 4),
            "capture_seconds": round(result.capture_seconds, 4),
        }
        received = self.guard.received_at
        if kind == "final" and received is not None:
            fields["since_signal"] = round(time.monotonic() - received, 4)
        self.events.emit("checkpoint", step=result.step, seconds=round(result.seconds, 4), **fields)

    def saver(self) -> AsyncCheckpointer:
        if self._saver is None:
            raise RuntimeError("use training(...) as a context manager: with training(...) as run")
        return self._saver

    # --- leaving --------------------------------------------------------------------------

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            self._leaving.yield_to_another_leaver()
            if kind is not None and self._leaving.is_peer_lost(error):
                self._leaving.peer_lost(error)
            if self._saver is not None and kind is None:
                self._stored(self._saver.wait)
            if kind is None:
                self.gang.close()
                self._leaving.completed()
        finally:
            self.guard.__exit__(kind, error, trace)


def training(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    url: str | None = None,
    interval: int | None = None,
    grace_seconds: float | None = None,
    identity: Mapping[str, Any] | None = None,
    **others: Stateful,
) -> Training:
    """Checkpointed training of ``model`` and ``optimizer`` and any other ``Stateful``
    given by name (``scheduler=...``, ``data=...``), alone or as one rank of a gang.

    Settings not given are read from the environment the Job sets: ``CHECKPOINT_URL``,
    ``CHECKPOINT_INTERVAL`` and ``GRACE_SECONDS``, and for a gang ``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (``spotproof.runtime.settings``
    gives each one's meaning, range and default). ``identity`` (plain values: a seed, a
    data set's name) is what makes two runs the same run: kept in every checkpoint, and a
    checkpoint kept under other values is never resumed. A bad setting exits 2 in one
    line."""
    try:
        run = RunSettings.from_env(
            os.environ, url=url, interval=interval, grace_seconds=grace_seconds, identity=identity
        )
    except ConfigError as error:
        Leaving.refuse(str(error))
    return Training(model, optimizer, others, run)


def _spelled(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in values.items()) or "nothing recorded"
