"""The manifest: the one object whose existence commits a checkpoint, and its format.

A manifest lists every part of every blob of one step, in order, with its size and
checksum, and each blob's total size. It is JSON::

    {"format": 3, "step": 40, "writer": "host-12-ab12cd34", "created": 1700000000.0,
     "blobs": {"state": 1048576},
     "parts": [{"key": "steps/000000000040/host-12-ab12cd34/state.00000",
                "blob": "state", "index": 0, "size": 1048576, "crc32c": "1a2b3c4d"}],
     "metadata": {...}}

Formats: 1 had sha256 per part and no blob sizes, 2 added the blob sizes, 3 (written
now) checks parts with CRC32C (``spotproof.runtime.integrity`` says why). All three load.

A manifest is trusted only after :func:`Manifest.decode` has checked its structure: an
object of the known format, whole numbers where numbers belong (a float size is refused),
every part at the key :func:`part_key` gives its step, writer, blob and index (so two
parts cannot swap places), part indexes of each blob contiguous from 0 with
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
from dataclasses import dataclass, field
from typing import Any

from spotproof.runtime.integrity import CRC32C_HEX, crc32c_hex

DEFAULT_KEEP = 3
"""Committed checkpoints retention keeps; older ones are deleted, manifest first."""
FORMAT_VERSION = 3
READABLE_FORMATS = (1, 2, 3)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHECKSUM = {1: "sha256", 2: "sha256", 3: "crc32c"}
"""The checksum field of a part, per manifest format."""


class ManifestError(ValueError):
    """A manifest that must not be loaded; the message says what is wrong with it."""


def manifest_key(step: int) -> str:
    """The commit object of ``step``."""
    return f"manifests/{step:012d}.json"


def step_prefix(step: int) -> str:
    """Where every writer's payload of ``step`` lives."""
    return f"steps/{step:012d}"


def part_key(step: int, writer: str, blob: str, index: int) -> str:
    """Where part ``index`` of ``blob`` goes: under the writer's own prefix of the step, so
    two writers never touch each other's payload."""
    return f"{step_prefix(step)}/{writer}/{blob}.{index:05d}"


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
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        """Parse and check a manifest; raises :class:`ManifestError`."""
        try:
            body = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ManifestError(f"not JSON ({error})") from None
        if not isinstance(body, dict):
            raise ManifestError(f"not a JSON object but {type(body).__name__}")
        if body.get("format") not in READABLE_FORMATS:
            raise ManifestError(f"unknown manifest format {body.get('format')!r}")
        step = _whole(body, "step")
        writer = body.get("writer")
        if not isinstance(writer, str) or not writer or "/" in writer:
            raise ManifestError(f"writer {writer!r} is not a writer id")
        created = body.get("created")
        if isinstance(created, bool) or not isinstance(created, int | float):
            raise ManifestError(f"created {created!r} is not a time")
        if not math.isfinite(created):
            raise ManifestError(f"created {created!r} is not a time")
        metadata = body.get("metadata", {})
        if not isinstance(metadata, dict):
            raise ManifestError("metadata is not an object")
        raw_parts = body.get("parts")
        if not isinstance(raw_parts, list):
            raise ManifestError("parts is not a list")
        parts = tuple(_part(raw, step, writer, _CHECKSUM[body["format"]]) for raw in raw_parts)
        manifest = cls(step, writer, float(created), parts, metadata)
        _check_layout(manifest, body.get("blobs") if body["format"] >= 2 else None)
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
    if not isinstance(blob, str) or not blob:
        raise ManifestError(f"{where}blob {blob!r} is not a name")
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
