"""A store someone else can write to: whatever a manifest names or a directory holds, a
loader reads only regular files under the store's root, never more bytes than the format
allows, allocates only for bytes really stored, never blocks, and falls back to the
newest checkpoint that is whole. A write that would follow a link out of the root is
the URL's fault, refused as such (``StorageURLError``: no retry mends it)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.integrity import crc32c_hex
from spotproof.runtime.checkpointer.layout import manifest_key, part_key
from spotproof.runtime.checkpointer.manifest import MAX_MANIFEST_BYTES, ManifestError
from spotproof.runtime.storage import StorageURLError, Unreadable
from spotproof.smoke.emulation.object_stores import Bucket

GOOD = {"state": b"good state " * 100}


@contextlib.contextmanager
def returns_within(seconds: int) -> Iterator[None]:
    """Fails the test (instead of hanging the suite) when the block blocks."""

    def hung(*_: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _manifest(step: int, writer: str, parts: list[dict[str, object]]) -> bytes:
    blobs: dict[str, int] = {}
    for part in parts:
        blobs[str(part["blob"])] = blobs.get(str(part["blob"]), 0) + int(part["size"])  # type: ignore[call-overload]
    body = {
        "format": 3,
        "step": step,
        "writer": writer,
        "created": 1.0,
        "blobs": blobs,
        "parts": parts,
        "metadata": {},
    }
    return json.dumps(body).encode()


def _part(step: int, writer: str, data: bytes, *, blob: str = "state") -> dict[str, object]:
    key = f"steps/{step:012d}/{writer}/{blob}.00000"
    return {"key": key, "blob": blob, "index": 0, "size": len(data), "crc32c": crc32c_hex(data)}


def _with_good_step(root: Path) -> CheckpointStore:
    store = CheckpointStore(f"file://{root}")
    assert store.save(1, GOOD).committed
    return store


def _loads_the_good_step(store: CheckpointStore) -> tuple[str, ...]:
    with returns_within(20):
        loaded = CheckpointStore(store.store.url).load_latest()
    assert loaded is not None and loaded.step == 1 and loaded.blobs == GOOD
    return loaded.skipped


# --- names that leave the root ---------------------------------------------------------


def test_a_writer_named_with_dot_dot_is_skipped_and_nothing_outside_is_read(
    tmp_path: Path,
) -> None:
    secret = b"outside the store"
    (tmp_path / "secret.00000").write_bytes(secret)
    root = tmp_path / "store"
    store = _with_good_step(root)
    writer = "../../../.."
    part = {**_part(2, "w", secret), "key": f"steps/000000000002/{writer}/secret.00000"}
    (root / manifest_key(2)).write_bytes(_manifest(2, writer, [part]))

    skipped = _loads_the_good_step(store)

    assert "writer '../../../..' is not a name" in skipped[0]


def test_a_blob_named_with_dot_dot_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _with_good_step(root)
    (tmp_path / "store" / "steps" / "000000000002").mkdir(parents=True)
    part = _part(2, "w", b"x", blob="../../../secret")
    (root / manifest_key(2)).write_bytes(_manifest(2, "w", [part]))

    skipped = _loads_the_good_step(store)

    assert "blob '../../../secret' is not a name" in skipped[0]


@pytest.mark.parametrize("key", ["../secret", "/etc/passwd", "a/../../secret", "a//b", "a\0b"])
def test_a_key_that_leaves_the_root_is_refused_before_any_io(tmp_path: Path, key: str) -> None:
    (tmp_path / "secret").write_bytes(b"outside")
    store = CheckpointStore(f"file://{tmp_path / 'store'}").store
    with pytest.raises(Unreadable, match="leaves the store's root"):
        store.get(key)
    with pytest.raises(Unreadable, match="leaves the store's root"):
        store.put(key, b"overwritten")
    assert (tmp_path / "secret").read_bytes() == b"outside"


def test_a_part_linked_to_a_file_outside_the_store_is_not_read_even_with_its_checksum(
    tmp_path: Path,
) -> None:
    secret = b"outside the store, checksummed by whoever planted the link"
    (tmp_path / "secret").write_bytes(secret)
    root = tmp_path / "store"
    store = _with_good_step(root)
    part = _part(2, "w", secret)
    (root / str(part["key"])).parent.mkdir(parents=True)
    (root / str(part["key"])).symlink_to(tmp_path / "secret")
    (root / manifest_key(2)).write_bytes(_manifest(2, "w", [part]))

    skipped = _loads_the_good_step(store)

    assert "not a regular file" in skipped[0]


def test_a_writer_directory_linked_outside_the_store_is_not_read(tmp_path: Path) -> None:
    secret = b"outside the store"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "state.00000").write_bytes(secret)
    root = tmp_path / "store"
    store = _with_good_step(root)
    (root / "steps" / "000000000002").mkdir(parents=True)
    (root / "steps" / "000000000002" / "w").symlink_to(tmp_path / "elsewhere")
    (root / manifest_key(2)).write_bytes(_manifest(2, "w", [_part(2, "w", secret)]))

    skipped = _loads_the_good_step(store)

    assert "outside the store's root" in skipped[0]


def test_a_save_creates_no_directory_through_a_link_out_of_the_store(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    root = tmp_path / "store"
    store = _with_good_step(root)
    shutil.rmtree(root / "steps")
    (root / "steps").symlink_to(tmp_path / "elsewhere")

    with pytest.raises(StorageURLError, match="outside the store's root"):
        store.save(2, GOOD)

    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_save_does_not_write_through_a_link_out_of_the_store(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    root = tmp_path / "store"
    store = _with_good_step(root)
    (root / "steps" / "000000000002").mkdir(parents=True)
    (root / "steps" / "000000000002" / store.writer_id).symlink_to(tmp_path / "elsewhere")

    with pytest.raises(StorageURLError, match="outside the store's root"):
        store.save(2, GOOD)

    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("name", ["../x", "", ".hidden", "a/b", "x" * 129])
def test_a_save_refuses_a_blob_name_that_is_not_one_segment(tmp_path: Path, name: str) -> None:
    store = CheckpointStore(f"file://{tmp_path}")
    with pytest.raises(ManifestError, match="is not a name: 1-128 letters"):
        store.save(1, {name: b"x"})
    assert not (tmp_path / "steps").exists()


# --- things that are not files ---------------------------------------------------------


def test_a_fifo_in_place_of_a_part_is_skipped_without_blocking(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _with_good_step(root)
    part = _part(2, "w", b"")  # a size the listing cannot refuse: only the open can
    (root / str(part["key"])).parent.mkdir(parents=True)
    os.mkfifo(root / str(part["key"]))
    (root / manifest_key(2)).write_bytes(_manifest(2, "w", [part]))

    skipped = _loads_the_good_step(store)

    assert "not a regular file" in skipped[0]


def test_a_fifo_in_place_of_a_manifest_is_skipped_without_blocking(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _with_good_step(root)
    os.mkfifo(root / manifest_key(2))

    skipped = _loads_the_good_step(store)

    assert "not a regular file" in skipped[0]


def test_dev_zero_linked_as_a_manifest_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _with_good_step(root)
    (root / manifest_key(2)).symlink_to("/dev/zero")

    skipped = _loads_the_good_step(store)

    assert "not a regular file" in skipped[0]


@pytest.mark.parametrize("kind", ["directory", "link loop", "dangling link"])
def test_an_entry_that_is_no_file_in_place_of_a_manifest_is_skipped(
    tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "store"
    store = _with_good_step(root)
    entry = root / manifest_key(2)
    if kind == "directory":
        entry.mkdir()
    elif kind == "link loop":
        entry.symlink_to(entry)
    else:
        entry.symlink_to(root / "nowhere")

    skipped = _loads_the_good_step(store)

    assert skipped and skipped[0].startswith("step 2: ")


# --- sizes and depth -------------------------------------------------------------------


def test_a_manifest_larger_than_the_format_allows_is_read_no_further(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _with_good_step(root)
    with open(root / manifest_key(2), "wb") as sparse:
        sparse.truncate(4 * MAX_MANIFEST_BYTES)

    tracemalloc.start()
    try:
        skipped = _loads_the_good_step(store)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert f"more than the {MAX_MANIFEST_BYTES} bytes it may hold" in skipped[0]
    assert peak < 2.5 * MAX_MANIFEST_BYTES


def test_a_huge_size_claim_allocates_nothing_before_it_is_checked(bucket: Bucket) -> None:
    store = CheckpointStore(bucket.url)
    assert store.save(1, GOOD).committed
    claim = 3 * 2**30
    key = part_key(2, "w", "state", 0)
    store.store.put(key, b"ten bytes!")
    part = {"key": key, "blob": "state", "index": 0, "size": claim, "crc32c": "00000000"}
    store.store.put_if_absent(manifest_key(2), _manifest(2, "w", [part]))

    tracemalloc.start()
    try:
        loaded = CheckpointStore(bucket.url).load_latest()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert loaded is not None and loaded.step == 1 and loaded.blobs == GOOD
    assert f"10 bytes, manifest says {claim}" in loaded.skipped[0]
    assert peak < 64 * 2**20


def test_a_deeply_nested_manifest_is_skipped_not_a_recursion_error(bucket: Bucket) -> None:
    store = CheckpointStore(bucket.url)
    assert store.save(1, GOOD).committed
    store.store.put_if_absent(manifest_key(2), b"[" * 200_000 + b"]" * 200_000)

    loaded = CheckpointStore(bucket.url).load_latest()

    assert loaded is not None and loaded.step == 1
    assert "nested too deeply" in loaded.skipped[0]


@pytest.mark.parametrize("name", ["٣٣٣٣٣٣٣٣٣٣٣٣.json", "9" * 200 + ".json", "00000000002.json"])
def test_a_name_under_manifests_that_no_step_has_is_not_a_commit(tmp_path: Path, name: str) -> None:
    root = tmp_path / "store"
    store = _with_good_step(root)
    (root / "manifests" / name).write_bytes(b"{}")

    assert store.committed_steps() == [1]
    assert _loads_the_good_step(store) == ()
