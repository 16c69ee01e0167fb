"""What a work queue carries and promises, whatever the service behind it.

The types every queue shares: a work item and its encoding, one delivery of it (a lease),
the interface each queue implements (:class:`WorkQueue`: lease items, extend, acknowledge,
hand back) and the error of a queue that cannot be opened. The queues themselves (``sqs``,
``pubsub``, ``azure_queue``) import only this module; ``queues.open_queue`` picks one by
its URL.

Every queue delivers an item at least once, and again after its lease (visibility
timeout, ack deadline) runs out without an acknowledgement; workers make that safe by
storing results idempotently (``results``). Items travel as JSON ``{"id", "payload"}``,
both strings (``1`` and ``"1"`` would otherwise share a result).

A message that is no such item (not UTF-8, not JSON, not an object, a missing or non-string
id or payload, text that is no UTF-8) is still leased, marked :attr:`Lease.rejected`: the
worker hands it back untouched, so it alone takes the queue's dead-letter path (the
redrive of SQS, the dead-letter topic of Pub/Sub, the poison queue ``azure_queue`` keeps
on Azure), and the good messages of the same pull are worked as if it were not there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class QueueURLError(ValueError):
    """A queue that cannot be opened as its URL says (an unknown scheme, an out-of-range
    option, a missing region); the message names what is allowed."""


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
    rejected: str | None = None
    """Why the message is no work item; its ``item`` then names the message, with an
    empty payload."""


class NotAnItem(ValueError):
    """A message body that is no work item; the message says why."""


def encode(item: WorkItem) -> str:
    return json.dumps({"id": item.id, "payload": item.payload}, separators=(",", ":"))


ITEM_FIELDS = frozenset({"id", "payload"})


def decode(body: str | bytes) -> WorkItem:
    """The work item a message carries; :class:`NotAnItem` for anything else."""
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError, TypeError) as error:
        raise NotAnItem(f"not UTF-8 JSON ({type(error).__name__})") from None
    if not isinstance(data, dict):
        raise NotAnItem(f"a JSON {type(data).__name__}, not an object")
    if set(data) != ITEM_FIELDS:
        raise NotAnItem(f"fields {sorted(data)}; allowed exactly {sorted(ITEM_FIELDS)}")
    item_id, payload = data["id"], data["payload"]
    if not isinstance(item_id, str) or not item_id:
        raise NotAnItem(f"id {item_id!r:.40} is not a non-empty string")
    if not isinstance(payload, str):
        raise NotAnItem(f"payload is a {type(payload).__name__}, not a string")
    try:
        item_id.encode("utf-8")
        payload.encode("utf-8")
    except UnicodeEncodeError:
        raise NotAnItem("text that is no UTF-8 (a lone surrogate)") from None
    return WorkItem(item_id, payload)


def lease_of(body: str | bytes, attempt: int, handle: Any, message_id: str) -> Lease:
    """A lease on the message; a rejected one when the body is no work item."""
    try:
        return Lease(decode(body), attempt, handle)
    except NotAnItem as error:
        return Lease(WorkItem(f"message {message_id}", ""), attempt, handle, str(error))


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
