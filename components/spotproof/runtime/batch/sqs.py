"""Amazon SQS as a work queue: visibility timeouts as leases.

Facts (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/):
``ReceiveMessage`` hides what it returns for ``VisibilityTimeout`` seconds (0-43200) and
gives ``ApproximateReceiveCount`` per message; ``ChangeMessageVisibility`` restarts that
timer (0 makes the message visible at once: a hand-back); ``DeleteMessage`` with the latest
receipt handle acknowledges. At most 10 messages per receive, and 20 s of long polling.
A standard queue may deliver a message twice even after a delete, and a redrive policy
moves a message to the dead-letter queue after ``maxReceiveCount`` receives. The endpoint
comes from boto3's environment (``AWS_ENDPOINT_URL``: moto in the tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from spotproof.runtime.batch.items import Lease, QueueURLError, WorkItem, encode, lease_of

MAX_PER_CALL = 10
WAIT_SECONDS = 1
"""Long polling per receive: short, so a worker notices SIGTERM soon."""


def from_url(url: str) -> SqsQueue | None:
    """The queue of ``sqs://QUEUE``; None for a URL of another shape."""
    parsed = urlparse(url)
    return SqsQueue(parsed.netloc) if parsed.netloc and not parsed.path.strip("/") else None


class SqsQueue:
    def __init__(self, name: str, client: Any = None) -> None:
        import boto3  # noqa: PLC0415
        from botocore.exceptions import NoRegionError  # noqa: PLC0415

        try:
            self.client = client or boto3.client("sqs")
        except NoRegionError:
            raise QueueURLError(
                f"queue sqs://{name}: no AWS region; set AWS_REGION (IRSA and EKS Pod "
                "Identity set it for a pod)"
            ) from None
        self.url = self.client.get_queue_url(QueueName=name)["QueueUrl"]

    def publish(self, items: Sequence[WorkItem]) -> None:
        for start in range(0, len(items), MAX_PER_CALL):
            batch = items[start : start + MAX_PER_CALL]
            entries = [{"Id": str(i), "MessageBody": encode(item)} for i, item in enumerate(batch)]
            failed = self.client.send_message_batch(QueueUrl=self.url, Entries=entries).get(
                "Failed"
            )
            if failed:
                raise RuntimeError(f"SQS refused {len(failed)} item(s): {failed[0].get('Message')}")

    def pull(self, max_items: int, lease_seconds: int) -> list[Lease]:
        answer = self.client.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=min(max_items, MAX_PER_CALL),
            VisibilityTimeout=lease_seconds,
            WaitTimeSeconds=WAIT_SECONDS,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        return [
            lease_of(
                message["Body"],
                int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
                message["ReceiptHandle"],
                message.get("MessageId", "?"),
            )
            for message in answer.get("Messages", [])
        ]

    def _visibility(self, leases: Sequence[Lease], seconds: int) -> None:
        for start in range(0, len(leases), MAX_PER_CALL):
            entries = [
                {"Id": str(i), "ReceiptHandle": lease.handle, "VisibilityTimeout": seconds}
                for i, lease in enumerate(leases[start : start + MAX_PER_CALL])
            ]
            self.client.change_message_visibility_batch(QueueUrl=self.url, Entries=entries)

    def extend(self, leases: Sequence[Lease], lease_seconds: int) -> None:
        self._visibility(leases, lease_seconds)

    def release(self, leases: Sequence[Lease]) -> None:
        self._visibility(leases, 0)

    def ack(self, lease: Lease) -> None:
        self.client.delete_message(QueueUrl=self.url, ReceiptHandle=lease.handle)

    def depth(self) -> int:
        attributes = self.client.get_queue_attributes(
            QueueUrl=self.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())
