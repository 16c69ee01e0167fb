"""The commit protocol on every store: what is committed loads bit for bit, what is not is
never loaded, and a second writer cannot overwrite a committed step."""

from __future__ import annotations

import os
import threading

import pytest

from spotproof.runtime.checkpointer import transfer
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore, SaveCancelled
from spotproof.runtime.checkpointer.manifest import Manifest
from spotproof.smoke.emulation.object_stores import Bucket

PART = 64 * 1024


def _blobs(step: int, size: int = 200 * 1024) -> dict[str, bytes]:
    return {"state": bytes([step % 251]) * size + os.urandom(17), "meta": f"step {step}".encode()}


def _store(bucket: Bucket, **options: object) -> CheckpointStore:
    return CheckpointStore(bucket.url, part_bytes=PART, **options)  # type: ignore[arg-type]


def test_committed_checkpoint_loads_back_byte_for_byte(bucket: Bucket) -> None:
    store = _store(bucket)
    blobs = _blobs(10)
    result = store.save(10, blobs, {"seed": 3})

    loaded = _store(bucket).load_latest()

    assert result.committed and result.bytes == sum(map(len, blobs.values()))
    assert loaded is not None and loaded.step == 10
    assert loaded.blobs == blobs
    assert loaded.metadata == {"seed": 3}


def test_payload_is_split_into_parts_listed_in_the_manifest(bucket: Bucket) -> None:
    store = _store(bucket)
    store.save(5, _blobs(5))
    manifest = Manifest.decode(store.store.get("manifests/000000000005.json"))
    state_parts = [p for p in manifest.parts if p.blob == "state"]
    assert len(state_parts) == 4  # 200 KiB + 17 bytes in 64 KiB parts
    assert all(p.key.startswith(f"steps/000000000005/{store.writer_id}/") for p in manifest.parts)
    assert sum(p.size for p in state_parts) == 200 * 1024 + 17


def test_newest_committed_step_wins(bucket: Bucket) -> None:
    store = _store(bucket)
    for step in (10, 20, 30):
        store.save(step, _blobs(step))
    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 30


def test_flipped_byte_in_a_committed_part_falls_back_to_the_previous_step(bucket: Bucket) -> None:
    store = _store(bucket)
    previous = _blobs(10)
    store.save(10, previous)
    store.save(20, _blobs(20))
    part = Manifest.decode(store.store.get("manifests/000000000020.json")).parts[1]
    data = bytearray(store.store.get(part.key))
    data[1234] ^= 0x01
    store.store.put(part.key, bytes(data))

    skipped: list[tuple[int, str]] = []
    loaded = store.load_latest(on_skip=lambda step, why: skipped.append((step, why)))

    assert loaded is not None and loaded.step == 10 and loaded.blobs == previous
    assert skipped == [(20, f"{part.key}: crc32c mismatch in {transfer.READ_ATTEMPTS} reads")]


def test_truncated_missing_or_garbled_checkpoints_are_skipped(bucket: Bucket) -> None:
    store = _store(bucket, keep=10)
    for step in (10, 20, 30, 40):
        store.save(step, _blobs(step))
    manifests = {
        s: Manifest.decode(store.store.get(f"manifests/{s:012d}.json")) for s in (20, 30, 40)
    }
    store.store.put(manifests[40].parts[0].key, b"short")
    store.store.delete([manifests[30].parts[2].key])
    store.store.delete(["manifests/000000000020.json"])
    store.store.put("manifests/000000000020.json", b"{not json")

    loaded = store.load_latest()

    assert loaded is not None and loaded.step == 10
    assert [s.split(":")[0] for s in loaded.skipped] == ["step 40", "step 30", "step 20"]


def test_payload_without_manifest_is_never_loaded(bucket: Bucket) -> None:
    store = _store(bucket)
    store.save(10, _blobs(10))
    store.store.put("steps/000000000020/crashed-writer/state.00000", b"x" * 100)
    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 10


def test_second_writer_cannot_overwrite_a_committed_step(bucket: Bucket) -> None:
    first, second = _store(bucket), _store(bucket)
    original = _blobs(10)
    assert first.save(10, original).committed

    result = second.save(10, _blobs(99))

    assert not result.committed and result.reason == "step already committed"
    loaded = first.load_latest()
    assert loaded is not None and loaded.blobs == original


def test_racing_writers_commit_each_step_exactly_once(bucket: Bucket) -> None:
    writers = [_store(bucket, keep=100) for _ in range(2)]
    outcomes: dict[str, list[bool]] = {w.writer_id: [] for w in writers}
    barrier = threading.Barrier(2)

    def race(writer: CheckpointStore) -> None:
        for step in range(1, 6):
            barrier.wait()
            outcomes[writer.writer_id].append(writer.save(step, _blobs(step)).committed)

    threads = [threading.Thread(target=race, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    per_step = list(zip(*outcomes.values(), strict=True))
    assert all(sum(step) == 1 for step in per_step), outcomes
    reader = _store(bucket)
    assert reader.committed_steps() == [1, 2, 3, 4, 5]
    for step in range(1, 6):
        manifest = Manifest.decode(reader.store.get(f"manifests/{step:012d}.json"))
        losers = [w for w in outcomes if w != manifest.writer]
        assert manifest.writer in outcomes
        assert all(not reader.store.list(f"steps/{step:012d}/{loser}") for loser in losers)


def test_retention_keeps_the_newest_k_and_deletes_older_payload(bucket: Bucket) -> None:
    store = _store(bucket, keep=2)
    for step in (10, 20, 30, 40):
        store.save(step, _blobs(step))
    assert store.committed_steps() == [30, 40]
    assert not store.store.exists(f"steps/000000000010/{store.writer_id}/state.00000")
    assert store.store.exists(f"steps/000000000030/{store.writer_id}/state.00000")


def test_uncommitted_leftovers_older_than_the_kept_steps_are_cleaned(bucket: Bucket) -> None:
    store = _store(bucket, keep=2)
    store.store.put("steps/000000000015/dead-writer/state.00000", b"x")
    store.store.put("steps/000000000035/live-writer/state.00000", b"x")
    for step in (10, 20, 30, 40):
        store.save(step, _blobs(step))
    assert not store.store.exists("steps/000000000015/dead-writer/state.00000")
    # Newer than the oldest kept step: maybe a writer still in its grace period.
    assert store.store.exists("steps/000000000035/live-writer/state.00000")


def test_cancelled_save_commits_nothing_and_leaves_no_payload(bucket: Bucket) -> None:
    store = _store(bucket)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(SaveCancelled):
        store.save(10, _blobs(10), cancel=cancel)
    assert store.committed_steps() == []
    assert not store.store.list("steps/000000000010")


def test_keep_must_be_at_least_one(bucket: Bucket) -> None:
    with pytest.raises(ValueError, match="keep = 0"):
        CheckpointStore(bucket.url, keep=0)
