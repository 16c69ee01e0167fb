"""The smoke trainer across a gang of ranks, or alone: what differs, behind one interface.

A gang is started the way torchrun and a JobSet start one (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) and talks over ``torch.distributed`` with gloo. It trains
data-parallel with the optimizer state sharded ZeRO-1 style, so every rank's checkpoint is
a real shard:

- each rank computes gradients on its slice of the step's batch; they are averaged with
  one all-reduce;
- each parameter belongs to one rank (balanced by size), which alone keeps its AdamW
  moments and updates it, then broadcasts the new value to the others;
- a rank's shard is its own parameters, their optimizer state and its dropout RNG; a
  restored gang broadcasts each parameter from its owner, so every replica is whole again.

Stopping is coordinated: after every step the ranks all-reduce "was any of us signalled",
so a preemption of one rank stops every rank at the same step, each saves its shard of it,
and all exit ``PREEMPTED`` for the JobSet to restart the gang. A rank that dies without
warning surfaces in the others as a failed collective (:class:`PeerLost`).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from spotproof.runtime import settings
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import Checkpoint, CheckpointStore, Restore
from spotproof.runtime.checkpointer.gang import GangCheckpointStore, new_gang_id
from spotproof.runtime.checkpointer.tiers import MemoryTier, TieredCheckpointer, TieredGangStore
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.settings import ConfigError
from spotproof.smoke import BATCH_ROWS


class PeerLost(RuntimeError):
    """A collective failed: another rank of the gang is gone (or never came)."""


class RendezvousInterrupted(Exception):
    """SIGTERM arrived while the gang was still assembling: nothing to save, leave now."""


_HOST = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)
"""A DNS name as RFC 1123 spells one."""


def gang_from(env: Mapping[str, str]) -> tuple[int, int, str, int]:
    """``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``, each checked;
    :class:`ConfigError` names the first that is wrong."""
    size = settings.WORLD_SIZE.within(BATCH_ROWS).read(env)
    if BATCH_ROWS % size:
        raise ConfigError(f"WORLD_SIZE={size}: must divide the batch of {BATCH_ROWS} rows")
    rank = settings.RANK.within(size - 1).read(env)
    if size == 1:
        return rank, size, "", 0
    address = settings.MASTER_ADDR.read(env)
    if not _HOST.fullmatch(address):
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ConfigError(
                f"MASTER_ADDR={address!r:.80}: not a host name or an IP address"
            ) from None
    port = settings.MASTER_PORT.read(env)
    return rank, size, address, port


def _rendezvous(rank: int, size: int, seconds: float, guard: PreemptionGuard, where: str) -> None:
    """Join the gang's process group, waiting at most ``seconds`` for the others, and
    not at all once SIGTERM has come. ``init_process_group`` blocks in C++, where no Python
    signal handler runs, so it runs in a thread the main one watches. Raises
    :class:`PeerLost` when the gang does not assemble in time, and
    :class:`RendezvousInterrupted` on SIGTERM (the thread is left behind: the process
    exits next, with ``os._exit``)."""
    failure: list[BaseException] = []
    done = threading.Event()

    def join() -> None:
        try:
            timeout = datetime.timedelta(seconds=seconds)
            dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timeout)
        except Exception as error:  # torch raises store, socket and backend errors here
            failure.append(error)
        finally:
            done.set()

    threading.Thread(target=join, name="rendezvous", daemon=True).start()
    deadline = time.monotonic() + seconds + 5  # torch's own timeout ends it first
    while not done.wait(0.05):
        if guard.preempted:
            raise RendezvousInterrupted(f"rank {rank}: SIGTERM before the gang assembled")
        if time.monotonic() > deadline:
            break
    if failure or not done.is_set():
        why = str(failure[0]).strip().splitlines()[0][:200] if failure else "no answer"
        raise PeerLost(
            f"rank {rank}: the gang of {size} did not assemble at {where} within "
            f"{seconds:g} s (RENDEZVOUS_SECONDS): {why}"
        )


def memory_tier(env: Mapping[str, str]) -> MemoryTier | None:
    """The gang's memory tier from ``MEMORY_TIER_DIR`` and its companions, or None."""
    directory = settings.MEMORY_TIER_DIR.read(env)
    if directory is None:
        return None
    if not directory.startswith("/"):
        raise ConfigError(f"MEMORY_TIER_DIR={directory!r:.80}: must be an absolute path")
    return MemoryTier(
        directory,
        persist_every=settings.PERSIST_EVERY.read(env),
        host=settings.POD_IP.read(env) or "127.0.0.1",
        port=settings.REPLICA_PORT.read(env),
        node=settings.NODE_NAME.read(env) or "",
        zone=settings.NODE_ZONE.read(env) or "",
    )


class Solo:
    """One process: the whole state is its shard; every agreement is with itself."""

    rank, world_size = 0, 1

    def store(self, url: str, **options: object) -> CheckpointStore:
        return CheckpointStore(url, **options)  # type: ignore[arg-type]

    def checkpointer(self, store: CheckpointStore, **callbacks: Any) -> AsyncCheckpointer:
        """The saver over ``store``: one that persists final saves past a memory tier
        when the store has one."""
        tiered = isinstance(store, TieredGangStore)
        return (TieredCheckpointer if tiered else AsyncCheckpointer)(store, **callbacks)

    def owned(self, model: torch.nn.Module) -> torch.nn.Module:
        """The part of the model this process updates and checkpoints."""
        return model

    def seed_dropout(self, seed: int) -> None:
        """Each rank draws its own dropout masks; alone, the build's seed goes on."""
        return None

    def latest(
        self, store: CheckpointStore, on_skip: Callable[[int, str], None], restore: Restore
    ) -> Checkpoint | None:
        return store.load_latest(on_skip=on_skip, restore=restore)

    def rows(self, batch: torch.Tensor) -> torch.Tensor:
        return batch

    def average_gradients(self, model: torch.nn.Module) -> None:
        return None

    def share_parameters(self, model: torch.nn.Module) -> None:
        return None

    def agree(self, step: int) -> int:
        return step

    def anyone(self, flag: bool) -> bool:
        return flag

    def digest(self, local: str) -> str:
        return local

    def close(self) -> None:
        return None


class Gang(Solo):
    """Rank ``RANK`` of ``WORLD_SIZE`` processes."""

    lost = False
    """A collective failed; leaving the group is then no longer possible in order."""
    _owners: list[int]
    """Each parameter's owning rank, set by :meth:`owned`."""

    def __init__(self, rank: int, world_size: int, tier: MemoryTier | None = None) -> None:
        """Rank ``rank`` of a process group already joined (:meth:`from_env`), keeping
        checkpoints in ``tier`` and its peers' when given."""
        self.rank, self.world_size, self.tier = rank, world_size, tier
        gang = [new_gang_id() if rank == 0 else None]
        self._collective(dist.broadcast_object_list, gang, src=0)
        self.gang_id = str(gang[0])

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], guard: PreemptionGuard, rendezvous_seconds: float
    ) -> Solo:
        """A gang when ``WORLD_SIZE`` is over 1, assembled (see :func:`_rendezvous`), else
        :class:`Solo`; :class:`ConfigError` for a variable that cannot describe one."""
        rank, size, address, port = gang_from(env)
        if size == 1:
            return Solo()
        tier = memory_tier(env)
        _rendezvous(rank, size, rendezvous_seconds, guard, f"{address}:{port}")
        return cls(rank, size, tier)

    def store(self, url: str, **options: object) -> CheckpointStore:
        if self.tier is not None:
            return TieredGangStore(
                url,
                rank=self.rank,
                world_size=self.world_size,
                gang=self.gang_id,
                tier=self.tier,
                exchange=self.exchange,
                **options,
            )
        return GangCheckpointStore(
            url,
            rank=self.rank,
            world_size=self.world_size,
            gang=self.gang_id,
            **options,  # type: ignore[arg-type]
        )

    def _assign_owners(self, model: torch.nn.Module) -> list[int]:
        """The rank that owns each parameter: largest first, each to the rank holding the
        fewest elements so far, so shards come out about the same size."""
        parameters = list(model.parameters())
        owners, load = [0] * len(parameters), [0] * self.world_size
        for index in sorted(range(len(parameters)), key=lambda i: -parameters[i].numel()):
            rank = load.index(min(load))
            owners[index] = rank
            load[rank] += parameters[index].numel()
        return owners

    def owned(self, model: torch.nn.Module) -> torch.nn.Module:
        """This rank's parameters, the same objects as the model's (not copies). Decides
        who owns what once, for :meth:`share_parameters` to use every step."""
        self._owners = self._assign_owners(model)
        pairs = zip(model.parameters(), self._owners, strict=True)
        mine = [p for p, rank in pairs if rank == self.rank]
        return torch.nn.ParameterList(mine)

    def seed_dropout(self, seed: int) -> None:
        torch.manual_seed(seed * 1_009 + self.rank + 1)

    def latest(
        self, store: CheckpointStore, on_skip: Callable[[int, str], None], restore: Restore
    ) -> Checkpoint | None:
        assert isinstance(store, GangCheckpointStore)
        return store.load_latest(on_skip=on_skip, agree=self.agree, restore=restore)

    def rows(self, batch: torch.Tensor) -> torch.Tensor:
        return batch[self.rank :: self.world_size]

    def average_gradients(self, model: torch.nn.Module) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._collective(dist.all_reduce, flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def share_parameters(self, model: torch.nn.Module) -> None:
        with torch.no_grad():
            for parameter, owner in zip(model.parameters(), self._owners, strict=True):
                self._collective(dist.broadcast, parameter.data, src=owner)

    def agree(self, step: int) -> int:
        value = torch.tensor([step], dtype=torch.int64)
        self._collective(dist.all_reduce, value, op=dist.ReduceOp.MIN)
        return int(value.item())

    def anyone(self, flag: bool) -> bool:
        value = torch.tensor([int(flag)], dtype=torch.int64)
        self._collective(dist.all_reduce, value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def exchange(self, value: object) -> list[object]:
        """Every rank's ``value``, in rank order."""
        values: list[object] = [None] * self.world_size
        self._collective(dist.all_gather_object, values, value)
        return values

    def digest(self, local: str) -> str:
        """One digest of the gang: every rank's, in rank order."""
        digests: list[str | None] = [None] * self.world_size
        self._collective(dist.all_gather_object, digests, local)
        return hashlib.sha256("".join(str(d) for d in digests).encode()).hexdigest()

    def close(self) -> None:
        """Leave together: a rank tearing gloo down while a peer still talks to it aborts."""
        if dist.is_initialized() and not self.lost:
            with contextlib.suppress(PeerLost):
                self._collective(dist.barrier)
                dist.destroy_process_group()

    def _collective(self, operation: object, *args: object, **kwargs: object) -> None:
        try:
            operation(*args, **kwargs)  # type: ignore[operator]
        except RuntimeError as error:  # gloo's errors, DistBackendError included
            self.lost = True
            raise PeerLost(f"rank {self.rank}: a collective failed: {error}") from None
