"""The manifest: the one object whose existence commits a checkpoint, and its format.

A manifest lists every part of every blob of one step, in order, with its size and
checksum, and each blob's total size. It is JSON::

    {"format": 3, "step": 40, "writer": "host-12-ab12cd34", "created": 1700000000.0,
     "blobs": {"state": 1048576},
     "parts": [{"key": "steps/000000000040/host-12-ab12cd34/state.00000",
                "blob": "state", "index": 0, "size": 1048576, "crc32c": "1a2b3c4d"}],
     "metadata": {...}}

Formats: 1 had sha256 per part and no blob sizes, 2 added the blob sizes, 3 (written
now by one process) checks parts with CRC32C (``runtime.checkpointer.integrity`` says
why). All load. Format 4 is a gang's manifest (:class:`GangManifest`, written by
``runtime.checkpointer.gang``): one shard per rank, each shaped like a format-3 manifest
of that rank's writer, plus the world size::

    {"format": 4, "step": 40, "created": 1700000000.0, "world_size": 2,
     "replicated": false, "metadata": {...},
     "shards": [{"writer": "g1a2b-rank00000", "blobs": {...}, "parts": [...]},
                {"writer": "g1a2b-rank00001", "blobs": {...}, "parts": [...]}]}

:func:`read_commit` reads any format as a gang (formats 1-3 as a gang of one).

A manifest is trusted only after :func:`Manifest.decode` has checked its structure: an
object of the known format, whole numbers where numbers belong (a float size is refused),
writer ids and blob names that match :data:`NAME`, every part at the key :func:`part_key`
gives its step, writer, blob and index (so two parts cannot swap places and none can point
outside its writer's prefix), part indexes of each blob contiguous from 0 with
no repeats, and part sizes adding up to the blob's size. Anything else raises
:class:`ManifestError` and the loader skips that step, so a reordered, truncated or
zero-filled blob can never be assembled from it. Format 1 manifests (no blob sizes) still
load, with every check but the total.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spotproof.runtime.checkpointer.integrity import CRC32C_HEX, crc32c_hex
from spotproof.runtime.checkpointer.layout import part_key

DEFAULT_KEEP = 3
"""Committed checkpoints retention keeps; older ones are deleted, manifest first."""
FORMAT_VERSION = 3
GANG_FORMAT = 4
READABLE_FORMATS = (1, 2, 3)
_SHA256 = re.compile(r"[0-9a-f]{64}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""What a writer id or a blob name may be: one path segment that stays where it is put
(no ``/``, no ``..``, nothing hidden), short enough for every store's key limit."""
MAX_MANIFEST_BYTES = 64 * 2**20
"""The most a manifest may hold. A part's entry takes about 150 bytes, so this names some
400,000 parts (25 TiB of state in 64 MiB parts); a loader reads no more than this of an
object in a manifest's place (a ``/dev/zero`` there would otherwise fill memory)."""
_CHECKSUM = {1: "sha256", 2: "sha256", 3: "crc32c"}
"""The checksum field of a part, per manifest format."""


class ManifestError(ValueError):
    """A manifest that must not be loaded; the message says what is wrong with it."""


@dataclass(frozen=True)
class Part:
    key: str
    """Object key relative to the checkpoint root."""
    blob: str
    """Which named blob this part belongs to."""
    index: int
    size: int
    crc32c: str | None = None
    """8 hex digits (format 3)."""
    sha256: str | None = None
    """64 hex digits (formats 1 and 2, still loaded)."""

    def mismatch(self, data: bytes | bytearray | memoryview) -> str | None:
        """Why ``data`` is not this part's content, or None when it is."""
        if len(data) != self.size:
            return f"{len(data)} bytes, manifest says {self.size}"
        if self.crc32c is not None:
            return None if crc32c_hex(data) == self.crc32c else "crc32c mismatch"
        return None if hashlib.sha256(data).hexdigest() == self.sha256 else "sha256 mismatch"

    def encode(self) -> dict[str, Any]:
        assert self.crc32c is not None, "only format-3 parts are written"
        return {k: getattr(self, k) for k in ("key", "blob", "index", "size", "crc32c")}


@dataclass(frozen=True)
class Manifest:
    step: int
    writer: str
    created: float
    parts: tuple[Part, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def blob_sizes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for part in self.parts:
            sizes[part.blob] = sizes.get(part.blob, 0) + part.size
        return sizes

    def encode(self) -> bytes:
        body = {
            "format": FORMAT_VERSION,
            "step": self.step,
            "writer": self.writer,
            "created": self.created,
            "blobs": self.blob_sizes,
            "parts": [part.encode() for part in self.parts],
            "metadata": dict(self.metadata),
        }
        return _bounded(json.dumps(body, sort_keys=True).encode())

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        """Parse and check a manifest; raises :class:`ManifestError`."""
        body = _object(data)
        if body.get("format") == GANG_FORMAT:
            raise ManifestError(
                f"step {body.get('step')!r} was checkpointed by a gang of "
                f"{body.get('world_size')!r} ranks: load it with a GangCheckpointStore"
            )
        if body.get("format") not in READABLE_FORMATS:
            raise ManifestError(f"unknown manifest format {body.get('format')!r}")
        return _manifest(body, _whole(body, "step"), body["format"])


@dataclass(frozen=True)
class GangManifest:
    """The commit of one step by a gang: every rank's shard, and how to map ranks to them."""

    step: int
    created: float
    shards: tuple[Manifest, ...]
    """Indexed by rank; each lists the parts that rank's writer uploaded."""
    replicated: bool = False
    """Every rank saved the same state, so a gang of any size may load shard 0."""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return len(self.shards)

    def encode(self) -> bytes:
        body = {
            "format": GANG_FORMAT,
            "step": self.step,
            "created": self.created,
            "world_size": self.world_size,
            "replicated": self.replicated,
            "metadata": dict(self.metadata),
            "shards": [
                {
                    "writer": shard.writer,
                    "blobs": shard.blob_sizes,
                    "parts": [part.encode() for part in shard.parts],
                }
                for shard in self.shards
            ],
        }
        return _bounded(json.dumps(body, sort_keys=True).encode())

    def shard_for(self, rank: int, world_size: int) -> Manifest:
        """What ``rank`` of a gang of ``world_size`` loads; raises :class:`GangMismatch`
        when this checkpoint cannot be split that way."""
        if world_size != self.world_size and not self.replicated:
            raise GangMismatch(
                f"step {self.step} was checkpointed by {self.world_size} ranks and this gang "
                f"has {world_size}: restart with {self.world_size} ranks (each rank's shard "
                "holds only its part of the state), or save with replicated=True"
            )
        shard = self.shards[0 if self.replicated else rank]
        return replace(shard, metadata=self.metadata)


class GangMismatch(Exception):
    """A committed checkpoint that this gang's shape cannot load. Not a
    :class:`ManifestError`: skipping it for an older step would silently lose work."""


def read_commit(data: bytes) -> GangManifest:
    """Any committed manifest, as a gang's (formats 1-3 as a gang of one writer)."""
    body = _object(data)
    if body.get("format") != GANG_FORMAT:
        single = Manifest.decode(data)
        return GangManifest(single.step, single.created, (single,), False, single.metadata)
    step = _whole(body, "step")
    created = _time(body)
    metadata = _metadata(body)
    shards = body.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ManifestError("shards is not a non-empty list")
    if body.get("world_size") != len(shards):
        raise ManifestError(f"world_size {body.get('world_size')!r} but {len(shards)} shards")
    replicated = body.get("replicated", False)
    if not isinstance(replicated, bool):
        raise ManifestError(f"replicated {replicated!r} is not true or false")
    decoded = []
    for rank, shard in enumerate(shards):
        if not isinstance(shard, dict):
            raise ManifestError(f"shard {rank} is not an object")
        decoded.append(_manifest({**shard, "step": step, "created": created}, step, GANG_FORMAT))
    writers = [shard.writer for shard in decoded]
    if len(set(writers)) != len(writers):
        raise ManifestError(f"two ranks share a writer: {writers}")
    return GangManifest(step, created, tuple(decoded), replicated, metadata)


def check_name(what: str, name: object) -> str:
    """``name`` when it is a valid writer id or blob name; :class:`ManifestError` if not."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ManifestError(
            f"{what} {name!r:.80} is not a name: 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` as a manifest carries it; :class:`ManifestError` before any upload when
    it is not JSON or would take more than half of what a manifest may hold."""
    try:
        encoded = json.dumps(dict(metadata), sort_keys=True)
    except (TypeError, ValueError, RecursionError) as error:
        raise ManifestError(f"metadata is not JSON: {error}") from None
    if len(encoded) > MAX_MANIFEST_BYTES // 2:
        raise ManifestError(
            f"metadata takes {len(encoded)} bytes as JSON; at most "
            f"{MAX_MANIFEST_BYTES // 2} fit in a manifest"
        )
    return dict(metadata)


def _bounded(encoded: bytes) -> bytes:
    if len(encoded) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"the manifest would take {len(encoded)} bytes, more than the "
            f"{MAX_MANIFEST_BYTES} a loader reads: save less metadata or larger parts"
        )
    return encoded


def _object(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ManifestError(f"not JSON ({error})") from None
    except RecursionError:
        raise ManifestError("not a manifest: JSON nested too deeply to read") from None
    if not isinstance(body, dict):
        raise ManifestError(f"not a JSON object but {type(body).__name__}")
    return body


def _time(body: Mapping[str, Any]) -> float:
    created = body.get("created")
    if isinstance(created, bool) or not isinstance(created, int | float):
        raise ManifestError(f"created {created!r} is not a time")
    if not math.isfinite(created):
        raise ManifestError(f"created {created!r} is not a time")
    return float(created)


def _metadata(body: Mapping[str, Any]) -> dict[str, Any]:
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ManifestError("metadata is not an object")
    return metadata


def _manifest(body: Mapping[str, Any], step: int, format_version: int) -> Manifest:
    """One writer's parts (a whole manifest, or a rank's shard of a gang's), checked."""
    writer = check_name("writer", body.get("writer"))
    raw_parts = body.get("parts")
    if not isinstance(raw_parts, list):
        raise ManifestError("parts is not a list")
    checksum = _CHECKSUM.get(format_version, "crc32c")
    parts = tuple(_part(raw, step, writer, checksum) for raw in raw_parts)
    manifest = Manifest(step, writer, _time(body), parts, _metadata(body))
    _check_layout(manifest, body.get("blobs") if format_version >= 2 else None)
    return manifest


def _whole(body: Mapping[str, Any], name: str, where: str = "") -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where}{name} {value!r} is not a whole number >= 0")
    return value


def _part(raw: Any, step: int, writer: str, checksum: str) -> Part:
    fields = {"key", "blob", "index", "size", checksum}
    if not isinstance(raw, dict) or set(raw) != fields:
        raise ManifestError(f"part {raw!r:.80} does not have exactly {sorted(fields)}")
    where = f"part {raw.get('key')!r}: "
    index, size = _whole(raw, "index", where), _whole(raw, "size", where)
    key, blob, digest = raw["key"], raw["blob"], raw[checksum]
    check_name(f"{where}blob", blob)
    if key != part_key(step, writer, blob, index):
        raise ManifestError(f"{where}is not where part {index} of {blob!r} belongs")
    pattern = CRC32C_HEX if checksum == "crc32c" else _SHA256
    if not isinstance(digest, str) or not pattern.fullmatch(digest):
        raise ManifestError(f"{where}{checksum} {digest!r} is not a hex digest")
    return Part(key, blob, index, size, **{checksum: digest})


def _check_layout(manifest: Manifest, declared: Any) -> None:
    """Indexes of each blob run 0..n-1 exactly once; sizes add up to the declared total."""
    indexes: dict[str, list[int]] = {}
    for part in manifest.parts:
        indexes.setdefault(part.blob, []).append(part.index)
    for blob, seen in indexes.items():
        if sorted(seen) != list(range(len(seen))):
            raise ManifestError(f"blob {blob!r}: part indexes {sorted(seen)} are not 0..n-1")
    if declared is None:
        return
    if not isinstance(declared, dict) or not all(
        isinstance(size, int) and not isinstance(size, bool) for size in declared.values()
    ):
        raise ManifestError("blobs is not an object of whole sizes")
    if declared != manifest.blob_sizes:
        raise ManifestError(
            f"part sizes {manifest.blob_sizes} do not add up to the blob sizes {declared}"
        )
