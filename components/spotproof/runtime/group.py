"""The ranks of a gang as ``training()`` sees them: joining, agreeing, stopping together.

A gang is started the way torchrun and a JobSet start one: ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` in every process's environment. What ``training()``
needs of the others are small agreements over ``torch.distributed``: the gang's id (drawn
by rank 0, so a restarted gang never writes under the old one's names), the step every
rank can resume from, whether any rank was signalled (asked after every step, so one
notice stops every rank at the same step and each saves its shard of it), every rank's
value (the memory tier's addresses and offers), and every rank's digest at the end.

The process group: where the trainer has joined one itself (an NCCL group for its model,
say), these agreements go over a gloo group of the same ranks made beside it, since they
are CPU tensors; otherwise ``training()`` joins a gloo group itself, waiting at most
``RENDEZVOUS_SECONDS`` for the others and not at all once SIGTERM has come
(``init_process_group`` blocks in C++, where no Python signal handler runs, so it runs in
a thread the main one watches). Either way the model's own collectives (a data-parallel
gradient average, say) are the trainer's, on the default group.

A collective that fails means another rank is gone: :class:`PeerLost`, after which the
group cannot be left in order. So does the gang's watch (``runtime.liveness``) once it
finds a rank unheard for ``PEER_SILENCE_SECONDS``: the next agreement raises it, and a
rank blocked in the trainer's own collective hears of it from the watch thread.
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

from spotproof.runtime import liveness, settings
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import Checkpoint, CheckpointStore, Restore
from spotproof.runtime.checkpointer.gang import GangCheckpointStore, new_gang_id
from spotproof.runtime.checkpointer.tiers import MemoryTier, TieredCheckpointer, TieredGangStore
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.settings import ConfigError
from spotproof.runtime.storage.replica_auth import ReplicaKey


class PeerLost(RuntimeError):
    """A collective failed: another rank of the gang is gone (or never came)."""


class RendezvousInterrupted(Exception):
    """SIGTERM arrived while the gang was still assembling: nothing to save, leave now."""


_HOST = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)
"""A DNS name as RFC 1123 spells one."""


def gang_from(env: Mapping[str, str], most: int = settings.MAX_WORLD_SIZE) -> tuple[int, int]:
    """``RANK`` and ``WORLD_SIZE`` (at most ``most`` ranks), each checked, and for a gang
    ``MASTER_ADDR`` and ``MASTER_PORT`` too; :class:`ConfigError` names the first that is
    wrong."""
    size = settings.WORLD_SIZE.within(most).read(env)
    rank = settings.RANK.within(size - 1).read(env)
    if size > 1:
        address = settings.MASTER_ADDR.read(env)
        if not _HOST.fullmatch(address):
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ConfigError(
                    f"MASTER_ADDR={address!r:.80}: not a host name or an IP address"
                ) from None
        settings.MASTER_PORT.read(env)
    return rank, size


def memory_tier(env: Mapping[str, str]) -> MemoryTier | None:
    """The gang's memory tier from ``MEMORY_TIER_DIR`` and its companions, or None. A
    tier refuses to start without ``REPLICA_SECRET_FILE``: its replica server would take
    writes from whatever reaches its port and serve the weights to anyone."""
    directory = settings.MEMORY_TIER_DIR.read(env)
    if directory is None:
        return None
    if not directory.startswith("/"):
        raise ConfigError(f"MEMORY_TIER_DIR={directory!r:.80}: must be an absolute path")
    limit = settings.REPLICA_LIMIT_MIB.read(env)
    return MemoryTier(
        directory,
        _replica_key(env),
        persist_every=settings.PERSIST_EVERY.read(env),
        host=_pod_ip(env),
        port=settings.REPLICA_PORT.read(env),
        node=settings.NODE_NAME.read(env) or "",
        zone=settings.NODE_ZONE.read(env) or "",
        replica_limit=None if limit is None else limit << 20,
    )


_SECRET = (
    "allowed: the path of a file holding a random secret of 32 to 4096 bytes that only the "
    "gang's pods mount (a Kubernetes Secret volume; openssl rand -hex 32 makes one)"
)


def _replica_key(env: Mapping[str, str]) -> ReplicaKey:
    name = settings.REPLICA_SECRET_FILE.name
    path = settings.REPLICA_SECRET_FILE.read(env)
    if path is None:
        raise ConfigError(
            f"{settings.MEMORY_TIER_DIR.name} is set but {name} is not: a replica server "
            f"without the gang's secret would take anyone's writes and serve its weights; {_SECRET}"
        )
    try:
        return ReplicaKey.from_file(path)
    except ValueError as why:  # what is wrong with the file, never what it holds
        raise ConfigError(f"{name}={path!r:.120}: {why}; {_SECRET}") from None


def _pod_ip(env: Mapping[str, str]) -> str:
    """``POD_IP``: an address a peer can reach, so never unspecified, multicast or
    reserved (0.0.0.0 would be announced to peers as where to connect)."""
    raw = settings.POD_IP.read(env)
    if raw is None:
        return "127.0.0.1"
    allowed = "allowed: this pod's own unicast IP address (the downward API's status.podIP)"
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        raise ConfigError(f"POD_IP={raw!r:.80}: not an IP address; {allowed}") from None
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        raise ConfigError(f"POD_IP={raw!r}: not an address peers can reach; {allowed}")
    return address.compressed


def tier_disagreement(seen: list[Any]) -> str | None:
    """Why the ranks' memory tiers (each rank's :meth:`MemoryTier.agreement`, None without
    one) cannot work together, naming the setting; None when they agree."""
    ranks = range(len(seen))
    kept = [r for r in ranks if seen[r] is not None]
    if not kept or len(kept) == len(seen):
        shared = (
            (settings.PERSIST_EVERY.name, "the same on every rank"),
            (settings.REPLICA_SECRET_FILE.name, "one Secret, mounted by every pod of the gang"),
        )
        for index, (name, allowed) in enumerate(shared):
            if len({seen[r][index] for r in kept}) > 1:
                return f"{name} differs between the ranks of the gang; allowed: {allowed}"
        return None
    without = [r for r in ranks if seen[r] is None]
    return (
        f"{settings.MEMORY_TIER_DIR.name} is set on rank(s) {_ranks(kept)} but not on "
        f"{_ranks(without)}: each rank's replica is held by another, so every rank keeps a "
        f"memory tier or none does; allowed: {settings.MEMORY_TIER_DIR.name} on every rank, or "
        "on none"
    )


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def join(env: Mapping[str, str], guard: PreemptionGuard) -> Solo:
    """This process's place: :class:`Solo` alone, else rank ``RANK`` of an assembled
    :class:`Gang` (see the module for how it joins). Raises :class:`ConfigError` for a
    variable that cannot describe a gang, :class:`RendezvousInterrupted` on SIGTERM while
    waiting, :class:`PeerLost` when the others do not come in time."""
    rank, size = gang_from(env)
    tier = memory_tier(env)
    if size == 1:
        if tier is not None:
            raise ConfigError(
                f"{settings.MEMORY_TIER_DIR.name} is set but WORLD_SIZE is 1: a memory tier "
                "keeps its copy on a peer's node; allowed: a gang, or leave it unset"
            )
        return Solo()
    host, port = settings.MASTER_ADDR.read(env), settings.MASTER_PORT.read(env)
    where = f"{host}:{port}"
    seconds = settings.RENDEZVOUS_SECONDS.read(env)
    silence = settings.PEER_SILENCE_SECONDS.read(env)  # refused before the gang forms
    if dist.is_initialized():
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    else:
        _rendezvous(rank, size, seconds, guard, where)
        group = None
    gang = Gang(rank, size, tier, group)
    watch = _watch(host, port, gang, silence)
    # Every rank watches or none does: a rank that cannot would never beat, and would be
    # taken for lost by the rank watching it.
    gang.watch = watch if all(gang.exchange(watch is not None)) else None
    return gang


def _watch(host: str, port: int, gang: Gang, silence: float) -> liveness.PeerWatch | None:
    """The gang's watch over its own store at ``host:port``; None where the store cannot be
    reached from a second client (the trainer's group was formed some other way):
    collectives alone then tell of a lost rank."""
    try:
        store = liveness.connect(host, port)
    except Exception:  # torch raises its own errors for a store it cannot reach
        return None
    return liveness.PeerWatch(
        store, gang=gang.gang_id, rank=gang.rank, world_size=gang.world_size, silence=silence
    )


_RENDEZVOUS_THREAD = "spotproof-rendezvous"


def rendezvous_pending() -> bool:
    """Whether a rendezvous given up on is still inside torch. Leaving must then skip
    Python's finalization: torch's store client retries past our deadline (TCPStore waits
    its timeout, then tries again), and when it finally raises into a finalizing
    interpreter the process aborts (SIGABRT) instead of leaving with its exit code."""
    return any(
        thread.name == _RENDEZVOUS_THREAD and thread.is_alive() for thread in threading.enumerate()
    )


def _rendezvous(rank: int, size: int, seconds: float, guard: PreemptionGuard, where: str) -> None:
    failure: list[BaseException] = []
    done = threading.Event()

    def assemble() -> None:
        try:
            timeout = datetime.timedelta(seconds=seconds)
            dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timeout)
        except Exception as error:  # torch raises store, socket and backend errors here
            failure.append(error)
        finally:
            done.set()

    threading.Thread(target=assemble, name=_RENDEZVOUS_THREAD, daemon=True).start()
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
            f"{seconds:g} s ({settings.RENDEZVOUS_SECONDS.name}): {why}"
        )


class Solo:
    """One process: the whole state is its own; every agreement is with itself."""

    rank, world_size = 0, 1
    lost = False
    watch: liveness.PeerWatch | None = None

    def store(self, url: str, **options: Any) -> CheckpointStore:
        return CheckpointStore(url, **options)

    def checkpointer(self, store: CheckpointStore, **callbacks: Any) -> AsyncCheckpointer:
        """The saver over ``store``: one that persists final saves past a memory tier
        when the store has one."""
        tiered = isinstance(store, TieredGangStore)
        return (TieredCheckpointer if tiered else AsyncCheckpointer)(store, **callbacks)

    def latest(
        self, store: CheckpointStore, on_skip: Callable[[int, str], None], restore: Restore
    ) -> Checkpoint | None:
        return store.load_latest(on_skip=on_skip, restore=restore)

    def agree(self, step: int) -> int:
        return step

    def anyone(self, flag: bool) -> bool:
        return flag

    def exchange(self, value: object) -> list[object]:
        return [value]

    def digest(self, local: str) -> str:
        return local

    def close(self) -> None:
        return None

    def stop_watching(self, *, announce: bool) -> None:
        """Stop the watch; ``announce``: leaving with the gang, so that the rank watching
        this one does not take it for lost (``liveness.PeerWatch.stop``)."""
        if self.watch is not None:
            self.watch.stop(announce=announce)


class Gang(Solo):
    """Rank ``rank`` of ``world_size`` processes, agreeing over ``group`` (None: the
    default group)."""

    def __init__(
        self, rank: int, world_size: int, tier: MemoryTier | None, group: Any = None
    ) -> None:
        self.rank, self.world_size, self.tier, self.group = rank, world_size, tier, group
        drawn = [new_gang_id() if rank == 0 else None]
        self._collective(dist.broadcast_object_list, drawn, src=0)
        self.gang_id = str(drawn[0])

    def store(self, url: str, **options: Any) -> CheckpointStore:
        shape = {"rank": self.rank, "world_size": self.world_size, "gang": self.gang_id}
        problem = tier_disagreement(self.exchange(self.tier and self.tier.agreement()))
        if problem is not None:  # every rank sees the same values, so every rank says so
            raise ConfigError(problem)
        if self.tier is not None:
            return TieredGangStore(url, tier=self.tier, exchange=self.exchange, **shape, **options)
        return GangCheckpointStore(url, **shape, **options)

    def latest(
        self, store: CheckpointStore, on_skip: Callable[[int, str], None], restore: Restore
    ) -> Checkpoint | None:
        assert isinstance(store, GangCheckpointStore)
        return store.load_latest(on_skip=on_skip, agree=self.agree, restore=restore)

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
        digests = self.exchange(local)
        return hashlib.sha256("".join(str(d) for d in digests).encode()).hexdigest()

    def close(self) -> None:
        """Leave together: a rank tearing gloo down while a peer still talks to it aborts."""
        self.stop_watching(announce=True)
        if dist.is_initialized() and not self.lost:
            with contextlib.suppress(PeerLost):
                self._collective(dist.barrier)
                dist.destroy_process_group()

    def _collective(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if self.watch is not None and self.watch.lost is not None:
            self.lost = True
            raise PeerLost(f"rank {self.rank}: {self.watch.lost}")
        if self.group is not None:
            kwargs["group"] = self.group
        try:
            operation(*args, **kwargs)
        except RuntimeError as error:  # gloo's errors, DistBackendError included
            self.lost = True
            raise PeerLost(f"rank {self.rank}: a collective failed: {error}") from None
