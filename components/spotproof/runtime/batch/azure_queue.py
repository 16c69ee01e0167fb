"""Azure Storage Queues as a work queue: visibility timeouts as leases, a poison queue.

Facts (https://learn.microsoft.com/rest/api/storageservices/queue-service-rest-api):
Get Messages hides each message for ``visibilitytimeout`` seconds (1 s to 7 days; at most
32 messages per call) and counts its ``DequeueCount``; Update Message restarts the timer
(0 shows it at once: a hand-back) and returns a new pop receipt, without which the next
update or delete fails; Delete Message needs the latest pop receipt. Storage Queues have
no dead-lettering: an item delivered more than ``max_deliveries`` times is moved here to
``<queue>-poison`` instead of being handed to a worker again. A message's time-to-live is
set by whoever sends it (seven days when not given; -1 for never): items live
``ttl_days``, poison items until someone looks at them. The connection comes from
``AZURE_STORAGE_CONNECTION_STRING`` (Azurite in the tests) or, with
``AZURE_STORAGE_ACCOUNT_NAME``, from the pod's workload identity. Neither set is a
:class:`QueueURLError` (exit 2), and so is an account that is no account's name: the name
becomes the host the pod's token is sent to, so only what Azure allows for one reaches it
(3 to 24 lowercase letters and digits:
https://learn.microsoft.com/azure/storage/common/storage-account-overview#storage-account-name).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlparse

from spotproof.runtime.batch.items import Lease, QueueURLError, WorkItem, encode, lease_of

MAX_PER_CALL = 32
POISON_SUFFIX = "-poison"
ACCOUNT_NAME = re.compile(r"[a-z0-9]{3,24}")


def account_name(queue: str, env: Mapping[str, str] = os.environ) -> str:
    """The storage account of ``AZURE_STORAGE_ACCOUNT_NAME``; :class:`QueueURLError` naming
    what is allowed when it is unset or is no account's name."""
    account = env.get("AZURE_STORAGE_ACCOUNT_NAME", "")
    if not account:
        raise QueueURLError(
            f"queue azqueue://{queue}: no storage account; allowed: "
            "AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with workload identity"
        )
    if not ACCOUNT_NAME.fullmatch(account):
        raise QueueURLError(
            f"queue azqueue://{queue}: AZURE_STORAGE_ACCOUNT_NAME={account[:40]!r} is no storage "
            "account's name; allowed: 3 to 24 lowercase letters and digits"
        )
    return account


def _client(name: str) -> Any:
    from azure.storage.queue import QueueClient  # noqa: PLC0415

    connection = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    if connection:
        return QueueClient.from_connection_string(connection, name)
    from azure.identity import DefaultAzureCredential  # noqa: PLC0415

    account = account_name(name)
    return QueueClient(f"https://{account}.queue.core.windows.net", name, DefaultAzureCredential())


NEVER_EXPIRES = -1


def from_url(url: str) -> AzureQueue | None:
    """The queue of ``azqueue://QUEUE[?max_deliveries=N&ttl_days=D]``; None for a URL of
    another shape, :class:`QueueURLError` for a setting out of its range."""
    parsed = urlparse(url)
    if not parsed.netloc or parsed.path.strip("/"):
        return None
    query = parse_qs(parsed.query)
    deliveries = _whole(url, query, "max_deliveries", 5, 100)
    return AzureQueue(parsed.netloc, deliveries, _whole(url, query, "ttl_days", 7, 365))


def _whole(url: str, query: dict[str, list[str]], name: str, default: int, most: int) -> int:
    raw = (query.get(name) or [str(default)])[0]
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise QueueURLError(f"queue URL {url!r}: {name} allowed 1..{most}")
    return int(raw)


class AzureQueue:
    def __init__(self, name: str, max_deliveries: int = 5, ttl_days: int = 7) -> None:
        self.client = _client(name)
        self.poison = _client(name + POISON_SUFFIX)
        self.max_deliveries = max_deliveries
        self.ttl_seconds = ttl_days * 86400

    def publish(self, items: Sequence[WorkItem]) -> None:
        for item in items:
            self.client.send_message(encode(item), time_to_live=self.ttl_seconds)

    def pull(self, max_items: int, lease_seconds: int) -> list[Lease]:
        leases = []
        for message in self.client.receive_messages(
            max_messages=min(max_items, MAX_PER_CALL),
            messages_per_page=min(max_items, MAX_PER_CALL),
            visibility_timeout=max(lease_seconds, 1),
        ):
            if message.dequeue_count > self.max_deliveries:
                self.poison.send_message(message.content, time_to_live=NEVER_EXPIRES)
                self.client.delete_message(message.id, message.pop_receipt)
                continue
            handle = {"id": message.id, "pop_receipt": message.pop_receipt}
            leases.append(lease_of(message.content, message.dequeue_count, handle, message.id))
        return leases

    def _visibility(self, leases: Sequence[Lease], seconds: int) -> None:
        for lease in leases:
            # Each update gives a new pop receipt; the lease keeps the latest.
            updated = self.client.update_message(
                lease.handle["id"], lease.handle["pop_receipt"], visibility_timeout=seconds
            )
            lease.handle["pop_receipt"] = updated.pop_receipt

    def extend(self, leases: Sequence[Lease], lease_seconds: int) -> None:
        self._visibility(leases, lease_seconds)

    def release(self, leases: Sequence[Lease]) -> None:
        self._visibility(leases, 0)

    def ack(self, lease: Lease) -> None:
        self.client.delete_message(lease.handle["id"], lease.handle["pop_receipt"])

    def dead_letters(self) -> int:
        return int(self.poison.get_queue_properties().approximate_message_count or 0)
