"""Restores straight into the model's tensors (``runtime.checkpointer.in_place``) and final
saves straight from them (``StateBuffer.views``): the same state, bit for bit, as the
copying paths, and never a model left half-restored by a part that fails half-way."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from spotproof.runtime import exit_codes
from spotproof.runtime.checkpointer import in_place
from spotproof.runtime.checkpointer.async_save import AsyncCheckpointer
from spotproof.runtime.checkpointer.checkpoint import Checkpoint, CheckpointStore, ReadsInPlace
from spotproof.runtime.checkpointer.gang import GangCheckpointStore
from spotproof.runtime.checkpointer.layout import manifest_key
from spotproof.runtime.checkpointer.manifest import Part, read_commit
from spotproof.runtime.checkpointer.torch_state import StateBuffer
from spotproof.smoke.data_parallel import Alone
from spotproof.smoke.emulation.object_stores import Bucket
from spotproof.smoke.train import TrainConfig, batch, build

pytestmark = pytest.mark.processes

MiB = 1 << 20
State = dict[str, torch.Tensor]


def _trained(seed: int, steps: int = 2) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """About 6 MiB of state: two 1 MiB weights, small biases, AdamW's moments and steps."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(4, 256)).square().mean().backward()
        optimizer.step()
    return model, optimizer


def _state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> State:
    """Every tensor of the training state, copied, by name."""
    state = {f"model/{k}": v.clone() for k, v in model.state_dict().items()}
    for index, slots in optimizer.state_dict()["state"].items():
        state.update({f"optim/{index}/{k}": v.clone() for k, v in slots.items()})
    return state


def _same(actual: State, expected: State) -> bool:
    return actual.keys() == expected.keys() and all(
        torch.equal(actual[k], expected[k]) for k in expected
    )


def _saved(url: str, step: int, seed: int, **options: int) -> State:
    model, optimizer = _trained(seed)
    CheckpointStore(url, **options).save(step, StateBuffer().capture(model, optimizer, step))
    return _state(model, optimizer)


def _tensor_parts(store: CheckpointStore, step: int, rank: int = 0) -> list[Part]:
    commit = read_commit(store.store.get(manifest_key(step)))
    parts = [p for p in commit.shards[rank].parts if p.blob == "tensors"]
    return sorted(parts, key=lambda p: p.index)


def _corrupt_middle_part(root: Path, store: CheckpointStore, step: int, rank: int = 0) -> Part:
    """Flip one byte of the middle part of ``step``'s tensors blob, on disk."""
    parts = _tensor_parts(store, step, rank)
    middle = parts[len(parts) // 2]
    path = root / middle.key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return middle


# --- restoring in place -------------------------------------------------------------------


def test_a_restore_writes_into_the_parameters_and_optimizer_state_already_there(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}"
    expected = _saved(url, 3, seed=1)
    model, optimizer = _trained(seed=2)
    addresses = [p.data_ptr() for p in model.parameters()]
    moments = {id(v) for slots in optimizer.state.values() for v in slots.values()}

    loaded = CheckpointStore(url).load_latest(restore=in_place.into(model, optimizer))

    assert loaded is not None and loaded.step == 3 and loaded.blobs == {}
    assert _same(_state(model, optimizer), expected)
    assert [p.data_ptr() for p in model.parameters()] == addresses
    assert {id(v) for slots in optimizer.state.values() for v in slots.values()} == moments


def test_a_replacements_optimizer_without_state_gets_it_allocated_and_filled(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}"
    expected = _saved(url, 3, seed=1)
    model, optimizer = _trained(seed=2, steps=0)
    assert not optimizer.state

    CheckpointStore(url).load_latest(restore=in_place.into(model, optimizer))

    assert _same(_state(model, optimizer), expected)
    _, reference = _trained(seed=1)
    assert optimizer.state_dict()["param_groups"] == reference.state_dict()["param_groups"]


@pytest.mark.parametrize(
    ("part_bytes", "threads"),
    [(777, 2), (64 * 1024 + 5, 8), (8 * MiB, 4)],
    ids=["parts span many tensors", "tensors span parts", "one part read as ranges"],
)
def test_parts_and_tensors_that_straddle_each_other_restore_bit_for_bit(
    tmp_path: Path, part_bytes: int, threads: int
) -> None:
    url = f"file://{tmp_path}"
    expected = _saved(url, 3, seed=1, part_bytes=part_bytes, parallelism=threads)
    model, optimizer = _trained(seed=2)
    store = CheckpointStore(url, parallelism=threads)
    store.load_latest(restore=in_place.into(model, optimizer))
    assert _same(_state(model, optimizer), expected)


def test_every_store_restores_in_place(bucket: Bucket) -> None:
    expected = _saved(bucket.url, 3, seed=1, part_bytes=1 * MiB, parallelism=4)
    model, optimizer = _trained(seed=2)
    loaded = CheckpointStore(bucket.url).load_latest(restore=in_place.into(model, optimizer))
    assert loaded is not None and _same(_state(model, optimizer), expected)


def test_tied_weights_stay_tied_and_restore(tmp_path: Path) -> None:
    def tied(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
        model[1].weight = model[0].weight
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.randn(2, 64)).sum().backward()
        optimizer.step()
        return model, optimizer

    url = f"file://{tmp_path}"
    saved_model, saved_optimizer = tied(1)
    CheckpointStore(url).save(1, StateBuffer().capture(saved_model, saved_optimizer, 1))
    model, optimizer = tied(2)
    CheckpointStore(url).load_latest(restore=in_place.into(model, optimizer))
    assert _same(_state(model, optimizer), _state(saved_model, saved_optimizer))
    assert model[1].weight is model[0].weight


def test_a_state_that_does_not_fit_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}"
    _saved(url, 3, seed=1)
    torch.manual_seed(0)
    wider = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)
    )
    optimizer = torch.optim.AdamW(wider.parameters())
    before = _state(wider, optimizer)
    skipped: list[str] = []

    loaded = CheckpointStore(url).load_latest(
        on_skip=lambda _step, why: skipped.append(why), restore=in_place.into(wider, optimizer)
    )

    assert loaded is None
    assert "does not fit this model" in skipped[0] and "has shape" in skipped[0]
    assert _same(_state(wider, optimizer), before)


# --- a part that fails half-way ----------------------------------------------------------


def test_a_part_corrupted_mid_restore_falls_back_to_the_older_step_whole(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    older = _saved(url, 1, seed=1, part_bytes=256 * 1024)
    newer = _saved(url, 2, seed=3, part_bytes=256 * 1024)
    corrupted = _corrupt_middle_part(tmp_path, CheckpointStore(url), 2)
    model, optimizer = _trained(seed=2)
    fresh = _state(model, optimizer)
    when_skipped: list[tuple[str, bool]] = []

    def skip(_step: int, why: str) -> None:  # the moment the newer one failed
        now = _state(model, optimizer)
        when_skipped.append((why, not _same(now, newer) and not _same(now, fresh)))

    store = CheckpointStore(url, parallelism=1)  # parts in order: those before it landed
    loaded = store.load_latest(on_skip=skip, restore=in_place.into(model, optimizer))

    assert when_skipped == [(f"{corrupted.key}: crc32c mismatch in 3 reads", True)]  # a mix
    assert loaded is not None and loaded.step == 1
    assert _same(_state(model, optimizer), older)


def test_a_trainer_whose_only_checkpoint_fails_half_way_refuses_to_train_from_half_a_state(
    tmp_path: Path,
) -> None:
    """The part that fails lands in the model's own tensors before it is found out, and no
    older checkpoint is there to overwrite it: training on would train from a state that
    never was, so the trainer leaves (exit 2) instead, saying why."""
    config = TrainConfig(total_steps=4, model_mb=2)
    model, owned, optimizer = build(config, Alone())
    inputs, targets = batch(config, 0, model[0].in_features)
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
    store = CheckpointStore(f"file://{tmp_path}", part_bytes=128 * 1024, parallelism=1)
    store.save(1, StateBuffer().capture(owned, optimizer, 1), config.identity())
    _corrupt_middle_part(tmp_path, store, 1)

    done = subprocess.run(
        [sys.executable, "-m", "spotproof.smoke.train"],
        env={
            "PATH": "/usr/bin:/bin",
            "CHECKPOINT_URL": f"file://{tmp_path}",
            "CHECKPOINT_INTERVAL": "1",
            "TOTAL_STEPS": "4",
            "MODEL_MB": "2",
        },
        capture_output=True,
        text=True,
        check=False,
    )

    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["event"] for e in events] == ["restoring", "skipped", "exit"], done.stderr
    assert "crc32c mismatch" in events[1]["reason"]
    assert events[2] == {
        "event": "exit",
        "code": exit_codes.BAD_CONFIG,
        "reason": "no checkpoint under the CHECKPOINT_URL fits these objects (one failed "
        "verification half-loaded); allowed: the URL of this run's checkpoints, or a new one",
    }
    assert done.returncode == exit_codes.BAD_CONFIG


class MinReduction:
    """``all_reduce(MIN)`` for a gang of threads."""

    def __init__(self, ranks: int) -> None:
        import threading  # noqa: PLC0415

        self.barrier, self.offers = threading.Barrier(ranks, timeout=30), {}

    def agree(self, rank: int) -> Callable[[int], int]:
        def agree(step: int) -> int:
            self.offers[rank] = step
            self.barrier.wait()
            agreed = min(self.offers.values())
            self.barrier.wait()
            return agreed

        return agree


def test_a_gang_falls_back_together_when_one_ranks_shard_fails_half_way(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    gang = [
        GangCheckpointStore(url, rank=r, world_size=2, gang="g1", part_bytes=256 * 1024)
        for r in range(2)
    ]
    saved: dict[tuple[int, int], State] = {}
    for step in (5, 10):
        states = [_trained(seed=10 * step + rank) for rank in range(2)]
        for rank, (model, optimizer) in enumerate(states):
            saved[rank, step] = _state(model, optimizer)
        with ThreadPoolExecutor(2) as pool:
            saves = [
                pool.submit(store.save, step, StateBuffer().capture(*states[store.rank], step))
                for store in gang
            ]
            assert all(save.result().committed for save in saves)
    _corrupt_middle_part(tmp_path, gang[1], 10, rank=1)
    replacements = [_trained(seed=99 + rank) for rank in range(2)]
    tried: list[list[int]] = [[], []]

    def restore(rank: int) -> ReadsInPlace:
        def load(checkpoint: Checkpoint) -> None:
            tried[rank].append(checkpoint.step)
            in_place.restore(*replacements[rank], checkpoint)

        return ReadsInPlace(load)

    reduction = MinReduction(2)
    with ThreadPoolExecutor(2) as pool:
        loads = [
            pool.submit(s.load_latest, None, reduction.agree(s.rank), restore(s.rank)) for s in gang
        ]
        loaded = [load.result() for load in loads]

    assert [c.step for c in loaded] == [5, 5]
    assert tried == [[10, 5], [10, 5]]  # rank 0 took step 10 whole, then gave it up
    for rank in range(2):
        assert _same(_state(*replacements[rank]), saved[rank, 5]), rank


# --- final saves straight from the tensors -----------------------------------------------


def test_views_are_the_tensors_own_memory() -> None:
    model, optimizer = _trained(seed=1)
    blobs = StateBuffer().views(model, optimizer, 3)
    addresses = {ctypes.addressof(piece.obj) for piece in blobs["tensors"].pieces}  # type: ignore[union-attr]
    assert {p.data_ptr() for p in model.parameters()} <= addresses


# 7,777 bytes: parts spanning several small tensors (biases, AdamW's steps) and splitting
# the large ones, in some 800 parts; 777 bytes said nothing more, in 8,000 parts and 40
# CPU-seconds a case.
@pytest.mark.parametrize("part_bytes", [7_777, 300 * 1024, 8 * MiB])
@pytest.mark.parametrize("prepared", [True, False], ids=["in the idle buffer", "per thread"])
def test_a_final_save_from_the_tensors_stores_what_a_captured_save_does(
    tmp_path: Path, part_bytes: int, prepared: bool
) -> None:
    model, optimizer = _trained(seed=1)
    stores = {
        kind: CheckpointStore(f"file://{tmp_path / kind}", part_bytes=part_bytes)
        for kind in ("captured", "views")
    }
    stores["captured"].save(3, StateBuffer().capture(model, optimizer, 3))
    buffer = StateBuffer()  # where parts that span tensors are assembled, when prepared
    if prepared:
        buffer.prepare(model, optimizer)
    final = AsyncCheckpointer(stores["views"]).save_final(
        3, lambda: buffer.views(model, optimizer, 3), {}
    )
    assert final.committed

    def stored(store: CheckpointStore) -> list[tuple[str, int, int, str | None, bytes]]:
        parts = read_commit(store.store.get(manifest_key(3))).shards[0].parts
        return [(p.blob, p.index, p.size, p.crc32c, store.store.get(p.key)) for p in parts]

    assert stored(stores["views"]) == stored(stores["captured"])
    restored = []
    for store in stores.values():
        target, target_optimizer = _trained(seed=2)
        store.load_latest(restore=in_place.into(target, target_optimizer))
        restored.append(_state(target, target_optimizer))
    assert _same(restored[0], _state(model, optimizer)) and _same(restored[1], restored[0])
