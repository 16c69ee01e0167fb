"""The batch worker's environment, read strictly: a value it cannot use stops it before
it starts, in one line naming the variable and what is allowed; a queue it cannot reach
is one line too, and no line carries a credential."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from botocore.exceptions import EndpointConnectionError

from spotproof.fleet import BatchSpec
from spotproof.runtime import exit_codes
from spotproof.runtime.batch import ResultStore, run_worker, worker
from spotproof.runtime.batch.entry import load_work, serve
from spotproof.runtime.batch.items import Lease, WorkItem
from spotproof.runtime.batch.worker import WorkerReport
from spotproof.runtime.guard import PreemptionGuard
from spotproof.runtime.storage import open_store
from spotproof.smoke.batch_work import WORKER_COMMAND, reference_work
from spotproof.smoke.emulation.queues import emulated_queue

pytestmark = pytest.mark.processes


def _worker(env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(WORKER_COMMAND),
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


@pytest.fixture
def base(tmp_path: Path) -> dict[str, str]:
    return {"QUEUE_URL": "sqs://never-opened", "RESULTS_URL": f"file://{tmp_path}/results"}


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("LEASE_SECONDS", "0.5", "LEASE_SECONDS='0.5': not a whole number; allowed 1 to 43200"),
        ("LEASE_SECONDS", "0", "LEASE_SECONDS='0': allowed 1 to 43200"),
        ("LEASE_SECONDS", "43201", "LEASE_SECONDS='43201': allowed 1 to 43200"),
        ("GRACE_SECONDS", "0", "GRACE_SECONDS='0': allowed 1 to 86400"),
        ("MAX_DELIVERIES", "0.5", "MAX_DELIVERIES='0.5': not a whole number; allowed 1 to 1000"),
        ("MAX_DELIVERIES", "0", "MAX_DELIVERIES='0': allowed 1 to 1000"),
        ("BATCH_SIZE", "٣", "BATCH_SIZE='٣': not a whole number"),
        ("ITEM_SECONDS", "nan", "ITEM_SECONDS='nan': not a number; allowed 0 to 86400"),
        ("PROGRESS_SECONDS", "1_0", "PROGRESS_SECONDS='1_0': not a number"),
        ("STOP_WHEN_IDLE", "-1", "STOP_WHEN_IDLE='-1': allowed 0 to 86400"),
        ("QUEUE_URL", "", "QUEUE_URL is required"),
    ],
)
def test_a_value_the_worker_cannot_use_stops_it_in_one_line(
    base: dict[str, str], variable: str, value: str, says: str
) -> None:
    done = _worker({**base, variable: value})
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr


def test_a_queue_that_does_not_exist_fails_the_worker_in_one_line(base: dict[str, str]) -> None:
    with emulated_queue("sqs") as service:
        done = _worker({**base, **service.env, "QUEUE_URL": "sqs://no-such-queue"})
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1
    assert "queue sqs://no-such-queue: does not exist" in done.stderr


def test_sqs_without_a_region_is_one_line(base: dict[str, str]) -> None:
    done = _worker(base)
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1 and "no AWS region; set AWS_REGION" in done.stderr


def test_pubsub_without_credentials_is_one_line_and_a_retry(base: dict[str, str]) -> None:
    done = _worker({**base, "QUEUE_URL": "pubsub://project/subscription"})
    assert done.returncode == exit_codes.STORAGE_UNAVAILABLE
    assert done.stderr.count("\n") == 1
    assert "no usable credentials or permission" in done.stderr


def test_a_password_in_the_results_table_url_is_never_printed(base: dict[str, str]) -> None:
    table = "postgresql://worker:HUNTER2@127.0.0.1:1/results"
    with emulated_queue("sqs") as service, service.apply():
        service.create("table-test", 5)
        env = {**base, **service.env, "QUEUE_URL": "sqs://table-test", "RESULTS_TABLE": table}
        done = _worker(env)
    assert done.returncode in (exit_codes.BAD_CONFIG, exit_codes.STORAGE_UNAVAILABLE)
    assert done.stderr.count("\n") == 1 and "postgresql://***@127.0.0.1:1" in done.stderr
    assert "HUNTER2" not in done.stderr + done.stdout


class FlakyQueue:
    """One item behind ``failures`` pulls that get no answer; then empty."""

    def __init__(self, failures: int) -> None:
        self.failures, self.items = failures, [WorkItem("a", "payload")]
        self.acked: list[str] = []

    def pull(self, max_items: int, lease_seconds: int) -> list[Lease]:
        if self.failures:
            self.failures -= 1
            raise ConnectionResetError("connection reset by peer")
        items, self.items = self.items, []
        return [Lease(item, 1, item.id) for item in items]

    def extend(self, leases: object, lease_seconds: int) -> None: ...

    def release(self, leases: object) -> None: ...

    def ack(self, lease: Lease) -> None:
        self.acked.append(lease.item.id)


def _work(queue: FlakyQueue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkerReport:
    monkeypatch.setattr(worker, "PULL_BACKOFF_SECONDS", 0.01)
    with PreemptionGuard(5) as guard:
        return run_worker(
            queue,  # type: ignore[arg-type]
            ResultStore(open_store(f"file://{tmp_path}")),
            lambda item: item.payload.encode(),
            guard=guard,
            stop_when_idle=0.1,
        )


def test_a_pull_that_gets_no_answer_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = FlakyQueue(failures=worker.PULL_ATTEMPTS - 1)
    report = _work(queue, tmp_path, monkeypatch)
    assert report.done == 1 and queue.acked == ["a"]


def test_a_queue_that_never_answers_raises_after_the_last_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConnectionResetError):
        _work(FlakyQueue(failures=worker.PULL_ATTEMPTS), tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "usage: python -m spotproof.runtime.batch package.module:function"),
        (["not a reference"], "is not a reference; allowed: package.module:function"),
        (["no_such_package.work:make"], "cannot import no_such_package.work"),
        (["spotproof.smoke.batch_work:no_such_work"], "has no function no_such_work"),
    ],
    ids=["missing", "malformed", "unimportable", "no-such-function"],
)
def test_a_work_reference_the_worker_cannot_load_stops_it_in_one_line(
    base: dict[str, str], argv: list[str], says: str
) -> None:
    done = subprocess.run(
        [*WORKER_COMMAND[:3], *argv],
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **base},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == exit_codes.BAD_CONFIG
    assert len(done.stderr.strip().splitlines()) == 1
    assert says in done.stderr


def test_the_default_batch_command_names_the_reference_work() -> None:
    """A stack's default worker command serves the work the rehearsal checks."""
    command = BatchSpec().command
    assert command[:3] == ("python", "-m", "spotproof.runtime.batch")
    assert load_work(command[3]) is reference_work


def test_a_work_that_cannot_reach_its_store_at_start_is_not_blamed_on_the_queue(
    base: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    def work(env: object) -> object:
        raise EndpointConnectionError(endpoint_url="https://models.example")

    assert serve(work, base) == exit_codes.STORAGE_UNAVAILABLE  # type: ignore[arg-type]
    said = capsys.readouterr().err
    assert said.startswith("batch worker: work could not start: EndpointConnectionError")
    assert "queue" not in said


def test_a_bug_in_the_work_keeps_its_traceback(base: dict[str, str]) -> None:
    def work(env: object) -> object:
        raise TypeError("the work's own bug")

    with pytest.raises(TypeError, match="the work's own bug"):
        serve(work, base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("account", "says"),
    [
        (None, "no storage account; allowed: AZURE_STORAGE_CONNECTION_STRING, or "),
        ("evil.example/x?", "is no storage account's name; allowed: 3 to 24 lowercase"),
    ],
)
def test_an_azure_queue_without_an_account_stops_the_worker_in_one_line(
    base: dict[str, str], account: str | None, says: str
) -> None:
    env = {**base, "QUEUE_URL": "azqueue://work"}
    if account is not None:  # a name that would make another host the token's audience
        env["AZURE_STORAGE_ACCOUNT_NAME"] = account
    done = _worker(env)
    assert done.returncode == exit_codes.BAD_CONFIG
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("batch worker: queue azqueue://work: ")
    assert says in done.stderr
