"""The memory tier and peer replicas (``runtime.checkpointer.tiers``): which tier holds
which step, when a step counts as committed, and what a restarted gang chooses. Each rank
runs in a thread here, with its own node directory and its own replica server on loopback;
a node that is lost is one whose directory is gone and whose server stopped."""

from __future__ import annotations

import random
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.gang import new_gang_id
from spotproof.runtime.checkpointer.tiers import (
    HeldResult,
    MemoryTier,
    TieredGangStore,
    replica_holders,
)
from spotproof.runtime.storage import StorageError
from spotproof.runtime.storage.peer import PeerStore
from spotproof.runtime.storage.replica_auth import ReplicaKey

KEY = ReplicaKey(b"the gang's replica secret, 32 bytes or more")


class Collective:
    """All-gather among threads: what ``torch.distributed`` gives ranks."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size)
        self.values: list[Any] = [None] * size

    def gather(self, rank: int, value: Any) -> list[Any]:
        self.values[rank] = value
        self.barrier.wait()
        values = list(self.values)
        self.barrier.wait()
        return values


def in_threads(size: int, work: Callable[[int, Collective], Any]) -> list[Any]:
    collective, results, errors = Collective(size), [None] * size, []

    def run(rank: int) -> None:
        try:
            results[rank] = work(rank, collective)
        except BaseException as error:  # re-raised below, in the test's thread
            errors.append(error)
            collective.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return results


def shard(rank: int, step: int) -> bytes:
    return random.Random(rank * 100_000 + step).randbytes(256 * 1024)


class Cluster:
    """Nodes (directories) for a gang; each start is a new incarnation of the gang."""

    def __init__(self, root: Path, size: int, persist_every: int = 3) -> None:
        self.bucket = f"file://{root / 'bucket'}"
        self.root, self.size, self.persist_every = root, size, persist_every
        self.node_of = {rank: 0 for rank in range(size)}  # rank -> node generation

    def node(self, rank: int) -> Path:
        return self.root / f"node-{rank}-{self.node_of[rank]}"

    def lose_node(self, rank: int) -> None:
        shutil.rmtree(self.node(rank), ignore_errors=True)
        self.node_of[rank] += 1  # its replacement lands on a fresh node

    def start(self) -> Callable[[Callable[[TieredGangStore, Collective], Any]], list[Any]]:
        gang = new_gang_id()

        def run(work: Callable[[TieredGangStore, Collective], Any]) -> list[Any]:
            def one(rank: int, collective: Collective) -> Any:
                store = TieredGangStore(
                    self.bucket,
                    rank=rank,
                    world_size=self.size,
                    gang=gang,
                    tier=MemoryTier(str(self.node(rank)), KEY, persist_every=self.persist_every),
                    exchange=lambda value: collective.gather(rank, value),
                    part_bytes=64 * 1024,
                    shard_timeout=10,
                )
                try:
                    return work(store, collective)
                finally:
                    collective.gather(rank, None)  # a gang leaves together
                    store.close()

            return in_threads(self.size, one)

        return run

    def save_steps(self, steps: list[int]) -> list[list[Any]]:
        run = self.start()

        def work(store: TieredGangStore, _: Collective) -> list[Any]:
            return [store.save(s, {"model": shard(store.rank, s)}) for s in steps]

        return run(work)

    def restore(self) -> list[tuple[int | None, str, bytes]]:
        run = self.start()

        def work(store: TieredGangStore, collective: Collective) -> Any:
            def agree(step: int) -> int:
                return min(collective.gather(store.rank, step))

            loaded = store.load_latest(agree=agree)
            if loaded is None:
                return None, "", b""
            return loaded.step, store.loaded_from, bytes(loaded.blobs["model"])

        return run(work)


def committed(cluster: Cluster) -> list[int]:
    return CheckpointStore(cluster.bucket).committed_steps()


def test_a_periodic_save_is_held_in_memory_and_on_its_holder_not_committed(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 2)
    [[result0], [result1]] = cluster.save_steps([10])
    assert isinstance(result0, HeldResult) and not result0.committed
    assert result0.replicated and result1.replicated
    assert committed(cluster) == []
    own = list(tmp_path.glob("node-0-0/*/own/rank-00000/manifests/*.json"))
    replica = list(tmp_path.glob("node-1-0/*/replicas/rank-00000/manifests/*.json"))
    assert [p.name for p in own] == [p.name for p in replica] == ["000000000010.json"]


def test_every_persist_every_th_save_commits_to_the_bucket(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=3)
    results = cluster.save_steps([10, 20, 30, 40])
    assert [r.committed for r in results[0]] == [False, False, True, False]
    assert committed(cluster) == [30]


def test_a_rank_whose_node_is_lost_resumes_from_its_holders_replica(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=3)
    cluster.save_steps([10, 20, 30, 40, 50])  # the bucket has 30; memory has 40 and 50
    cluster.lose_node(1)
    restored = cluster.restore()
    assert [(step, tier) for step, tier, _ in restored] == [(50, "memory"), (50, "peer")]
    assert [data for _, _, data in restored] == [shard(0, 50), shard(1, 50)]


def test_losing_a_rank_and_the_holder_of_its_replica_falls_back_to_the_bucket(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 3, persist_every=3)
    cluster.save_steps([10, 20, 30, 40])
    holders = replica_holders(["", "", ""], ["", "", ""])
    cluster.lose_node(1)
    cluster.lose_node(holders[1])
    restored = cluster.restore()
    assert {step for step, _, _ in restored} == {30}
    assert [data for _, _, data in restored] == [shard(r, 30) for r in range(3)]


def test_losing_every_node_falls_back_to_the_bucket(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=2)
    cluster.save_steps([10, 20, 30])
    for rank in range(2):
        cluster.lose_node(rank)
    restored = cluster.restore()
    assert [(step, tier) for step, tier, _ in restored] == [(20, "bucket"), (20, "bucket")]


def test_memory_copies_of_two_incarnations_are_never_mixed(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=100)
    cluster.save_steps([10])
    # A node that missed a restore (and its clean-up) holds the first incarnation's step
    # 10 for rank 1, while rank 0's node holds a later incarnation's step 10.
    run = cluster.start()

    def rank0_only(store: TieredGangStore, _: Collective) -> None:
        if store.rank == 0:
            for prefix in ("manifests", "steps"):
                store.own.store.delete_prefix(prefix)
            store.own.save(10, {"model": b"another incarnation"}, {"gang": store.gang})

    run(rank0_only)
    restored = cluster.restore()
    assert [step for step, _, _ in restored] == [None, None]


def test_memory_steps_after_the_restored_one_are_deleted(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=2)
    cluster.save_steps([10, 20, 30])  # bucket 20; memory 20, 30 (keep 2)
    run = cluster.start()

    def lose_rank1_step30(store: TieredGangStore, _: Collective) -> None:
        if store.rank == 1:  # rank 1's step 30 is gone from memory and from its holder
            for held in (store.own, store.replica):
                assert held is not None
                held.store.delete(["manifests/000000000030.json"])

    run(lose_rank1_step30)
    assert [step for step, _, _ in cluster.restore()] == [20, 20]
    leftover = sorted(p.name for p in tmp_path.glob("node-*/*/*/rank-*/manifests/*.json"))
    assert "000000000030.json" not in leftover


def test_a_final_save_goes_to_the_bucket_even_when_the_step_is_held(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=100)
    run = cluster.start()

    def held_then_final(store: TieredGangStore, _: Collective) -> tuple[bool, bool]:
        blobs = {"model": shard(store.rank, 10)}
        held = store.save(10, blobs)
        store.stopping = True
        final = store.save(10, blobs)
        return held.committed, final.committed

    assert run(held_then_final) == [(False, True), (False, True)]
    assert committed(cluster) == [10]


@pytest.mark.parametrize(
    ("nodes", "zones", "holders"),
    [
        (["a", "b", "c"], ["", "", ""], [1, 2, 0]),
        (["a", "a", "b", "b"], ["", "", "", ""], [2, 2, 0, 0]),
        (["a", "b", "c", "d"], ["z1", "z1", "z2", "z2"], [2, 2, 0, 0]),
        (["a", "a"], ["", ""], [0, 1]),
    ],
)
def test_a_replica_is_held_on_another_node_in_another_zone_where_there_is_one(
    nodes: list[str], zones: list[str], holders: list[int]
) -> None:
    assert replica_holders(nodes, zones) == holders


def test_ranks_that_read_from_different_tiers_persist_the_same_saves(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, persist_every=3)
    cluster.save_steps([10, 20, 30, 40])  # bucket 30, memory 40
    cluster.lose_node(2)  # rank 2 reads 40 from its holder, the others from memory
    run = cluster.start()

    def resume_and_save(store: TieredGangStore, collective: Collective) -> list[bool]:
        def agree(step: int) -> int:
            return min(collective.gather(store.rank, step))

        loaded = store.load_latest(agree=agree)
        assert loaded is not None and loaded.step == 40
        blobs = {"model": shard(store.rank, 50)}
        return [store.save(s, blobs).committed for s in (50, 60)]

    # The bucket was behind the step resumed from: every rank persists the first save.
    assert run(resume_and_save) == [[True, False]] * 3
    assert committed(cluster) == [30, 50]


def test_a_memory_tier_that_fails_still_replicates_and_persists_on_schedule(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 2, persist_every=2)
    run = cluster.start()

    def memory_full(store: TieredGangStore, _: Collective) -> list[tuple[bool, str]]:
        def refuse(*_: Any, **__: Any) -> None:
            raise StorageError("file:///dev/shm: writing: No space left on device")

        store.own.save = refuse  # type: ignore[method-assign]
        results = [store.save(s, {"model": shard(store.rank, s)}) for s in (10, 20)]
        return [(r.committed, r.reason) for r in results]

    [rank0, _] = run(memory_full)
    assert rank0[0][0] is False and "not held in this node's memory" in rank0[0][1]
    assert "held in rank 1's" in rank0[0][1]
    assert rank0[1] == (True, "")
    assert committed(cluster) == [20]


def test_stray_names_in_a_holders_memory_never_stop_a_restart(tmp_path: Path) -> None:
    """Before: a 3-byte object named ``steps`` at the top of a holder's directory made that
    rank exit 2 (bad configuration) at every restart on that node."""
    cluster = Cluster(tmp_path, 2, persist_every=2)
    cluster.save_steps([10, 20, 30])  # the bucket has 20; memory 20 and 30
    run = cluster.start()

    def stray(store: TieredGangStore, _: Collective) -> None:
        if store.rank == 1:  # a peer writes what no rank's replica could be, on rank 0's node
            assert store.peer is not None
            top = PeerStore(store.peer.url.rsplit("/", 1)[0], KEY)
            top.put("steps", b"abc")
            top.put("rank-00009/manifests/000000000099.json/x", b"abc")
            top.put("rank-00001/manifests/000000000099.json/x", b"abc")
            top.put("rank-00001/steps/not-a-step", b"abc")

    run(stray)
    restored = cluster.restore()
    assert [step for step, _, _ in restored] == [30, 30]
    assert [data for _, _, data in restored] == [shard(0, 30), shard(1, 30)]
    holder = next(tmp_path.glob("node-0-0/*/replicas"))
    assert not (holder / "steps").exists() and not list(holder.rglob("000000000099.json"))
    manifests = sorted(p.name for p in (holder / "rank-00001" / "manifests").iterdir())
    assert manifests == ["000000000020.json", "000000000030.json"]
