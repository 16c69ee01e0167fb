"""A gang's checkpoints in three tiers: its node's memory, a peer's memory, the bucket.

A final save must fit in the notice; a periodic one need not go to the bucket at all to
save the work of a rank whose node vanishes without notice, provided a copy survives on
another node. So a gang with a memory tier keeps its checkpoints in three places:

Which tier holds which step
---------------------------
- **Memory.** Every periodic save commits first to ``<tier>/<run>/own/rank-<r>/`` on its
  node (tmpfs, or a local SSD), with the single-process protocol
  (``runtime.checkpointer.checkpoint``: parts with their CRC32C, then the manifest,
  create-only). It costs about a copy of the shard, and holds the newest ``keep``.
- **Peer.** The same save is then written, in the same background thread, to the memory
  of one other rank's node, its *holder* (:func:`replica_holders`: the next rank in ring
  order on another node, on another zone where the gang spans zones), through that rank's
  :class:`~spotproof.runtime.storage.replica_server.ReplicaServer` at
  ``<holder's tier>/<run>/replicas/rank-<r>/``, which takes only requests signed with the
  gang's key (``runtime.storage.replica_auth``). The holder checks every part's CRC32C on
  arrival, and the manifest arrives last and create-only: a replica is whole and verified,
  or is not there. A save to the holder, or a load from it, ends by one deadline
  (``PeerStore.bounded``); past it the bucket stands in.
- **Bucket.** Every ``persist_every``-th periodic save, and every final save, goes to the
  bucket as a gang checkpoint (``runtime.checkpointer.gang``); a final save goes *only*
  there, since the node it was made on is about to go.

``<run>`` is a digest of the bucket URL and the gang's size, so two runs on one node, or
one run restarted at another size, never read each other's memory.

When a step counts as committed
-------------------------------
Only the bucket commits. ``committed_steps`` and ``SaveResult.committed`` mean what they
mean without tiers; a save that reached memory only returns a :class:`HeldResult`, whose
``committed`` is false. A step held in memory survives the loss of any one node (its
shard is on two), not the loss of a rank and its holder together, nor of the whole gang:
then the restart falls back to the bucket, exactly as without tiers.

What a restart chooses
----------------------
1. Each rank offers the newest step it can read and verify from any tier: its own memory,
   its holder's replica, the bucket (a step in several is read from the first). The gang
   agrees on the smallest offer (``GangCheckpointStore.load_latest``'s rounds), so a memory
   step newer than the bucket's is chosen only when every rank can read its shard of it.
2. Every copy records the gang that wrote it (``metadata["gang"]``). After agreeing, the
   ranks compare these (the smallest and largest of their digests): memory copies of one
   step written by two incarnations of the gang, which trained differently from an older
   restore, are never mixed. On a mismatch the memory copies of that step are set aside
   and the gang agrees again (the bucket's copy is one gang's manifest, so it stays).
3. Before its first step after restoring step ``R``, every rank deletes the memory
   checkpoints newer than ``R``, its own and the replicas it holds (and any name no
   replica could be): what an abandoned incarnation held is never mistaken for this one's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer, Capture
from spotproof.runtime.checkpointer.checkpoint import (
    Checkpoint,
    CheckpointStore,
    Restore,
    SaveResult,
)
from spotproof.runtime.checkpointer.gang import Agree, GangCheckpointStore
from spotproof.runtime.checkpointer.layout import manifest_key, step_prefix
from spotproof.runtime.checkpointer.manifest import ManifestError
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage import StorageError
from spotproof.runtime.storage.peer import PeerStore
from spotproof.runtime.storage.replica_auth import ReplicaKey
from spotproof.runtime.storage.replica_server import CannotListen, ReplicaServer

Exchange = Callable[[Any], list[Any]]
"""Every rank's value, in rank order (``torch.distributed.all_gather_object``)."""
MEMORY, PEER, BUCKET = "memory", "peer", "bucket"
"""Where a rank read its shard of the step it resumed from (``loaded_from``)."""
HELD_TIERS = (MEMORY, PEER)
"""The tiers that hold steps the bucket may not have: never counted as committed."""
GANG_KEY = "gang"
"""The metadata key naming the gang that wrote a copy."""
_UNUSABLE_COPY = (ManifestError, ValueError, MemoryError, FileNotFoundError, StorageError)
"""What a copy of a step in one tier may fail with, the next tier then being tried: what
a load skips a step for, and a holder gone while it was read."""
MEMORY_KEEP = 2
"""Steps each memory store keeps: the newest, and the one before while the gang may still
agree on it (a rank whose newest save failed offers the older)."""
HELD = re.compile(r"rank-[0-9]{5}")  # what a holder keeps replicas under; all else is foreign


@dataclass(frozen=True)
class MemoryTier:
    """Where a rank keeps checkpoints in memory, and how often it persists them."""

    directory: str
    """A directory on this node that outlives the trainer process but not the node: a
    tmpfs (``/dev/shm``, a memory-backed hostPath) or a local SSD."""
    key: ReplicaKey = field(repr=False)
    """The gang's key: the only one its replica servers take requests signed with."""
    persist_every: int = 4
    """Every this-many-th periodic save also goes to the bucket (1 to 1000); final saves
    always do."""
    host: str = "127.0.0.1"
    """The address peers reach this rank's replica server at (the pod's IP)."""
    port: int = 0
    """The replica server's port; 0 picks a free one."""
    node: str = ""
    """This rank's node (``spec.nodeName``); ranks on one node never hold each other's
    replicas. Empty: every rank counts as its own node."""
    zone: str = ""
    """This rank's zone; a holder in another zone is preferred. Empty: unknown."""
    replica_limit: int | None = None
    """The most bytes of replicas this rank's server holds; None: half the file system
    :attr:`directory` is on (``replica_server.default_limit``)."""

    def agreement(self) -> tuple[int, str]:
        """What every rank's tier must share: when saves persist, and the secret's digest."""
        return self.persist_every, self.key.fingerprint()

    def __post_init__(self) -> None:
        if not 1 <= self.persist_every <= 1000:
            raise ValueError(f"persist_every = {self.persist_every}: allowed 1 to 1000")
        if not os.path.isabs(self.directory):
            raise ValueError(f"memory tier {self.directory!r}: must be an absolute path")


@dataclass(frozen=True)
class HeldResult(SaveResult):
    """A periodic save held in memory (and, when ``replicated``, on its holder's node)
    but not in the bucket: not committed."""

    replicated: bool = False
    replica_seconds: float = 0.0


def replica_holders(nodes: list[str], zones: list[str]) -> list[int]:
    """For each rank, the rank whose node holds its replica: the first after it in ring
    order on another node, preferring another zone; itself when every rank shares a node
    (then there is no replica)."""
    size = len(nodes)
    holders = []
    for rank in range(size):
        ring = [(rank + offset) % size for offset in range(1, size)]
        elsewhere = [q for q in ring if not nodes[rank] or nodes[q] != nodes[rank]]
        other_zone = [q for q in elsewhere if zones[rank] and zones[q] and zones[q] != zones[rank]]
        holders.append((other_zone or elsewhere or [rank])[0])
    return holders


def _digest(token: str) -> int:
    """A gang id as a number a min-reduction can compare (63 bits)."""
    return int(hashlib.sha256(token.encode()).hexdigest()[:15], 16)


class TieredGangStore(GangCheckpointStore):
    """A rank's checkpoints in memory, on its holder and in the bucket (see the module)."""

    def __init__(
        self,
        url: str,
        *,
        rank: int,
        world_size: int,
        gang: str,
        tier: MemoryTier,
        exchange: Exchange,
        **options: Any,
    ) -> None:
        """``exchange`` must be called by every rank at once: it is, here, once, to learn
        where every rank's replica server listens."""
        super().__init__(url, rank=rank, world_size=world_size, gang=gang, **options)
        self.tier = tier
        run = hashlib.sha256(f"{url}|{world_size}".encode()).hexdigest()[:16]
        base = os.path.join(tier.directory, run)
        self.server: ReplicaServer | None = None
        try:
            self.own = CheckpointStore(
                f"file://{base}/own/rank-{rank:05d}", keep=MEMORY_KEEP, writer_id=self.writer_id
            )
            self.server = ReplicaServer(
                os.path.join(base, "replicas"), tier.key, tier.host, tier.port, tier.replica_limit
            )
            self.server.start()
            mine: tuple[str, str, str] = (self.server.url(""), tier.node, tier.zone)
        except (CannotListen, StorageError) as error:  # every rank hears of it, none waits
            mine = ("", "", str(error))
        seen = exchange(mine)
        for other, (address, _, problem) in enumerate(seen):
            if not address:
                self.close()
                raise ConfigError(f"rank {other}: {problem}")
        self.holder = replica_holders([s[1] for s in seen], [s[2] for s in seen])[rank]
        self.replica: CheckpointStore | None = None
        self.peer: PeerStore | None = None
        if self.holder != rank:
            self.peer = PeerStore(f"{seen[self.holder][0]}/rank-{rank:05d}", tier.key)
            self.replica = CheckpointStore(
                self.peer.url, keep=MEMORY_KEEP, writer_id=self.writer_id, store=self.peer
            )
        self.stopping = False
        """Set by :class:`TieredCheckpointer` once training stops: saves go to the bucket."""
        self._saves = 0
        self._set_aside: set[int] = set()
        self.loaded_from = ""
        """The tier the last load read this rank's shard from: memory, peer or bucket."""

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def _bounded(self, tier: str) -> contextlib.AbstractContextManager[None]:
        """One deadline for a whole save to, or load from, the holder (``peer``)."""
        if tier == PEER and self.peer is not None:
            return self.peer.bounded()
        return contextlib.nullcontext()

    # --- save --------------------------------------------------------------------------

    def save(
        self,
        step: int,
        blobs: Mapping[str, bytes | memoryview],
        metadata: Mapping[str, Any] | None = None,
        cancel: Any = None,
        *,
        prune: bool = True,
    ) -> SaveResult:
        metadata = {**(metadata or {}), GANG_KEY: self.gang}
        if self.stopping:
            return super().save(step, blobs, metadata, cancel, prune=prune)
        self._saves += 1
        started, why = time.monotonic(), ""
        try:
            held = self.own.save(step, blobs, metadata, cancel).committed
        except StorageError as error:  # memory full or gone: the replica and the bucket
            held, why = False, f"; not held in this node's memory: {error}"  # still go on
        replicated, replica_started = False, time.monotonic()
        if self.replica is not None:
            try:
                with self._bounded(PEER):
                    replicated = self.replica.save(step, blobs, metadata, cancel).committed
            except StorageError as error:  # the holder is gone or refused: memory stands
                why += f"; not replicated to rank {self.holder}: {error}"
        replica_seconds = time.monotonic() - replica_started
        if self._saves % self.tier.persist_every == 0:
            return super().save(step, blobs, metadata, cancel, prune=prune)
        size = sum(len(b) for b in blobs.values())
        where = " and ".join(
            place
            for place, kept in (("this node's memory", held), (f"rank {self.holder}'s", replicated))
            if kept
        )
        return HeldResult(
            step,
            committed=False,
            seconds=time.monotonic() - started,
            bytes=size,
            reason=f"held in {where or 'no memory'}; persisted every "
            f"{self.tier.persist_every} saves{why}",
            replicated=replicated,
            replica_seconds=replica_seconds,
        )

    # --- load --------------------------------------------------------------------------

    def _memory(self) -> list[tuple[str, CheckpointStore]]:
        tiers = [(MEMORY, self.own)]
        if self.replica is not None:
            tiers.append((PEER, self.replica))
        return tiers

    def _held_steps(self, store: CheckpointStore) -> list[int]:
        try:
            return [s for s in store.committed_steps() if s not in self._set_aside]
        except StorageError:  # a holder that is gone holds nothing for us
            return []

    def restorable_steps(self) -> list[int]:
        steps = set(self.committed_steps())
        for _, store in self._memory():
            steps.update(self._held_steps(store))
        return sorted(steps)

    def _load_and_restore(
        self, step: int, skipped: tuple[str, ...], restore: Restore | None
    ) -> Checkpoint:
        """``step`` from the first tier that holds it and whose copy verifies and restores
        (memory, peer, bucket): a copy that fails is only one of the places it is in."""
        problems: list[str] = []
        for tier, store in self._memory():
            if step not in self._held_steps(store):
                continue
            try:
                with self._bounded(tier):
                    checkpoint = store._load_and_restore(step, skipped, restore)
            except _UNUSABLE_COPY as error:
                problems.append(f"{tier}: {error}")
                continue
            self.loaded_from = tier
            return checkpoint
        try:
            checkpoint = super()._load_and_restore(step, skipped, restore)
        except FileNotFoundError:
            if problems:  # held in memory only, and no copy of it would do
                raise ValueError("; ".join(problems)) from None
            raise
        self.loaded_from = BUCKET
        return checkpoint

    def load_latest(
        self,
        on_skip: Callable[[int, str], None] | None = None,
        agree: Agree | None = None,
        restore: Restore | None = None,
    ) -> Checkpoint | None:
        """As the gang's, and then: every rank's copy written by one gang (or the memory
        copies of that step set aside and agreed again); newer memory steps deleted."""
        while True:
            loaded = super().load_latest(on_skip, agree, restore)
            if loaded is None or agree is None:
                break
            token = _digest(str(loaded.metadata.get(GANG_KEY, "")))
            if agree(token) == -agree(-token):
                break
            if loaded.step in self._set_aside:
                raise ManifestError(f"step {loaded.step}: its bucket copies disagree")
            self._set_aside.add(loaded.step)
            if on_skip:
                on_skip(loaded.step, "memory copies written by different incarnations")
        self.drop_newer_than(loaded.step if loaded is not None else -1)
        if loaded is not None and loaded.step not in self.committed_steps():
            # The bucket is behind what the gang resumed from: persist the next save, so
            # losing every node still costs at most ``persist_every`` saves. Decided from
            # the bucket, which every rank sees alike, not from the tier this rank read:
            # ranks that persist different saves would never complete a gang commit.
            self._saves = self.tier.persist_every - 1
        return loaded

    def drop_newer_than(self, step: int) -> None:
        """Delete memory checkpoints after ``step``: this rank's own, and every replica its
        node holds (each rank drops what it holds, so together they drop them all). What
        no replica could be (a name outside ``rank-NNNNN/``, a step the protocol cannot
        delete) is removed outright: a peer's stray names never stop a restart."""
        _drop_after(self.own, step)
        assert self.server is not None
        replicas = self.server.store.root
        for name in sorted(os.listdir(replicas)):
            path = os.path.join(replicas, name)
            if not HELD.fullmatch(name) or os.path.islink(path) or not os.path.isdir(path):
                _remove(path)
                continue
            try:
                _drop_after(CheckpointStore(f"file://{path}"), step)
            except (StorageError, OSError, ValueError):  # not even listed: nothing to keep
                _remove(path)


def _drop_after(store: CheckpointStore, step: int) -> None:
    for newer in (s for s in store.committed_steps() if s > step):
        try:
            store.delete_step(newer)
        except (StorageError, OSError):  # a name the protocol never writes, in the way
            _remove(store.store.path(manifest_key(newer)))
            _remove(store.store.path(step_prefix(newer)))


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


class TieredCheckpointer(AsyncCheckpointer):
    """:class:`AsyncCheckpointer` over a :class:`TieredGangStore`: a final save goes to
    the bucket even when the same step is already held in memory."""

    store: TieredGangStore

    def save_final(
        self,
        step: int,
        capture: Capture,
        metadata: Mapping[str, Any],
        deadline_seconds: float | None = None,
    ) -> SaveResult:
        self.store.stopping = True
        job = self._in_flight
        if job is not None and job.step == step:
            held = self.wait()
            if held is not None and held.committed:
                return held
        return super().save_final(step, capture, metadata, deadline_seconds)
