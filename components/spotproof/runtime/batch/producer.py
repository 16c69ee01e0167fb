"""Publish a dataset as work items, once: re-publishing does not double the work.

Each item is marked ``<prefix>/published/<digest of its id>`` (create-only) *after* it is
on the queue: a producer that dies between the two publishes that item again next time,
which the workers' idempotent results absorb; an item whose mark or result exists is not
published again. Items come from a JSON-lines or CSV manifest (an ``id`` column and a
``payload`` column) or from the object names under a prefix (the name is the id and the
payload).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from spotproof.runtime.batch.items import WorkItem, WorkQueue
from spotproof.runtime.batch.results import ResultStore
from spotproof.runtime.storage import AlreadyExists, ObjectStore

BATCH = 10


class ManifestError(ValueError):
    """A manifest that cannot be read as items; the message names the line."""


@dataclass(frozen=True)
class Published:
    published: int
    skipped: int
    """Items already published or already done."""


def mark_key(item_id: str) -> str:
    return f"published/{hashlib.sha256(item_id.encode()).hexdigest()}"


def publish(
    queue: WorkQueue, store: ObjectStore, results: ResultStore, items: Iterable[WorkItem]
) -> Published:
    published = skipped = 0
    pending: list[WorkItem] = []

    def flush() -> None:
        nonlocal published
        queue.publish(pending)
        for item in pending:
            # Another producer publishing it at the same time is harmless.
            with contextlib.suppress(AlreadyExists):
                store.put_if_absent(mark_key(item.id), b"")
        published += len(pending)
        pending.clear()

    for item in items:
        if store.exists(mark_key(item.id)) or results.exists(item.id):
            skipped += 1
            continue
        pending.append(item)
        if len(pending) == BATCH:
            flush()
    if pending:
        flush()
    return Published(published, skipped)


def from_manifest(name: str, text: str) -> Iterator[WorkItem]:
    """Items of a ``.jsonl`` (``{"id", "payload"}`` per line) or ``.csv`` manifest."""
    seen: set[str] = set()
    if name.endswith(".jsonl"):
        rows: Iterable[tuple[int, dict]] = (
            (number, _json(name, number, line))
            for number, line in enumerate(text.splitlines(), 1)
            if line.strip()
        )
    elif name.endswith(".csv"):
        rows = enumerate(csv.DictReader(io.StringIO(text)), 2)
    else:
        raise ManifestError(f"{name}: allowed manifests: .jsonl or .csv")
    for number, row in rows:
        if not isinstance(row, dict) or not row.get("id") or "payload" not in row:
            raise ManifestError(f"{name}:{number}: needs an id and a payload")
        item = WorkItem(str(row["id"]), str(row["payload"]))
        if item.id in seen:
            raise ManifestError(f"{name}:{number}: id {item.id!r} repeats an earlier line")
        seen.add(item.id)
        yield item


def _json(name: str, number: int, line: str) -> dict:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise ManifestError(f"{name}:{number}: not JSON ({error.msg})") from None


def from_prefix(store: ObjectStore, prefix: str) -> Iterator[WorkItem]:
    """One item per object under ``prefix``: its key is both id and payload."""
    for key in sorted(store.list(prefix)):
        yield WorkItem(key, key)
