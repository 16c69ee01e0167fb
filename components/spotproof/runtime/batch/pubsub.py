"""Google Cloud Pub/Sub as a work queue: unary pull, ack deadlines as leases.

Facts (https://cloud.google.com/pubsub/docs/pull, .../exactly-once-delivery,
.../handling-failures): a pulled message is redelivered once its ack deadline (10-600 s)
passes unacknowledged; ``ModifyAckDeadline`` restarts it (0 hands the message back at
once); ``delivery_attempt`` counts deliveries where the subscription has a dead-letter
policy, which forwards a message after ``max_delivery_attempts`` (5-100). With
exactly-once delivery only the latest ack ID is valid: an acknowledgement that fails is
safe to drop here, because the result is already stored and a redelivery finds it. Unary
pull is used rather than StreamingPull: a stream's leased messages stay leased for about
a minute after its worker dies, and closing a stream on the emulator strands them until
their deadline (measured; see docs/batch.md). The endpoint comes from
``PUBSUB_EMULATOR_HOST`` in the tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from spotproof.runtime.batch.items import Lease, WorkItem, encode, lease_of

MAX_ACK_DEADLINE = 600
MIN_ACK_DEADLINE = 10
PULL_TIMEOUT_SECONDS = 2.0


def _deadline(seconds: int) -> int:
    return 0 if seconds == 0 else min(max(seconds, MIN_ACK_DEADLINE), MAX_ACK_DEADLINE)


def from_url(url: str) -> PubSubQueue | None:
    """The subscription of ``pubsub://PROJECT/SUBSCRIPTION``; None for a URL of another
    shape."""
    parsed = urlparse(url)
    subscription = parsed.path.strip("/")
    if parsed.netloc and subscription and "/" not in subscription:
        return PubSubQueue(parsed.netloc, subscription)
    return None


class PubSubQueue:
    def __init__(self, project: str, subscription: str) -> None:
        from google.cloud import pubsub_v1  # noqa: PLC0415

        self.subscriber = pubsub_v1.SubscriberClient()
        self.subscription = self.subscriber.subscription_path(project, subscription)
        self._publisher: Any = None
        self._topic = ""

    def publish(self, items: Sequence[WorkItem]) -> None:
        """Publish to the subscription's topic, looked up here and not when a worker opens
        the queue: reading a subscription needs ``pubsub.subscriptions.get``, which a
        consumer's ``roles/pubsub.subscriber`` does not grant."""
        from google.cloud import pubsub_v1  # noqa: PLC0415

        if self._publisher is None:
            self._topic = self.subscriber.get_subscription(
                request={"subscription": self.subscription}
            ).topic
            self._publisher = pubsub_v1.PublisherClient()
        futures = [self._publisher.publish(self._topic, encode(item).encode()) for item in items]
        for future in futures:
            future.result(timeout=60)

    def pull(self, max_items: int, lease_seconds: int) -> list[Lease]:
        from google.api_core import exceptions  # noqa: PLC0415

        try:
            answer = self.subscriber.pull(
                request={"subscription": self.subscription, "max_messages": max_items},
                timeout=PULL_TIMEOUT_SECONDS,
            )
        except exceptions.DeadlineExceeded:
            return []
        leases = [
            lease_of(r.message.data, max(r.delivery_attempt, 1), r.ack_id, r.message.message_id)
            for r in answer.received_messages
        ]
        if leases and _deadline(lease_seconds) != MIN_ACK_DEADLINE:
            self.extend(leases, lease_seconds)
        return leases

    def _modify(self, leases: Sequence[Lease], seconds: int) -> None:
        if leases:
            self.subscriber.modify_ack_deadline(
                request={
                    "subscription": self.subscription,
                    "ack_ids": [lease.handle for lease in leases],
                    "ack_deadline_seconds": _deadline(seconds),
                }
            )

    def extend(self, leases: Sequence[Lease], lease_seconds: int) -> None:
        self._modify(leases, lease_seconds)

    def release(self, leases: Sequence[Lease]) -> None:
        self._modify(leases, 0)

    def ack(self, lease: Lease) -> None:
        from google.api_core import exceptions  # noqa: PLC0415

        # A stale ack ID (exactly-once) fails: the stored result makes the redelivery cheap.
        with contextlib.suppress(exceptions.InvalidArgument):
            self.subscriber.acknowledge(
                request={"subscription": self.subscription, "ack_ids": [lease.handle]}
            )

    def close(self) -> Any:
        return self.subscriber.close()
