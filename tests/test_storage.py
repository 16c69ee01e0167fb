"""The object stores behind checkpoints: create-only writes are refused by every emulator,
and every way of pointing at an unusable store is one clear error."""

from __future__ import annotations

from typing import Any

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from spotproof.runtime.storage import AlreadyExists, StorageError, StorageURLError, open_store
from spotproof.runtime.storage.objects import FsspecStore
from spotproof.runtime.storage.s3 import S3Store
from spotproof.smoke.emulation.object_stores import Bucket, emulated, free_port

pytestmark = pytest.mark.processes


def test_second_create_only_write_is_refused_and_first_bytes_survive(bucket: Bucket) -> None:
    store = open_store(bucket.url)
    store.put_if_absent("manifests/000000000001.json", b"first")

    with pytest.raises(AlreadyExists):
        store.put_if_absent("manifests/000000000001.json", b"second")

    assert store.get("manifests/000000000001.json") == b"first"


def test_objects_round_trip_and_list_by_prefix(bucket: Bucket) -> None:
    store = open_store(bucket.url)
    store.put("steps/000000000010/w1/state.00000", b"x" * 1000)
    store.put("steps/000000000010/w1/state.00001", memoryview(b"y" * 10))

    assert store.list("steps") == ["steps/000000000010"]
    assert sorted(store.list("steps/000000000010/w1")) == [
        "steps/000000000010/w1/state.00000",
        "steps/000000000010/w1/state.00001",
    ]
    assert store.get("steps/000000000010/w1/state.00001") == b"y" * 10
    assert store.list("nothing-here") == []


def test_deleting_a_prefix_removes_every_object_under_it(bucket: Bucket) -> None:
    store = open_store(bucket.url)
    store.put("steps/000000000010/w1/a", b"1")
    store.put("steps/000000000010/w2/b", b"2")
    store.delete_prefix("steps/000000000010")
    assert not store.exists("steps/000000000010/w1/a")
    assert not store.exists("steps/000000000010/w2/b")


class _BulkDeleteLeavesSome(MemoryFileSystem):
    """A bulk delete that, like S3's DeleteObjects under s3fs, reports nothing of the keys
    it failed to delete: the first ``misses`` deletions of each call are skipped."""

    def __init__(self, misses: int) -> None:
        super().__init__(skip_instance_cache=True)
        self.misses = misses

    def rm(self, path: Any, recursive: bool = False, maxdepth: Any = None) -> None:
        paths = [path] if isinstance(path, str) else list(path)
        skipped, self.misses = paths[: self.misses], max(0, self.misses - len(paths))
        super().rm(paths[len(skipped) :] or [], recursive=recursive)


def _memory_store(misses: int) -> FsspecStore:
    fs = _BulkDeleteLeavesSome(misses)
    fs.store.clear()
    return FsspecStore(f"memory://t{id(fs)}", fs, f"/t{id(fs)}")


def test_deleting_a_prefix_deletes_again_what_a_bulk_delete_left_without_saying() -> None:
    store = _memory_store(misses=2)
    for name in ("a", "b", "c"):
        store.put(f"steps/000000000010/w1/{name}", b"1")
    store.delete_prefix("steps/000000000010")
    assert store.list("steps/000000000010/w1") == []


def test_objects_a_bulk_delete_keeps_leaving_are_one_error_naming_them() -> None:
    store = _memory_store(misses=100)
    store.put("steps/000000000010/w1/a", b"1")
    with pytest.raises(StorageError, match=r"1 object\(s\) left after 3 passes, e\.g\. .*/w1/a"):
        store.delete_prefix("steps/000000000010")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("my-bucket/checkpoints", "unsupported scheme '(none)'"),
        ("ftp://host/x", "unsupported scheme 'ftp'"),
        ("file://relative/dir", "file URLs take no host"),
        ("s3:///no-bucket", "no bucket"),
    ],
)
def test_bad_urls_are_refused_without_falling_back_to_local_disk(url: str, says: str) -> None:
    with pytest.raises(StorageURLError) as error:
        open_store(url)
    message = str(error.value)
    assert says in message and "allowed:" in message and "\n" not in message


def test_unreachable_endpoint_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(StorageError) as error:
        open_store("s3://spotproof-smoke/x")
    assert "endpoint unreachable" in str(error.value) and "\n" not in str(error.value)


def test_missing_credentials_is_one_line(
    emulators: dict[str, Bucket], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", emulators["s3"].env["AWS_ENDPOINT_URL"])
    for variable in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageError) as error:
        open_store("s3://spotproof-smoke/x")
    assert "no usable credentials" in str(error.value)


def test_missing_bucket_is_named(
    emulators: dict[str, Bucket], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in emulators["s3"].env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(StorageError) as error:
        open_store("s3://no-such-bucket/x")
    assert "no-such-bucket" in str(error.value)


def test_reaching_an_s3_bucket_lists_only_within_the_stores_prefix() -> None:
    # The trainer's and the batch workers' roles may list only their own prefix
    # (s3:prefix); a listing of the bucket's root would be refused on a real account.
    with emulated("s3") as s3, s3.apply():
        store = open_store(s3.prefix("team-a/checkpoints"))
        assert isinstance(store, S3Store)
        prefixes: list[str] = []
        store._s3().meta.events.register(
            "before-parameter-build.s3.ListObjectsV2",
            lambda params, **_: prefixes.append(params["Prefix"]),
        )
        store.check_reachable(store.bucket)
        assert prefixes == ["team-a/checkpoints/"]
        with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
            open_store("s3://no-such-bucket/team-a/checkpoints")


def test_an_s3_existence_check_lists_within_the_prefix_instead_of_a_head() -> None:
    # For a missing key S3 answers HEAD with 403, not 404, to a role whose ListBucket is
    # conditioned on s3:prefix (a HEAD carries no prefix): the check lists instead.
    with emulated("s3") as s3, s3.apply():
        store = open_store(s3.prefix("results"))
        assert isinstance(store, S3Store)
        calls: list[str] = []
        for operation in ("HeadObject", "ListObjectsV2"):
            store._s3().meta.events.register(
                f"before-parameter-build.s3.{operation}",
                lambda operation=operation, **_: calls.append(operation),
            )
        store.put("a/b", b"x")
        assert (store.exists("a/b"), store.exists("a"), store.exists("a/b2")) == (
            True,
            False,
            False,
        )
        assert set(calls) == {"ListObjectsV2"}


def test_moto_names_a_prefix_whose_objects_are_all_deleted_where_s3_does_not(
    emulators: dict[str, Bucket],
) -> None:
    """S3 lists common prefixes of current objects only (seaweedfs#10416 compares AWS and
    Ceph); moto names one whose objects are deleted in a versioned bucket. The doc wins:
    whether a payload is gone is asked with keys_under, never one level of names."""
    with emulators["s3"].apply():
        store = open_store(emulators["s3"].prefix("phantom"))
        store.put("steps/000000000010/w1/a", b"1")
        store.delete_prefix("steps/000000000010")
        assert store.keys_under("steps/000000000010") == []
        assert store.list("steps/000000000010") == ["steps/000000000010/w1"]  # moto only
