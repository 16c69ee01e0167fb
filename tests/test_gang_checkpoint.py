"""A gang's checkpoints (``spotproof.runtime.checkpointer.gang``): each rank saves its
shard, a step is
committed only with every rank's shard, all ranks resume from the same step, and nothing a
dead rank or a replacement gang leaves behind is ever loaded."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from spotproof.runtime.checkpointer.checkpoint import Checkpoint, CheckpointStore, RestoreError
from spotproof.runtime.checkpointer.gang import GangCheckpointStore, GangMismatch
from spotproof.runtime.checkpointer.layout import manifest_key, shard_key
from spotproof.runtime.checkpointer.manifest import read_commit
from spotproof.smoke.emulation.object_stores import Bucket, free_port

pytestmark = pytest.mark.processes


class MinReduction:
    """What ``torch.distributed.all_reduce(ReduceOp.MIN)`` gives a gang, for threads."""

    def __init__(self, ranks: int) -> None:
        self.barrier = threading.Barrier(ranks, timeout=30)
        self.offers: dict[int, int] = {}
        self.calls = 0

    def agree(self, rank: int) -> Callable[[int], int]:
        def agree(step: int) -> int:
            self.offers[rank] = step
            self.barrier.wait()
            agreed = min(self.offers.values())
            self.barrier.wait()
            self.calls += 1
            return agreed

        return agree


def _gang(url: str, size: int, gang: str = "g1", **options: Any) -> list[GangCheckpointStore]:
    options.setdefault("shard_timeout", 10)
    return [
        GangCheckpointStore(url, rank=r, world_size=size, gang=gang, **options) for r in range(size)
    ]


def _state(rank: int, step: int) -> dict[str, bytes]:
    return {"model": f"rank {rank} step {step} ".encode() * 1000}


def _save_all(stores: list[GangCheckpointStore], step: int) -> list[Any]:
    with ThreadPoolExecutor(len(stores)) as pool:
        futures = [pool.submit(s.save, step, _state(s.rank, step), {"step": step}) for s in stores]
        return [f.result() for f in futures]


def _load_all(stores: list[GangCheckpointStore], restore: Any = None) -> list[Any]:
    reduction = MinReduction(len(stores))
    with ThreadPoolExecutor(len(stores)) as pool:
        futures = [
            pool.submit(s.load_latest, None, reduction.agree(s.rank), restore) for s in stores
        ]
        return [f.result() for f in futures]


def test_a_step_is_committed_once_with_every_ranks_shard(bucket: Bucket) -> None:
    gang = _gang(bucket.url, 3)
    results = _save_all(gang, 10)
    assert [r.committed for r in results] == [True, True, True]
    commit = read_commit(gang[0].store.get(manifest_key(10)))
    assert commit.world_size == 3
    assert [s.writer for s in commit.shards] == [g.writer_id for g in gang]


def test_each_rank_resumes_with_its_own_shard(bucket: Bucket) -> None:
    gang = _gang(bucket.url, 2)
    _save_all(gang, 10)
    loaded = _load_all(gang)
    assert [c.step for c in loaded] == [10, 10]
    assert [bytes(c.blobs["model"]) for c in loaded] == [
        _state(0, 10)["model"],
        _state(1, 10)["model"],
    ]
    assert loaded[1].metadata == {"step": 10}


def test_a_step_a_rank_never_finished_is_not_committed(tmp_path: Any) -> None:
    rank0, _rank1 = _gang(f"file://{tmp_path}", 2, shard_timeout=0.3)
    result = rank0.save(10, _state(0, 10))
    assert not result.committed
    assert "ranks [1] did not record their shard of step 10" in result.reason
    assert not rank0.store.exists(manifest_key(10))


def test_ranks_fall_back_together_when_one_shard_of_the_newest_step_is_corrupt(
    tmp_path: Any,
) -> None:
    gang = _gang(f"file://{tmp_path}", 2)
    _save_all(gang, 10)
    _save_all(gang, 20)
    [key] = [
        k
        for k in gang[1].store.list(f"steps/000000000020/{gang[1].writer_id}")
        if k.endswith(".00000")
    ]
    data = bytearray(gang[1].store.get(key))
    data[0] ^= 0xFF
    gang[1].store.put(key, bytes(data))

    loaded = _load_all(gang)

    assert [c.step for c in loaded] == [10, 10]  # rank 0's step 20 verified, yet it follows
    assert bytes(loaded[0].blobs["model"]) == _state(0, 10)["model"]


def test_ranks_fall_back_together_when_one_rank_cannot_restore_the_newest_step(
    tmp_path: Any,
) -> None:
    gang = _gang(f"file://{tmp_path}", 2)
    _save_all(gang, 10)
    _save_all(gang, 20)
    restored: list[tuple[int, int]] = []

    def restore(checkpoint: Checkpoint) -> None:
        rank = int(bytes(checkpoint.blobs["model"]).split()[1])
        if (rank, checkpoint.step) == (1, 20):
            raise RestoreError("rank 1 cannot take step 20")
        restored.append((rank, checkpoint.step))

    loaded = _load_all(gang, restore)

    assert [c.step for c in loaded] == [10, 10]
    assert sorted(restored) == [(0, 10), (0, 20), (1, 10)]  # the last restore is the step


def test_a_gang_with_nothing_committed_starts_fresh_together(tmp_path: Any) -> None:
    assert _load_all(_gang(f"file://{tmp_path}", 2)) == [None, None]


def test_a_replacement_gang_never_overwrites_a_committed_step(bucket: Bucket) -> None:
    first = _gang(bucket.url, 2, gang="first")
    _save_all(first, 10)
    committed = first[0].store.get(manifest_key(10))

    second = _gang(bucket.url, 2, gang="second")
    for store in second:  # it looked before the first gang's commit landed
        store.store.exists = lambda key, exists=store.store.exists: (
            key != manifest_key(10) and exists(key)
        )
    second_results = _save_all(second, 10)

    assert [r.reason for r in second_results] == ["another writer committed this step first"] * 2
    assert first[0].store.get(manifest_key(10)) == committed
    for store in second:  # its payload is gone
        assert not store.store.list(f"steps/000000000010/{store.writer_id}")
    assert [bytes(c.blobs["model"]) for c in _load_all(second)] == [
        _state(0, 10)["model"],
        _state(1, 10)["model"],
    ]


def test_rank_zero_commits_a_gang_that_lost_the_race_to_nobody(tmp_path: Any) -> None:
    """Another gang's shards of the same step are never mixed into this gang's commit."""
    url = f"file://{tmp_path}"
    old = _gang(url, 2, gang="old")
    # The old gang's rank 1 records a shard of step 10 and waits; its rank 0 is gone.
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(old[1].save, 10, _state(1, 10))
        new = _gang(url, 2, gang="new")
        results = _save_all(new, 10)
        old_result = pending.result()
    assert [r.committed for r in results] == [True, True]
    assert not old_result.committed
    commit = read_commit(new[0].store.get(manifest_key(10)))
    assert [s.writer for s in commit.shards] == [new[0].writer_id, new[1].writer_id]


def test_a_gang_of_another_size_is_refused_with_the_sizes_named(tmp_path: Any) -> None:
    url = f"file://{tmp_path}"
    _save_all(_gang(url, 2), 10)
    with pytest.raises(GangMismatch, match="checkpointed by 2 ranks and this gang has 3"):
        _load_all(_gang(url, 3, gang="g2"))


def test_a_single_process_cannot_load_a_gangs_shards(tmp_path: Any) -> None:
    url = f"file://{tmp_path}"
    _save_all(_gang(url, 2), 10)
    with pytest.raises(GangMismatch, match="this gang has 1"):
        CheckpointStore(url).load_latest()


def test_a_replicated_checkpoint_loads_at_any_size(tmp_path: Any) -> None:
    url = f"file://{tmp_path}"
    _save_all(_gang(url, 2, replicated=True), 10)
    loaded = _load_all(_gang(url, 3, gang="g2"))
    assert [bytes(c.blobs["model"]) for c in loaded] == [_state(0, 10)["model"]] * 3
    assert CheckpointStore(url).load_latest() is not None


def test_a_gang_of_one_reads_single_process_checkpoints(tmp_path: Any) -> None:
    url = f"file://{tmp_path}"
    CheckpointStore(url).save(10, _state(0, 10))
    [alone] = _gang(url, 1)
    loaded = alone.load_latest()
    assert loaded is not None and loaded.step == 10


def test_only_rank_zero_prunes(tmp_path: Any) -> None:
    gang = _gang(f"file://{tmp_path}", 2, keep=1)
    for step in (10, 20, 30):
        _save_all(gang, step)
    assert gang[0].committed_steps() == [30]
    assert gang[1].store.list("steps") == ["steps/000000000030"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rank": 2, "world_size": 2, "gang": "g"}, "need 0 <= rank < size"),
        ({"rank": 0, "world_size": 2, "gang": "a/b"}, "gang id 'a/b'"),
        ({"rank": 0, "world_size": 2, "gang": "g", "writer_id": "w"}, "writer ids come from"),
    ],
)
def test_bad_gang_settings_are_refused(tmp_path: Any, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GangCheckpointStore(f"file://{tmp_path}", **options)


def test_more_than_one_rank_must_say_how_to_agree(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="must agree"):
        _gang(f"file://{tmp_path}", 2)[0].load_latest()


# --- real processes, killed for real --------------------------------------------------

RANK_PROCESS = """
import json, random, sys
from spotproof.runtime.checkpointer.gang import GangCheckpointStore

url, rank, size, gang = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
store = GangCheckpointStore(
    url, rank=rank, world_size=size, gang=gang, part_bytes=256 * 1024, shard_timeout=3
)
for step in range(1, 1000):
    state = random.Random(rank * 100_000 + step).randbytes(4 * 2**20)
    result = store.save(step, {"model": state})
    print(json.dumps({"step": step, "committed": result.committed}), flush=True)
"""


def _caught_mid_shard(observer: GangCheckpointStore) -> int | None:
    """The step whose parts the observed rank has begun and whose shard record it has
    not written, if it is in one (looked at while it is stopped)."""
    steps = sorted(
        int(name.rstrip("/").rsplit("/", 1)[-1]) for name in observer.store.list("steps")
    )
    for step in reversed(steps[-2:]):
        names = observer.store.list(f"steps/{step:012d}/{observer.writer_id}")
        if names and not any(name.endswith("shard.json") for name in names):
            return step
    return None


def _expected(rank: int, step: int) -> bytes:
    return random.Random(rank * 100_000 + step).randbytes(4 * 2**20)


@pytest.mark.parametrize("bucket", ["file", "s3"], indirect=True)
def test_a_rank_killed_mid_shard_never_leaves_a_loadable_half_step(bucket: Bucket) -> None:

    env = {**os.environ, **bucket.env}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_PROCESS, bucket.url, str(r), "2", "victims"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(2)
    ]
    observer = GangCheckpointStore(bucket.url, rank=1, world_size=2, gang="victims")
    reports: list[dict] = []
    try:
        # A step commits before the hunt begins: while rank 1 is stopped and looked at,
        # rank 0 may give up on every step it waits for, and on a busy machine that can
        # be all of them up to the kill.
        assert ranks[0].stdout is not None
        while not any(r["committed"] for r in reports):
            reports.append(json.loads(ranks[0].stdout.readline()))
        # Catch rank 1 inside the upload of step 3 or later (some parts written, its shard
        # record not yet): stopped at a random moment (SIGSTOP) and looked at while it
        # cannot move on, then killed there or let go. A busy machine only makes the
        # looks slower, never lets the window pass unseen.
        deadline = time.monotonic() + 120
        killed_in = None
        while killed_in is None and time.monotonic() < deadline:
            time.sleep(random.uniform(0, 0.05))
            ranks[1].send_signal(signal.SIGSTOP)
            step = _caught_mid_shard(observer)
            if step is not None and step >= 3:
                ranks[1].send_signal(signal.SIGKILL)
                killed_in = step
            else:
                ranks[1].send_signal(signal.SIGCONT)
        assert killed_in is not None, "rank 1 was never caught mid-upload"
        ranks[1].wait()
        # Rank 0 gives up on that step, and on the next; then it is killed too, anywhere.
        while not reports or reports[-1]["step"] < killed_in + 1:
            reports.append(json.loads(ranks[0].stdout.readline()))
        ranks[0].send_signal(signal.SIGKILL)
        ranks[0].wait()
    finally:
        for process in ranks:
            process.kill()
            process.wait()

    committed = [r["step"] for r in reports if r["committed"]]
    assert committed, "no step was committed before the kill"
    # No step after the kill commits. The step rank 1 was caught in commits only if its
    # upload finished between our look and the signal: exactly when its shard is recorded.
    assert max(committed) <= killed_in
    recorded = observer.store.exists(shard_key(killed_in, observer.writer_id))
    assert (killed_in in committed) == recorded
    loaded = _load_all(_gang(bucket.url, 2, gang="survivors"))
    newest = max(committed)
    assert [c.step for c in loaded] == [newest, newest]
    assert [bytes(c.blobs["model"]) for c in loaded] == [
        _expected(0, newest),
        _expected(1, newest),
    ]


TORCH_RANK = """
import json, os, sys
import torch
import torch.distributed as dist
from spotproof.runtime.checkpointer.gang import GangCheckpointStore, new_gang_id

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
gang = [new_gang_id() if rank == 0 else None]
dist.broadcast_object_list(gang, src=0)
store = GangCheckpointStore(sys.argv[1], rank=rank, world_size=size, gang=gang[0])


def agree(step):
    value = torch.tensor([step])
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value)


latest = store.load_latest(agree=agree)
start = latest.step if latest else 0
result = store.save(start + 10, {"model": f"rank {rank} step {start + 10}".encode()})
print(json.dumps({"rank": rank, "gang": gang[0], "resumed": start, "committed": result.committed}))
dist.destroy_process_group()
"""


def _torch_gang(url: str, size: int) -> list[dict[str, Any]]:
    """One start of a gang of ``size`` processes over torch.distributed (gloo)."""
    port = str(free_port())
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", TORCH_RANK, url],
            stdout=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "RANK": str(rank),
                "WORLD_SIZE": str(size),
            },
        )
        for rank in range(size)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in processes]
    assert [p.returncode for p in processes] == [0] * size, outputs
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def test_the_readme_recipe_over_torch_distributed_resumes_every_rank_together(
    tmp_path: Any,
) -> None:
    url = f"file://{tmp_path}"
    first = _torch_gang(url, 2)
    second = _torch_gang(url, 2)
    assert [r["resumed"] for r in first] == [0, 0]
    assert [r["resumed"] for r in second] == [10, 10]
    assert all(r["committed"] for r in first + second)
    assert len({r["gang"] for r in first}) == 1 and first[0]["gang"] != second[0]["gang"]
