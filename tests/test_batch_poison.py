"""Messages that are no work item, interleaved with good ones on each of the three queues:
every good item gets exactly its result, no good item is dead-lettered, the worker never
dies, and each bad message ends on the dead-letter path alone."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from spotproof.runtime.batch import ResultStore, run_worker
from spotproof.runtime.batch.items import NotAnItem, WorkItem, decode
from spotproof.runtime.batch.queues import open_queue
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.storage import open_store
from spotproof.smoke.batch_work import result_of
from spotproof.smoke.emulation.queues import PUBSUB_PROJECT, QueueService, emulated_queue

pytestmark = pytest.mark.processes

MAX_DELIVERIES = 5
HOSTILE = [
    "not json at all",
    "[1, 2]",
    '"a string"',
    "null",
    '{"payload": "no id"}',
    '{"id": 1, "payload": "an integer id"}',
    '{"id": null, "payload": "a null id"}',
    '{"id": "", "payload": "an empty id"}',
    '{"id": "\\ud800", "payload": "a lone surrogate"}',
    '{"id": "payload-int", "payload": 5}',
    '{"id": "extra", "payload": "x", "priority": 1}',
    "[" * 5000 + "]" * 5000,
]
PUBSUB_BAD_BYTES = b"\xff\xfe not utf-8"
"""Only Pub/Sub carries bytes; SQS and Azure take text."""
GOOD = [WorkItem(f"item-{n}", f"payload {n}") for n in range(20)] + [WorkItem("1", "one")]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "not UTF-8 JSON"),
        (b"\xff\xfe", "not UTF-8 JSON"),
        ("[1]", "a JSON list, not an object"),
        ('{"id": 1, "payload": "x"}', "id 1 is not a non-empty string"),
        ('{"id": "a", "payload": null}', "payload is a NoneType, not a string"),
        ('{"id": "a", "payload": "x", "b": 2}', "fields ['b', 'id', 'payload']"),
        ('{"id": "\\udfff", "payload": "x"}', "a lone surrogate"),
        ("[" * 100_000, "not UTF-8 JSON"),
    ],
)
def test_a_body_that_is_no_work_item_is_refused_saying_why(body: str | bytes, reason: str) -> None:
    with pytest.raises(NotAnItem) as raised:
        decode(body)
    assert reason in str(raised.value)


def test_ids_are_strings_exactly() -> None:
    assert decode('{"id": "1", "payload": "x"}') == WorkItem("1", "x")


def _send(service: QueueService, name: str, bodies: list[str]) -> None:
    """Raw bodies, as any producer (or attacker) with send rights could put them."""
    if service.kind == "sqs":
        import boto3  # noqa: PLC0415

        client = boto3.client("sqs")
        url = client.get_queue_url(QueueName=name)["QueueUrl"]
        for body in bodies:
            client.send_message(QueueUrl=url, MessageBody=body)
    elif service.kind == "azure":
        from azure.storage.queue import QueueClient  # noqa: PLC0415

        client = QueueClient.from_connection_string(
            os.environ["AZURE_STORAGE_CONNECTION_STRING"], name
        )
        for body in bodies:
            client.send_message(body)
    else:
        from google.cloud import pubsub_v1  # noqa: PLC0415

        publisher = pubsub_v1.PublisherClient()
        topic = publisher.topic_path(PUBSUB_PROJECT, name)
        for body in [*bodies, PUBSUB_BAD_BYTES]:
            data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
            publisher.publish(topic, data).result(timeout=30)


def _dead(service: QueueService, url: str) -> list[Any]:
    """Every message on the dead-letter path, as leases (rejected or not)."""
    queue = open_queue(url)
    found: list[Any] = []
    for _ in range(10):
        leases = queue.pull(10, 30)
        if not leases and found:
            break
        for lease in leases:
            found.append(lease)
            queue.ack(lease)
    return found


@pytest.fixture(scope="module", params=["sqs", "azure", "pubsub"])
def poisoned(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    with emulated_queue(request.param) as service, service.apply():
        name = f"poison-{uuid.uuid4().hex[:6]}"
        url, dead_url = service.create(name, MAX_DELIVERIES)
        queue = open_queue(url)
        # Good and bad interleaved, so that pulls mix them.
        queue.publish(GOOD[:10])
        _send(service, name, HOSTILE[:6])
        queue.publish(GOOD[10:])
        _send(service, name, HOSTILE[6:])
        results = ResultStore(open_store(service.bucket.prefix(f"poison/{name}")))
        events: list[dict[str, Any]] = []
        with PreemptionGuard(5) as guard:
            report = run_worker(
                queue,
                results,
                result_of,
                guard=guard,
                lease_seconds=10,
                stop_when_idle=15 if service.kind == "pubsub" else 5,
                max_deliveries=MAX_DELIVERIES,
                events=events.append,
            )
        yield {
            "service": service,
            "report": report,
            "results": results,
            "events": events,
            "dead": _dead(service, dead_url),
            "bad": len(HOSTILE) + (1 if service.kind == "pubsub" else 0),
        }


def test_every_good_item_gets_exactly_its_result(poisoned: dict[str, Any]) -> None:
    results = poisoned["results"]
    assert {item.id: results.get(item.id) for item in GOOD} == {
        item.id: result_of(item) for item in GOOD
    }
    assert poisoned["report"].done == len(GOOD)


def _reason(body: str | bytes) -> str:
    with pytest.raises(NotAnItem) as raised:
        decode(body)
    return str(raised.value)


def test_no_good_item_is_dead_lettered_and_every_bad_message_is(poisoned: dict[str, Any]) -> None:
    dead = poisoned["dead"]
    assert all(lease.rejected for lease in dead), [
        lease.item for lease in dead if not lease.rejected
    ]
    bodies = [*HOSTILE, *([PUBSUB_BAD_BYTES] if poisoned["service"].kind == "pubsub" else [])]
    # Pub/Sub forwards to the dead-letter topic at least once: a copy more is no loss.
    assert Counter(_reason(body) for body in bodies) <= Counter(lease.rejected for lease in dead)


def test_each_bad_message_was_handed_back_until_its_last_delivery(
    poisoned: dict[str, Any],
) -> None:
    rejected = [e for e in poisoned["events"] if e["event"] == "rejected"]
    # Each reached its last allowed delivery (Pub/Sub may deliver once more before the
    # dead-letter topic takes it).
    assert sum(e["dead_lettered"] for e in rejected) >= poisoned["bad"]
    assert all(e["reason"] for e in rejected)
    assert poisoned["report"].failed == 0 and poisoned["report"].exit_code == 0
    assert json.dumps(poisoned["report"].counts())  # the summary stays printable
