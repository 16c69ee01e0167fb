"""Queue-fed batch workers (``spotproof.runtime.batch``) against SQS on moto server: real
worker processes, real signals, results stored once and acknowledged only once durable."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from spotproof.runtime import exit_codes
from spotproof.runtime.batch import ResultStore, WorkItem, run_worker
from spotproof.runtime.batch.azure_queue import AzureQueue
from spotproof.runtime.batch.items import QueueURLError, decode
from spotproof.runtime.batch.producer import ManifestError, from_manifest, publish
from spotproof.runtime.batch.queues import open_queue
from spotproof.runtime.batch.sqs import SqsQueue
from spotproof.runtime.batch.table import open_table
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.storage import StorageError, open_store
from spotproof.smoke.batch_work import WORKER_COMMAND, result_of
from spotproof.smoke.emulation.object_stores import Bucket, emulated
from spotproof.smoke.emulation.queues import emulated_queue
from spotproof.smoke.processes.trainer_process import TrainerProcess
from spotproof.smoke.runs.batch import BatchConfig, BatchReport, run_batch_smoke
from tests.support import run_cli

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def moto() -> Iterator[Bucket]:
    with emulated("s3") as bucket, bucket.apply():
        yield bucket


def _queue(dead_after: int | None = None) -> SqsQueue:
    client = boto3.client("sqs")
    name = f"q-{uuid.uuid4().hex[:8]}"
    attributes = {}
    if dead_after:
        dead = client.create_queue(QueueName=f"{name}-dead")["QueueUrl"]
        arn = client.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])
        policy = {
            "deadLetterTargetArn": arn["Attributes"]["QueueArn"],
            "maxReceiveCount": str(dead_after),
        }
        attributes["RedrivePolicy"] = json.dumps(policy)
    client.create_queue(QueueName=name, Attributes=attributes)
    return SqsQueue(name, client)


def _results(moto: Bucket) -> ResultStore:
    return ResultStore(open_store(moto.prefix(f"r-{uuid.uuid4().hex[:8]}")))


def _items(count: int) -> list[WorkItem]:
    return [WorkItem(f"item-{n}", f"payload {n}") for n in range(count)]


def _worker(moto: Bucket, queue: SqsQueue, results: ResultStore, **env: str) -> TrainerProcess:
    return TrainerProcess(
        {
            **moto.env,
            "QUEUE_URL": f"sqs://{queue.url.rsplit('/', 1)[1]}",
            "RESULTS_URL": results.store.url,
            **env,
        },
        time.monotonic(),
        argv=WORKER_COMMAND,
    )


def test_a_preempted_worker_hands_back_at_once_what_it_cannot_finish(moto: Bucket) -> None:
    queue, results = _queue(), _results(moto)
    queue.publish(_items(4))
    worker = _worker(moto, queue, results, ITEM_SECONDS="30", LEASE_SECONDS="60", GRACE_SECONDS="5")
    assert worker.wait_for(lambda e: e["event"] == "leased", 30) is not None
    time.sleep(0.3)  # into the first item, whose length nothing done so far can tell
    signalled = time.monotonic()
    worker.send(signal.SIGTERM)
    assert worker.finish(timeout=10) == exit_codes.PREEMPTED
    assert time.monotonic() - signalled < 3
    # Leased for 60 s, yet every item is back now, for another worker.
    again = queue.pull(10, 30)
    assert sorted(lease.item.id for lease in again) == [f"item-{n}" for n in range(4)]
    assert all(lease.attempt == 2 for lease in again)
    assert results.store.list("results") == []


def test_a_preempted_worker_finishes_the_item_in_flight_when_the_grace_allows(
    moto: Bucket,
) -> None:
    queue, results = _queue(), _results(moto)
    queue.publish(_items(6))
    worker = _worker(moto, queue, results, ITEM_SECONDS="0.4", BATCH_SIZE="6", GRACE_SECONDS="10")
    assert (
        worker.wait_for(lambda e: e["event"] == "done" and len(worker.of("done")) >= 2, 30)
        is not None
    )
    worker.send(signal.SIGTERM)
    assert worker.finish(timeout=15) == exit_codes.PREEMPTED
    [finishing] = worker.of("finishing")
    done = [e["id"] for e in worker.of("done")]
    assert finishing["id"] in done
    assert all(results.exists(item_id) for item_id in done)
    handed = [i for e in worker.of("handed_back") for i in e["ids"]]
    assert sorted(done + handed) == sorted(f"item-{n}" for n in range(6))
    assert len(queue.pull(10, 30)) == len(handed)


def test_a_redelivered_item_with_its_result_stored_is_acknowledged_not_recomputed(
    moto: Bucket,
) -> None:
    queue, results = _queue(), _results(moto)
    [item] = _items(1)
    assert results.put(item.id, b"stored by a worker that died before its ack")
    queue.publish([item])
    with PreemptionGuard(5) as guard:
        report = run_worker(
            queue, results, result_of, guard=guard, lease_seconds=5, stop_when_idle=1
        )
    assert (report.already_done, report.done, report.exit_code) == (1, 0, 0)
    assert results.get(item.id) == b"stored by a worker that died before its ack"
    assert queue.depth() == 0


def test_an_item_stored_before_its_row_was_written_gets_the_stored_result_as_its_row(
    moto: Bucket, tmp_path: Path
) -> None:
    queue, results = _queue(), _results(moto)
    [item] = _items(1)
    # A worker stored this result (a duplicate's would differ) and died before its row.
    assert results.put(item.id, b"the winner's result")
    queue.publish([item])
    table = open_table(f"sqlite:///{tmp_path / 'results.db'}")
    with PreemptionGuard(5) as guard:
        report = run_worker(
            queue, results, result_of, guard=guard, lease_seconds=5, stop_when_idle=1, table=table
        )
    assert report.already_done == 1
    assert table.rows() == {item.id: b"the winner's result"}


def test_a_worker_reports_progress_with_the_items_it_holds(moto: Bucket) -> None:
    queue, results = _queue(), _results(moto)
    queue.publish(_items(3))
    events: list[dict[str, Any]] = []

    def slow(item: WorkItem) -> bytes:
        time.sleep(0.5)
        return result_of(item)

    with PreemptionGuard(5) as guard:
        run_worker(
            queue,
            results,
            slow,
            guard=guard,
            lease_seconds=5,
            stop_when_idle=0.5,
            progress_seconds=0.25,
            events=events.append,
        )
    progress = [e for e in events if e["event"] == "progress"]
    assert progress, events
    assert max(e["in_flight"] for e in progress) == 3
    assert [e["done"] for e in progress] == sorted(e["done"] for e in progress)
    assert {"redelivered", "dead_lettered", "already_done"} <= set(progress[0])


def test_an_item_that_always_fails_ends_on_the_dead_letter_queue(moto: Bucket) -> None:
    queue, results = _queue(dead_after=2), _results(moto)
    queue.publish([WorkItem("poison", "x"), WorkItem("fine", "y")])
    events: list[dict[str, Any]] = []

    def process(item: WorkItem) -> bytes:
        if item.id == "poison":
            raise ValueError("cannot decode payload")
        return result_of(item)

    with PreemptionGuard(5) as guard:
        report = run_worker(
            queue,
            results,
            process,
            guard=guard,
            lease_seconds=5,
            stop_when_idle=2,
            max_deliveries=2,
            events=events.append,
        )
    assert report.done == 1 and report.failed == 2 and report.dead_lettered == 1
    assert [e["dead_lettered"] for e in events if e["event"] == "failed"] == [False, True]
    assert {e["error"] for e in events if e["event"] == "failed"} == {
        "ValueError: cannot decode payload"
    }
    assert queue.depth() == 0
    dead = SqsQueue(f"{queue.url.rsplit('/', 1)[1]}-dead", queue.client)
    assert [lease.item.id for lease in dead.pull(10, 5)] == ["poison"]


def test_publishing_a_dataset_again_adds_nothing(moto: Bucket) -> None:
    queue, results = _queue(), _results(moto)
    items = _items(12)
    first = publish(queue, results.store, results, items)
    again = publish(queue, results.store, results, items)
    assert (first.published, again.published, again.skipped) == (12, 0, 12)
    assert queue.depth() == 12


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("items.jsonl", '{"id": "a", "payload": "1"}\nnot json\n', "items.jsonl:2: not JSON"),
        (
            "items.jsonl",
            '{"id": "a", "payload": "1"}\n{"id": "a", "payload": "2"}\n',
            "items.jsonl:2: id 'a' repeats an earlier line",
        ),
        ("items.csv", "id,payload\na,1\n,2\n", "items.csv:3: needs an id and a payload"),
        ("items.txt", "a\n", "items.txt: allowed manifests: .jsonl or .csv"),
    ],
)
def test_a_bad_manifest_is_refused_naming_its_line(name: str, text: str, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        list(from_manifest(name, text))


def test_a_manifest_gives_its_items_in_order() -> None:
    assert list(from_manifest("items.csv", "id,payload\na,1\nb,2\n")) == [
        WorkItem("a", "1"),
        WorkItem("b", "2"),
    ]


# --- the whole pattern: workers preempted and killed while they work, on every queue ------

QUEUES = ("sqs", "pubsub", "azure")
_REPORTS: dict[str, BatchReport] = {}


def _smoke(queue: str) -> BatchReport:
    if queue not in _REPORTS:
        _REPORTS[queue] = run_batch_smoke(BatchConfig(queue=queue), progress=lambda _line: None)
    return _REPORTS[queue]


@pytest.mark.parametrize("queue", QUEUES)
def test_every_item_has_exactly_one_result_equal_to_a_plain_loops(queue: str) -> None:
    report = _smoke(queue)
    assert report.failures == []
    assert report.results == report.table_rows == BatchConfig().items
    assert report.dead_lettered == 0 and report.published_again == 0


@pytest.mark.parametrize("queue", QUEUES)
def test_a_worker_killed_between_result_and_ack_costs_a_redelivery_not_a_result(
    queue: str,
) -> None:
    report = _smoke(queue)
    [frozen] = [i for i in report.interruptions if i.get("between_write_and_ack")]
    assert frozen["exit_code"] == -signal.SIGKILL
    assert report.totals["already_done"] >= 1
    assert report.totals["redelivered"] >= 1


@pytest.mark.parametrize("queue", QUEUES)
def test_preemptions_and_kills_are_all_played(queue: str) -> None:
    kinds = [i["kind"] for i in _smoke(queue).interruptions]
    assert kinds.count("preemption") == 2 and kinds.count("hard-kill") == 3


def test_smoke_batch_passes_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        *("smoke", "--batch", "--queue", "azure", "--table", "postgres"),
        *("--seed", "1", "--items", "16"),
    )
    assert (code, err) == (0, ""), out
    assert "16/16 results, 16 rows in the postgres table" in out and "PASSED" in out


@pytest.mark.parametrize(
    "url",
    [
        "sqs://",
        "sqs://q/extra",
        "pubsub://project",
        "azqueue://q?max_deliveries=0",
        "azqueue://q?ttl_days=x",
        "kafka://t",
    ],
)
def test_a_queue_url_it_cannot_open_is_refused_naming_what_is_allowed(url: str) -> None:
    with pytest.raises(QueueURLError, match="allowed"):
        open_queue(url)


class _CreateOnlyIdentityStore:
    """A store whose identity may create but not overwrite: the losing write of a race is
    refused as a permission error (GCS objectCreator), not as a failed precondition."""

    url = "gs://bucket/results"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_if_absent(self, key: str, data: bytes) -> None:
        if key in self.objects:
            raise StorageError("gs://bucket/results: 403 storage.objects.delete denied")
        self.objects[key] = data

    def exists(self, key: str) -> bool:
        return key in self.objects


def test_a_duplicate_refused_as_a_permission_error_counts_as_a_lost_race() -> None:
    results = ResultStore(_CreateOnlyIdentityStore())  # type: ignore[arg-type]
    assert results.put("item-1", b"first") is True
    assert results.put("item-1", b"second") is False
    assert results.store.objects == {results.key("item-1"): b"first"}  # type: ignore[attr-defined]


def test_a_permission_error_with_no_result_in_place_is_not_swallowed() -> None:
    class Denied(_CreateOnlyIdentityStore):
        def put_if_absent(self, key: str, data: bytes) -> None:
            raise StorageError("gs://bucket/results: 403 storage.objects.create denied")

    with pytest.raises(StorageError, match=r"objects\.create denied"):
        ResultStore(Denied()).put("item-1", b"x")  # type: ignore[arg-type]


def test_an_azure_item_delivered_too_often_is_moved_to_a_poison_queue_that_keeps_it() -> None:
    with emulated_queue("azure") as service, service.apply():
        url, poison_url = service.create("poisoned", 1)
        queue, results = open_queue(url), ResultStore(open_store(service.bucket.prefix("p")))
        queue.publish([WorkItem("poison", "x")])

        def process(item: WorkItem) -> bytes:
            raise ValueError("cannot decode payload")

        with PreemptionGuard(5) as guard:
            report = run_worker(
                queue, results, process, guard=guard, lease_seconds=1, stop_when_idle=3
            )
        assert report.failed == 1
        poison = AzureQueue(poison_url.removeprefix("azqueue://").split("?")[0])
        [message] = list(poison.client.peek_messages())
        assert decode(message.content) == WorkItem("poison", "x")
        assert message.expires_on is None or message.expires_on.year >= 9999
