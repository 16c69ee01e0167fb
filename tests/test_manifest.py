"""A manifest is trusted only when its structure is sound: anything else is skipped at load,
never assembled into a reordered, truncated or zero-filled blob, and never a crash."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import crc32c
import pytest

from spotproof.runtime.checkpointer import transfer
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.layout import manifest_key
from spotproof.runtime.checkpointer.manifest import Manifest, ManifestError

PART = 1024


def _committed(tmp_path: Path) -> tuple[CheckpointStore, dict[str, bytes]]:
    """A store holding good steps 10 and 20 (20 has a three-part blob)."""
    store = CheckpointStore(f"file://{tmp_path}", part_bytes=PART, keep=10)
    store.save(10, {"state": b"a" * 3 * PART})
    newest = {"state": bytes(range(256)) * 12, "meta": b"twenty"}
    store.save(20, newest)
    return store, newest


def _body(store: CheckpointStore, step: int) -> dict[str, Any]:
    return json.loads(store.store.get(manifest_key(step)))


def _replace(store: CheckpointStore, step: int, body: Any) -> None:
    store.store.delete([manifest_key(step)])
    store.store.put_if_absent(manifest_key(step), json.dumps(body).encode())


def _state_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in body["parts"] if p["blob"] == "state"]


def _why_20_is_skipped(store: CheckpointStore, body: Any) -> str:
    """With ``body`` as step 20's manifest, loading falls back to step 10: the reason it
    gives for skipping 20."""
    _replace(store, 20, body)
    loaded = store.load_latest()
    assert loaded is not None and loaded.step == 10
    return loaded.skipped[0]


@pytest.mark.parametrize("body", [[], None, "manifest", 412, 3.5, True])
def test_manifest_that_is_not_a_json_object_is_skipped(tmp_path: Path, body: Any) -> None:
    store, _ = _committed(tmp_path)
    assert "not a JSON object" in _why_20_is_skipped(store, body)


def test_part_index_skipped_is_refused(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    body["parts"] = [p for p in body["parts"] if not (p["blob"] == "state" and p["index"] == 1)]
    assert "part indexes [0, 2] are not 0..n-1" in _why_20_is_skipped(store, body)


def test_part_index_repeated_is_refused(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    body["parts"].append(dict(_state_parts(body)[0]))

    with pytest.raises(ManifestError, match=re.escape("part indexes [0, 0, 1, 2] are not")):
        Manifest.decode(json.dumps(body).encode())
    assert "part indexes [0, 0, 1, 2] are not" in _why_20_is_skipped(store, body)


def test_two_parts_swapping_indexes_are_refused(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    first, second = _state_parts(body)[:2]
    first["index"], second["index"] = second["index"], first["index"]
    assert "is not where part 1 of 'state' belongs" in _why_20_is_skipped(store, body)


def test_dropped_last_part_is_caught_by_the_blob_size(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    last = max(p["index"] for p in _state_parts(body))
    body["parts"] = [p for p in body["parts"] if not (p["blob"] == "state" and p["index"] == last)]
    assert "do not add up to the blob sizes" in _why_20_is_skipped(store, body)


@pytest.mark.parametrize(
    ("field", "value"), [("size", 1024.0), ("size", "1024"), ("size", -1), ("index", True)]
)
def test_part_number_that_is_not_a_whole_number_is_refused(
    tmp_path: Path, field: str, value: Any
) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    _state_parts(body)[0][field] = value
    assert f"{field} {value!r} is not a whole number" in _why_20_is_skipped(store, body)


def test_part_with_a_missing_or_extra_field_is_refused(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    del _state_parts(body)[0]["crc32c"]
    _state_parts(body)[1]["offset"] = 0
    assert "does not have exactly" in _why_20_is_skipped(store, body)


def test_manifest_naming_another_step_is_refused(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    assert "names step 10" in _why_20_is_skipped(store, _body(store, 10))


def _as_sha256_format(store: CheckpointStore, body: dict[str, Any], version: int) -> None:
    """Rewrite a manifest the way formats 1 and 2 wrote it: sha256 per part."""
    body["format"] = version
    for part in body["parts"]:
        del part["crc32c"]
        part["sha256"] = hashlib.sha256(store.store.get(part["key"])).hexdigest()
    if version == 1:
        del body["blobs"]


@pytest.mark.parametrize("version", [1, 2])
def test_sha256_manifests_of_earlier_formats_still_load(tmp_path: Path, version: int) -> None:
    store, newest = _committed(tmp_path)
    body = _body(store, 20)
    _as_sha256_format(store, body, version)
    _replace(store, 20, body)

    loaded = store.load_latest()

    assert loaded is not None and loaded.step == 20 and loaded.blobs == newest


def test_a_corrupt_part_under_a_sha256_manifest_is_still_caught(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    _as_sha256_format(store, body, 2)
    key = _state_parts(body)[0]["key"]
    data = bytearray(store.store.get(key))
    data[5] ^= 1
    store.store.delete([key])
    store.store.put(key, bytes(data))

    reason = _why_20_is_skipped(store, body)

    assert reason.endswith(f"sha256 mismatch in {transfer.READ_ATTEMPTS} reads")


def test_new_manifests_check_parts_with_crc32c(tmp_path: Path) -> None:
    store, newest = _committed(tmp_path)
    body = _body(store, 20)
    assert body["format"] == 3
    [part] = [p for p in body["parts"] if p["blob"] == "meta"]
    assert part["crc32c"] == f"{crc32c.crc32c(newest['meta']):08x}"


@pytest.mark.parametrize("digest", ["1A2B3C4D", "1a2b3c", "0x1a2b3c", 439041101])
def test_a_crc32c_that_is_not_8_hex_digits_is_refused(tmp_path: Path, digest: Any) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    _state_parts(body)[0]["crc32c"] = digest
    assert "is not a hex digest" in _why_20_is_skipped(store, body)


def test_a_format_3_part_with_a_sha256_is_refused(tmp_path: Path) -> None:
    store, _ = _committed(tmp_path)
    body = _body(store, 20)
    part = _state_parts(body)[0]
    part["sha256"] = "0" * 64
    del part["crc32c"]
    assert "does not have exactly" in _why_20_is_skipped(store, body)


def test_sound_manifest_round_trips(tmp_path: Path) -> None:
    store, newest = _committed(tmp_path)
    manifest = Manifest.decode(store.store.get(manifest_key(20)))
    assert manifest.blob_sizes == {name: len(blob) for name, blob in newest.items()}
    assert Manifest.decode(manifest.encode()) == manifest
