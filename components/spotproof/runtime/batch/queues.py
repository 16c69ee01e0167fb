"""Work queues behind one interface, opened by URL: ``sqs://``, ``pubsub://``, ``azqueue://``.

Each queue's module states the service's lease rules and reads its own URLs; what they
share (items, leases, the :class:`~spotproof.runtime.batch.items.WorkQueue` interface) is
``items``, and which module opens which scheme is ``queue_backends``. The services' SDKs
are imported only when a queue of theirs is opened.
"""

from __future__ import annotations

from urllib.parse import urlparse

from spotproof.runtime.batch.items import QueueURLError, WorkQueue
from spotproof.runtime.batch.queue_backends import ALLOWED, SCHEMES
from spotproof.runtime.storage.backends import load


def open_queue(url: str) -> WorkQueue:
    """The queue at ``url``; :class:`QueueURLError` if it is not one of ours."""
    backend = SCHEMES.get(urlparse(url).scheme)
    queue: WorkQueue | None = load(backend.opens)(url) if backend else None
    if queue is None:
        raise QueueURLError(f"queue URL {url!r} not supported; allowed: {ALLOWED}")
    return queue
