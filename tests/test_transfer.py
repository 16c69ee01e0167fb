"""Parts on their way to and from the store: sized from the state, checksummed where the
store can check them, retried when the failure is transient, read back in ranges and
verified as each part completes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from spotproof.runtime.checkpointer import transfer
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.integrity import crc32c_hex, header_value
from spotproof.runtime.checkpointer.layout import manifest_key
from spotproof.runtime.checkpointer.manifest import Manifest
from spotproof.runtime.failures import Failure
from spotproof.runtime.storage import ObjectStore, StorageError, open_store
from spotproof.smoke.emulation.object_stores import Bucket

MiB = 1 << 20


# --- sizes ------------------------------------------------------------------------------


def test_threads_are_twice_the_cpus_within_4_and_16() -> None:
    assert [transfer.plan(MiB, cpus=n).threads for n in (1, 2, 4, 16)] == [4, 4, 8, 16]


def test_parts_split_the_state_in_twice_as_many_as_threads_within_4_and_64_mib() -> None:
    sizes = {mb: transfer.plan(mb * MiB, cpus=2).part_bytes // MiB for mb in (1, 64, 512, 8192)}
    assert sizes == {1: 4, 64: 8, 512: 64, 8192: 64}


def test_explicit_sizes_win() -> None:
    assert transfer.plan(512 * MiB, part_bytes=1000, threads=3) == transfer.TransferPlan(
        part_bytes=1000, threads=3
    )


# --- writing ----------------------------------------------------------------------------


class FlakyStore(ObjectStore):
    """Refuses the first ``failures`` writes with ``failure``; keeps what it is given."""

    def __init__(self, failures: int, failure: Failure) -> None:
        self.failures, self.failure, self.written = failures, failure, {}
        self.lock = threading.Lock()

    def put(self, key: str, data: Any, *, crc32c: str | None = None) -> None:
        with self.lock:
            if self.failures:
                self.failures -= 1
                raise StorageError(f"writing {key} failed", self.failure)
            self.written[key] = (bytes(data), crc32c)


def _upload(store: ObjectStore, blobs: dict[str, bytes]) -> Any:
    plan = transfer.TransferPlan(part_bytes=4, threads=1)
    return transfer.upload(store, 7, "w", blobs, plan, attempts=3, backoff=0)


def test_a_part_refused_by_a_server_error_is_written_again() -> None:
    store = FlakyStore(failures=2, failure=Failure.SERVER)
    parts = _upload(store, {"state": b"abcdefgh"})
    assert [store.written[p.key][0] for p in parts] == [b"abcd", b"efgh"]


def test_a_part_refused_for_credentials_is_not_retried() -> None:
    store = FlakyStore(failures=1, failure=Failure.DENIED)
    with pytest.raises(StorageError):
        _upload(store, {"state": b"abcdefgh"})
    assert store.written == {}


def test_retries_give_up_after_the_attempts() -> None:
    store = FlakyStore(failures=3, failure=Failure.UNREACHABLE)
    with pytest.raises(StorageError):
        _upload(store, {"state": b"abcd"})


def test_every_part_is_handed_over_with_its_crc32c() -> None:
    store = FlakyStore(failures=0, failure=Failure.OTHER)
    parts = _upload(store, {"state": b"abcdefgh", "meta": b""})
    assert {p.key: p.crc32c for p in parts} == {
        key: crc32c_hex(data) for key, (data, _) in store.written.items()
    }
    assert all(given == crc32c_hex(data) for data, given in store.written.values())


class SlowStore(FlakyStore):
    """Takes ``seconds`` over every write."""

    def __init__(self, seconds: float) -> None:
        super().__init__(0, Failure.OTHER)
        self.seconds = seconds

    def put(self, key: str, data: Any, *, crc32c: str | None = None) -> None:
        time.sleep(self.seconds)
        super().put(key, data, crc32c=crc32c)


def test_a_save_with_a_deadline_starts_no_part_the_slowest_says_cannot_end_in_time() -> None:
    store = SlowStore(0.2)
    deadline = transfer.SaveDeadline(time.monotonic() + 0.3)  # one part fits, two do not
    with pytest.raises(transfer.SaveCancelled, match=r"a part takes up to \d+\.\d s"):
        transfer.upload(
            store, 7, "w", {"state": b"abcdefgh"}, transfer.TransferPlan(4, 1), cancel=deadline
        )
    assert len(store.written) == 1 and not deadline.is_set()  # refused before the deadline


def test_a_deadline_with_time_for_every_part_changes_nothing() -> None:
    store = SlowStore(0.05)
    deadline = transfer.SaveDeadline(time.monotonic() + 10)
    parts = transfer.upload(
        store, 7, "w", {"state": b"abcdefgh"}, transfer.TransferPlan(4, 1), cancel=deadline
    )
    assert [store.written[p.key][0] for p in parts] == [b"abcd", b"efgh"]


def test_s3_parts_carry_the_crc32c_header(emulators: dict[str, Bucket]) -> None:
    shared = emulators["s3"]
    with shared.apply():
        store = open_store(shared.prefix("checksum-header"))
        sent: list[str] = []
        client = store._s3()  # type: ignore[attr-defined]
        client.meta.events.register(
            "before-send.s3.PutObject",
            lambda request, **_: sent.append(request.headers["x-amz-checksum-crc32c"].decode()),
        )
        store.put("part", b"payload", crc32c=crc32c_hex(b"payload"))
    assert sent == [header_value(crc32c_hex(b"payload"))]


def test_moto_stores_a_part_whose_crc32c_header_is_wrong(emulators: dict[str, Bucket]) -> None:
    """The emulator's gap, kept visible: AWS refuses such a PUT ("validates it with the
    provided value before storing the object", S3 user guide, checking-object-integrity);
    moto stores it (responses.py: "TODO: AWS computes the provided value and verifies it").
    When this starts failing, moto validates, and the test should say it is refused."""
    shared = emulators["s3"]
    with shared.apply():
        store = open_store(shared.prefix("checksum-gap"))
        store.put("part", b"payload", crc32c=crc32c_hex(b"another payload"))
        assert store.get("part") == b"payload"


def test_gcs_parts_carry_their_crc32c_in_the_upload_metadata(
    emulators: dict[str, Bucket],
) -> None:
    shared = emulators["gcs"]
    with shared.apply():
        store = open_store(shared.prefix("checksum-metadata"))
        http = store.bucket().client._http  # type: ignore[attr-defined]
        bodies: list[bytes] = []
        send = http.request

        def capture(method: str, url: str, data: Any = None, **kwargs: Any) -> Any:
            if "uploadType=multipart" in url:
                bodies.append(bytes(data))
            return send(method, url, data=data, **kwargs)

        http.request = capture
        store.put("part", b"payload", crc32c=crc32c_hex(b"payload"))
    [body] = bodies
    assert f'"crc32c": "{header_value(crc32c_hex(b"payload"))}"'.encode() in body


def test_fake_gcs_stores_a_part_whose_crc32c_is_wrong(emulators: dict[str, Bucket]) -> None:
    """The emulator's gap, kept visible: GCS validates the CRC32C an upload carries and
    refuses a mismatch (https://cloud.google.com/storage/docs/data-validation);
    fake-gcs-server stores it. When this starts failing, the emulator validates too."""
    shared = emulators["gcs"]
    with shared.apply():
        store = open_store(shared.prefix("checksum-gap"))
        store.put("part", b"payload", crc32c=crc32c_hex(b"another payload"))
        assert store.get("part") == b"payload"


# --- reading ----------------------------------------------------------------------------


class CountingReads:
    """Wraps a store; records every ranged read."""

    def __init__(self, store: ObjectStore) -> None:
        self.store, self.reads = store, []

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        self.reads.append((key, offset, len(buffer)))
        return self.store.read_into(key, buffer, offset)

    def sizes_under(self, prefix: str) -> dict[str, int]:
        return self.store.sizes_under(prefix)


def _load(bucket: Bucket, blobs: dict[str, bytes], threads: int) -> tuple[Any, CountingReads]:
    store = CheckpointStore(bucket.url, part_bytes=3 * MiB, parallelism=threads)
    store.save(1, blobs)
    manifest = Manifest.decode(store.store.get(manifest_key(1)))
    counting = CountingReads(store.store)
    plan = transfer.TransferPlan(part_bytes=3 * MiB, threads=threads)
    return transfer.download(counting, manifest, plan), counting  # type: ignore[arg-type]


def test_parts_are_read_whole_when_they_keep_every_thread_busy(bucket: Bucket) -> None:
    blobs = {"state": bytes(range(256)) * 4096 * 12, "meta": b"m" * 10, "empty": b""}
    loaded, counting = _load(bucket, blobs, threads=2)
    assert loaded == blobs
    assert all(offset == 0 for _, offset, _ in counting.reads)


def test_fewer_parts_than_threads_are_read_as_parallel_ranges(bucket: Bucket) -> None:
    blobs = {"state": bytes(range(256)) * 4096 * 8}  # 8 MiB: parts of 3, 3 and 2 MiB
    loaded, counting = _load(bucket, blobs, threads=8)
    assert loaded == blobs
    # Each part in ceil(8 threads / 3 parts) = 3 ranges, none under 1 MiB.
    assert len(counting.reads) == 3 + 3 + 2
    assert {size for _, _, size in counting.reads} == {MiB}


def test_a_range_read_past_the_end_of_an_object_returns_what_is_there(bucket: Bucket) -> None:
    store = open_store(bucket.url)
    store.put("object", b"0123456789")
    tail = memoryview(bytearray(8))
    assert store.read_into("object", tail, 6) == 4 and bytes(tail[:4]) == b"6789"
    assert store.read_into("object", memoryview(bytearray(4)), 20) == 0


def test_a_corrupt_byte_in_a_later_range_fails_its_part(bucket: Bucket) -> None:
    store = CheckpointStore(bucket.url, part_bytes=8 * MiB, parallelism=4)
    store.save(1, {"state": bytes(4 * MiB)})
    manifest = Manifest.decode(store.store.get(manifest_key(1)))
    [part] = manifest.parts
    data = bytearray(store.store.get(part.key))
    data[-1] ^= 0xFF
    store.store.put(part.key, bytes(data))
    plan = transfer.TransferPlan(part_bytes=8 * MiB, threads=4)
    with pytest.raises(ValueError, match=f"{part.key}: crc32c mismatch"):
        transfer.download(store.store, manifest, plan)


class DamagedOnTheWire(CountingReads):
    """The first ``damaged`` reads of every part arrive with one byte flipped (or cut
    short): what a flaky network does to bytes that are whole in the store."""

    def __init__(self, store: ObjectStore, damaged: int, *, short: bool = False) -> None:
        super().__init__(store)
        self.damaged, self.short = damaged, short
        self.seen: dict[str, int] = {}

    def read_into(self, key: str, buffer: memoryview, offset: int = 0) -> int:
        count = super().read_into(key, buffer, offset)
        self.seen[key] = self.seen.get(key, 0) + 1
        if self.seen[key] > self.damaged or not count:
            return count
        if self.short:
            return count - 1
        buffer[count - 1] ^= 0xFF
        return count


def _saved(bucket: Bucket) -> tuple[Manifest, ObjectStore, dict[str, bytes]]:
    blobs = {"state": bytes(range(256)) * 4096 * 3, "meta": b"m" * 10}
    store = CheckpointStore(bucket.url, part_bytes=1 * MiB, parallelism=2)
    store.save(1, blobs)
    return Manifest.decode(store.store.get(manifest_key(1))), store.store, blobs


@pytest.mark.parametrize("short", [False, True], ids=["flipped byte", "short read"])
def test_a_part_damaged_on_the_wire_is_read_again_not_given_up(bucket: Bucket, short: bool) -> None:
    manifest, store, blobs = _saved(bucket)
    wire = DamagedOnTheWire(store, damaged=transfer.READ_ATTEMPTS - 1, short=short)
    plan = transfer.TransferPlan(part_bytes=1 * MiB, threads=2)

    loaded = transfer.download(wire, manifest, plan)  # type: ignore[arg-type]

    assert loaded == blobs
    assert set(wire.seen.values()) == {transfer.READ_ATTEMPTS}


def test_a_part_damaged_on_every_read_fails_after_the_last_attempt(bucket: Bucket) -> None:
    manifest, store, _ = _saved(bucket)
    wire = DamagedOnTheWire(store, damaged=transfer.READ_ATTEMPTS)
    plan = transfer.TransferPlan(part_bytes=1 * MiB, threads=2)

    with pytest.raises(ValueError, match=f"crc32c mismatch in {transfer.READ_ATTEMPTS} reads"):
        transfer.download(wire, manifest, plan)  # type: ignore[arg-type]
