"""Work queues behind one interface, opened by URL: ``sqs://``, ``pubsub://``, ``azqueue://``.

Each queue's module states the service's lease rules; what they share (items, leases, the
:class:`~spotproof.runtime.batch.items.WorkQueue` interface) is ``items``. The services'
SDKs are imported only when a queue of theirs is opened.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

from spotproof.runtime.batch.azure_queue import AzureQueue
from spotproof.runtime.batch.items import QueueURLError, WorkQueue
from spotproof.runtime.batch.pubsub import PubSubQueue
from spotproof.runtime.batch.sqs import SqsQueue

ALLOWED = (
    "sqs://QUEUE, pubsub://PROJECT/SUBSCRIPTION, azqueue://QUEUE[?max_deliveries=N&ttl_days=D]"
)


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
        return SqsQueue(parsed.netloc)
    if parsed.scheme == "pubsub" and parsed.netloc and path and "/" not in path:
        return PubSubQueue(parsed.netloc, path)
    if parsed.scheme == "azqueue" and parsed.netloc and not path:
        query = parse_qs(parsed.query)
        deliveries = _whole(url, query, "max_deliveries", 5, 100)
        return AzureQueue(parsed.netloc, deliveries, _whole(url, query, "ttl_days", 7, 365))
    raise QueueURLError(f"queue URL {url!r} not supported; allowed: {ALLOWED}")
