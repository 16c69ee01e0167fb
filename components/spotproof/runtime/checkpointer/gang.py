"""Checkpoints of a gang: N ranks, each saving its own shard, committed as one step.

The commit protocol
-------------------
Every rank of a gang shares a gang id, drawn once per incarnation of the gang (rank 0
draws it and broadcasts it; :func:`new_gang_id`), so rank ``r``'s writer id is
``<gang>-rank<r>`` and a restarted gang never writes under the names of the one before.
A checkpoint of step ``S``:

1. **Shards.** Each rank uploads its blobs to ``steps/<S>/<writer>/`` exactly as a single
   process does (``spotproof.runtime.checkpointer.checkpoint``, step 1), then records the parts it
   wrote in ``steps/<S>/<writer>/shard.json`` (a format-3 manifest of its own parts).
2. **Commit.** Rank 0 waits until the shard record of every rank of its gang exists and
   decodes, then writes ``manifests/<S>.json`` (format 4, :class:`GangManifest`: every
   shard, the world size) with the same create-only write as a single process. The step
   is committed when, and only when, that object exists: a step that some rank never
   finished is never committed, and the one object names one gang's writers, so shards of
   two incarnations are never mixed. A rank that does not record its shard within
   ``shard_timeout`` leaves the step uncommitted; retention collects the payload.
3. **Acknowledgement.** Every other rank waits (up to ``shard_timeout``) for the manifest
   and reports its save committed if the manifest lists its own writer. If another gang's
   manifest is there, the step was committed first by a gang that is still or was
   running: the rank deletes its payload and the committed step stays as it is.
4. **Load.** Each rank downloads and verifies only its own shard. Ranks must resume from
   the same step, so they agree through a min-reduction the trainer supplies (with
   ``torch.distributed``: ``all_reduce`` of the step with ``ReduceOp.MIN``): each rank
   offers the newest step whose shard verified for it, and every rank falls back to the
   smallest offer, until one round's agreement equals the last. A restore that reads in
   place (``runtime.checkpointer.in_place``) reads the shard straight into the rank's
   tensors; a rank that restored a newer step than the one agreed on restores the agreed
   one over it, which writes the whole state again. A committed step written
   by a gang of another size raises :class:`GangMismatch` rather than being skipped, since
   quietly resuming from something older would lose work; one saved ``replicated`` (every
   rank held the same state) loads at any size.
5. **Retention.** Only rank 0 prunes, as a single process does.

A save cancelled before its shard record exists deletes its payload, and so does rank 0
cancelled while it waits for the others (it will not commit). Another rank's recorded
shard may already be part of the step rank 0 is committing, so a cancelled wait for the
commit keeps it (retention collects it if the step never commits).

Stopping because of a peer
--------------------------
When one rank is reclaimed the whole gang stops (every rank saves its shard of the same
final step), but only the reclaimed rank should *fail*: a JobSet takes the action of the
first of its failure-policy rules that matches any child Job failed at that moment
(``spotproof.catalog.jobset.FIRST_MATCHING_RULE_WINS``), so a healthy rank's Job failing
before the reclaimed one's would spend a restart from the budget meant for crashes. A rank
that stopped because of a peer (the peer's notice, or the peer gone) therefore leaves the
gang cleanly and then waits, with :func:`await_teardown`, for the JobSet to delete its pod.

Its final save needs a deadline all the same, though no signal started a clock for it:
give it the grace period, counted from the stop. The signalled peer records its shard
within its own grace or is killed and never does; waiting ``shard_timeout`` for it instead
would hold this rank in the save, and the peer in the collective that leaves the gang,
past the peer's grace.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from spotproof.runtime.checkpointer.checkpoint import (
    SUPERSEDED,
    Checkpoint,
    CheckpointStore,
    Restore,
)
from spotproof.runtime.checkpointer.layout import (
    manifest_key,
    shard_key,
    writer_prefix,
)
from spotproof.runtime.checkpointer.manifest import (
    MAX_MANIFEST_BYTES,
    GangManifest,
    GangMismatch,
    Manifest,
    ManifestError,
    Part,
    read_commit,
)
from spotproof.runtime.checkpointer.transfer import SaveCancelled
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.storage import StorageError, Unreadable

__all__ = [
    "PEER_WAIT_SECONDS",
    "Agree",
    "GangCheckpointStore",
    "GangMismatch",
    "await_teardown",
    "new_gang_id",
]

Agree = Callable[[int], int]
"""Called by every rank with the same number of times; returns the minimum of what the
ranks passed (``-1`` stands for "no checkpoint")."""

DEFAULT_SHARD_TIMEOUT = 120.0
"""Seconds rank 0 waits for the other shards, and the others for the commit. Long enough
for a slow rank's upload; a dead rank costs this much of rank 0's save thread."""
_GANG_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_POLL_FIRST, _POLL_GROWTH, _POLL_MAX = 0.005, 1.5, 0.25
"""Seconds between looks at the store while waiting: short at first (a shard is usually
recorded within moments of one's own), then backing off to a few requests a second."""


PEER_WAIT_SECONDS = 600.0
"""How long a rank stopped by a peer waits to be torn down. Longer than the slowest way a
reclaimed pod's Job fails: a pod on a node that stops answering is evicted by the taint
manager after the ``node.kubernetes.io/unreachable`` toleration's 300 s, which the
``DefaultTolerationSeconds`` admission plugin gives every pod
(https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/#taint-based-evictions)."""


def await_teardown(guard: PreemptionGuard, timeout: float = PEER_WAIT_SECONDS) -> bool:
    """Wait for SIGTERM after stopping because of a peer; True when it came (the gang is
    being torn down and restarted), False when ``timeout`` passed without it. Exit
    ``PREEMPTED`` or ``PEER_LOST`` after it; see "Stopping because of a peer" above."""
    return guard.wait(timeout)


def new_gang_id() -> str:
    """A fresh id for one incarnation of a gang; draw it on rank 0 and broadcast it."""
    return f"g{int(time.time())}-{secrets.token_hex(4)}"


class GangCheckpointStore(CheckpointStore):
    """Rank ``rank`` of ``world_size`` saving and loading its shard of each checkpoint."""

    def __init__(
        self,
        url: str,
        *,
        rank: int,
        world_size: int,
        gang: str,
        replicated: bool = False,
        shard_timeout: float = DEFAULT_SHARD_TIMEOUT,
        **options: Any,
    ) -> None:
        """``options`` are :class:`CheckpointStore`'s (``keep``, ``part_bytes``...), except
        ``writer_id``, which the gang id and rank decide. ``replicated`` says every rank saves
        the same state, so the checkpoint may be loaded by a gang of another size."""
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} of world size {world_size}: need 0 <= rank < size")
        if not _GANG_ID.fullmatch(gang):
            raise ValueError(f"gang id {gang!r}: allowed 1-64 of A-Z a-z 0-9 . _ -")
        if "writer_id" in options:
            raise ValueError("a gang's writer ids come from its gang id and ranks")
        super().__init__(url, writer_id=_writer(gang, rank), **options)
        self.rank, self.world_size, self.gang = rank, world_size, gang
        self.replicated = replicated
        self.shard_timeout = shard_timeout

    # --- save --------------------------------------------------------------------------

    def _finish(
        self,
        step: int,
        parts: tuple[Part, ...],
        metadata: dict[str, Any],
        cancel: threading.Event | None,
    ) -> str:
        """Record this rank's shard of ``step``; rank 0 then commits once every shard is
        there (with its own ``metadata``), the others wait for that commit."""
        shard = Manifest(step, self.writer_id, time.time(), parts)
        self.store.put(shard_key(step, self.writer_id), shard.encode())
        self.store.make_durable(writer_prefix(step, self.writer_id))
        if self.rank == 0:
            return self._commit_gang(step, shard, metadata, cancel)
        return self._await_commit(step, cancel)

    def _commit_gang(
        self,
        step: int,
        own: Manifest,
        metadata: dict[str, Any],
        cancel: threading.Event | None,
    ) -> str:
        """Rank 0: commit ``step`` once every rank's shard record is in; "" when committed,
        else why not."""
        shards: dict[int, Manifest] = {0: own}
        deadline = time.monotonic() + self.shard_timeout
        for delay in _polls(deadline):
            for rank in range(1, self.world_size):
                if rank not in shards:
                    shard = self._recorded_shard(step, rank)
                    if shard is not None:
                        shards[rank] = shard
            if len(shards) == self.world_size:
                break
            with contextlib.suppress(ManifestError, StorageError):
                if self._committed(step) is not None:  # by another gang: stop waiting
                    return SUPERSEDED
            _raise_if_set(cancel, step)
            time.sleep(delay)
        missing = sorted(set(range(self.world_size)) - set(shards))
        if missing:
            return (
                f"ranks {missing} did not record their shard of step {step} "
                f"within {self.shard_timeout:g} s"
            )
        commit = GangManifest(
            step,
            time.time(),
            tuple(shards[rank] for rank in range(self.world_size)),
            self.replicated,
            metadata,
        )
        return "" if self._commit(step, commit.encode()) else SUPERSEDED

    def _recorded_shard(self, step: int, rank: int) -> Manifest | None:
        writer = _writer(self.gang, rank)
        try:
            recorded = self.store.get(shard_key(step, writer), limit=MAX_MANIFEST_BYTES)
            shard = Manifest.decode(recorded)
        except (FileNotFoundError, ManifestError, Unreadable):
            return None  # not written yet, or caught mid-write on a store without atomic PUT
        if shard.step != step or shard.writer != writer:
            return None
        return shard

    def _await_commit(self, step: int, cancel: threading.Event | None) -> str:
        """Ranks other than 0: "" once the committed manifest lists this rank's writer."""
        deadline = time.monotonic() + self.shard_timeout
        for delay in _polls(deadline):
            try:
                commit = self._committed(step)
            except (ManifestError, StorageError, Unreadable) as error:
                return f"the manifest of step {step} cannot be read: {error}"
            if commit is not None:
                return "" if self._lists_us(commit) else SUPERSEDED
            if cancel is not None and cancel.is_set():
                # No SaveCancelled: that deletes the payload, which rank 0 may be committing.
                return f"save of step {step} superseded after its shard was recorded"
            time.sleep(delay)
        return f"rank 0 did not commit step {step} within {self.shard_timeout:g} s"

    def _committed(self, step: int) -> GangManifest | None:
        try:
            return read_commit(self.store.get(manifest_key(step), limit=MAX_MANIFEST_BYTES))
        except FileNotFoundError:
            return None

    def _lists_us(self, commit: GangManifest) -> bool:
        return self.rank < commit.world_size and (commit.shards[self.rank].writer == self.writer_id)

    def prune(self) -> list[int]:
        """Rank 0 prunes for the gang; the others leave it to rank 0."""
        return super().prune() if self.rank == 0 else []

    # --- load --------------------------------------------------------------------------

    def load_latest(
        self,
        on_skip: Callable[[int, str], None] | None = None,
        agree: Agree | None = None,
        restore: Restore | None = None,
    ) -> Checkpoint | None:
        """The newest step every rank's shard verifies for (and every rank's ``restore``
        took), as this rank's shard; None when there is none. ``agree`` is the gang's
        min-reduction; every rank must call this. A gang of one needs none. The checkpoint
        returned is the last one ``restore`` was given."""
        if agree is None:
            if self.world_size > 1:
                raise ValueError("a gang of more than one rank must agree on the step to load")
            agree = _alone
        failed: set[int] = set()
        loaded: Checkpoint | None = None
        bound: int | None = None
        while True:
            if loaded is None or bound is None or loaded.step > bound:
                loaded = self._newest_verified(bound, failed, on_skip, restore)
            agreed = agree(loaded.step if loaded is not None else -1)
            if agreed == bound:
                return loaded if agreed >= 0 else None
            bound = agreed

    def restorable_steps(self) -> list[int]:
        """The steps a load may offer, oldest first: the committed ones here; a store
        with more tiers adds what they hold (``runtime.checkpointer.tiers``)."""
        return self.committed_steps()

    def _newest_verified(
        self,
        bound: int | None,
        failed: set[int],
        on_skip: Callable[[int, str], None] | None,
        restore: Restore | None,
    ) -> Checkpoint | None:
        skipped: list[str] = []
        for step in reversed(self.restorable_steps()):
            if (bound is not None and step > bound) or step in failed:
                continue
            try:
                return self._load_and_restore(step, tuple(skipped), restore)
            except (ManifestError, ValueError, MemoryError, FileNotFoundError) as error:
                failed.add(step)
                skipped.append(f"step {step}: {error}")
                if on_skip:
                    on_skip(step, str(error))
        return None


def _writer(gang: str, rank: int) -> str:
    return f"{gang}-rank{rank:05d}"


def _alone(step: int) -> int:
    return step


def _raise_if_set(cancel: threading.Event | None, step: int) -> None:
    if cancel is not None and cancel.is_set():
        raise SaveCancelled(f"save of step {step} superseded")


def _polls(deadline: float) -> Iterator[float]:
    """Delays between looks at the store, growing, until ``deadline``; the last is 0, for a
    last look at the deadline."""
    delay = _POLL_FIRST
    while (left := deadline - time.monotonic()) > 0:
        yield min(delay, left)
        delay = min(delay * _POLL_GROWTH, _POLL_MAX)
    yield 0.0
