"""Work queues behind one interface: lease items, extend, acknowledge, hand back.

Every queue here delivers an item at least once, and again after its lease (visibility
timeout, ack deadline) runs out without an acknowledgement; workers make that safe by
storing results idempotently (``results``). Items travel as JSON ``{"id", "payload"}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse


class QueueURLError(ValueError):
    """A queue URL this module cannot open; the message names what is allowed."""


ALLOWED = (
    "sqs://QUEUE, pubsub://PROJECT/SUBSCRIPTION, azqueue://QUEUE[?max_deliveries=N&ttl_days=D]"
)


@dataclass(frozen=True)
class WorkItem:
    id: str
    """Unique per item of the dataset: the result's key comes from it."""
    payload: str


@dataclass(frozen=True)
class Lease:
    """One delivery of an item to this worker."""

    item: WorkItem
    attempt: int
    """1 on the first delivery; more after redeliveries."""
    handle: Any
    """What the queue needs to extend, acknowledge or release this delivery."""


def encode(item: WorkItem) -> str:
    return json.dumps({"id": item.id, "payload": item.payload}, separators=(",", ":"))


def decode(body: str | bytes) -> WorkItem:
    data = json.loads(body)
    return WorkItem(str(data["id"]), str(data["payload"]))


class WorkQueue(Protocol):
    def publish(self, items: Sequence[WorkItem]) -> None: ...

    def pull(self, max_items: int, lease_seconds: int) -> list[Lease]:
        """Up to ``max_items`` items, each hidden from others for ``lease_seconds``; waits
        briefly for some, returns an empty list if there are none."""
        ...

    def extend(self, leases: Sequence[Lease], lease_seconds: int) -> None:
        """Keep ``leases`` for another ``lease_seconds`` from now."""
        ...

    def ack(self, lease: Lease) -> None:
        """The item is done: never deliver it again (at least, not on purpose)."""
        ...

    def release(self, leases: Sequence[Lease]) -> None:
        """Hand the items back now, for another worker, without waiting for the lease."""
        ...


def _whole(url: str, query: dict[str, list[str]], name: str, default: int, most: int) -> int:
    raw = (query.get(name) or [str(default)])[0]
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise QueueURLError(f"queue URL {url!r}: {name} allowed 1..{most}")
    return int(raw)


def open_queue(url: str) -> WorkQueue:
    """The queue at ``url``; :class:`QueueURLError` if the scheme is not one of ours."""
    parsed = urlparse(url)
    path = parsed.path.strip("/")
    if parsed.scheme == "sqs" and parsed.netloc and not path:
        from spotproof.runtime.batch.sqs import SqsQueue  # noqa: PLC0415

        return SqsQueue(parsed.netloc)
    if parsed.scheme == "pubsub" and parsed.netloc and path and "/" not in path:
        from spotproof.runtime.batch.pubsub import PubSubQueue  # noqa: PLC0415

        return PubSubQueue(parsed.netloc, path)
    if parsed.scheme == "azqueue" and parsed.netloc and not path:
        from spotproof.runtime.batch.azure_queue import AzureQueue  # noqa: PLC0415

        query = parse_qs(parsed.query)
        deliveries = _whole(url, query, "max_deliveries", 5, 100)
        return AzureQueue(parsed.netloc, deliveries, _whole(url, query, "ttl_days", 7, 365))
    raise QueueURLError(f"queue URL {url!r} not supported; allowed: {ALLOWED}")
