"""Queue emulators on loopback for ``spotproof smoke --batch``, each beside the store
emulator of the same cloud (where the results go):

- ``sqs``    moto server (S3 and SQS on one port);
- ``azure``  Azurite's queue service beside its blob service, one connection string for
  both (``AZURE_STORAGE_CONNECTION_STRING``);
- ``pubsub`` the Pub/Sub emulator of the Cloud SDK (Java), beside fake-gcs-server.
  ``cloud-pubsub-emulator --host --port`` serves at once, with no gcloud wrapper; its
  clients find it through ``PUBSUB_EMULATOR_HOST``.

Each is a :class:`QueueEmulator`, named by its queue's record in
``runtime.batch.queue_backends`` together with the store emulator it stands beside.
``QueueService.create(name, max_deliveries)`` makes a queue with its dead-letter queue (a
redrive policy on SQS, a dead-letter topic on Pub/Sub, a poison queue on Azure) and gives
the URLs a worker opens (``spotproof.runtime.batch.open_queue``) for both.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from spotproof.runtime.batch.queue_backends import NAMED
from spotproof.runtime.storage.backends import load
from spotproof.smoke.emulation.object_stores import (
    Bucket,
    EmulatorError,
    azurite_command,
    emulated,
    environment,
    free_port,
    running,
)

QUEUES = tuple(NAMED)
"""Every queue the runtime opens (``runtime.batch.queue_backends``), by its backend's name."""
PUBSUB_PROJECT = "spotproof"
PUBSUB_EMULATOR = Path(
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"
)


@dataclass
class QueueService:
    kind: str
    bucket: Bucket
    """Where results go: the same cloud's store emulator."""
    env: dict[str, str]
    """Everything a worker needs: the store's variables and the queue's."""
    create: Callable[[str, int], tuple[str, str]]
    """(name, max_deliveries) -> the URLs of the queue and of its dead letters."""

    def apply(self) -> contextlib.AbstractContextManager[None]:
        return environment(self.env)


def _sqs_create(name: str, max_deliveries: int) -> tuple[str, str]:
    import boto3  # noqa: PLC0415

    client = boto3.client("sqs")
    dead = client.create_queue(QueueName=f"{name}-dead")["QueueUrl"]
    arn = client.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])
    policy = {
        "deadLetterTargetArn": arn["Attributes"]["QueueArn"],
        "maxReceiveCount": str(max_deliveries),
    }
    client.create_queue(QueueName=name, Attributes={"RedrivePolicy": json.dumps(policy)})
    return f"sqs://{name}", f"sqs://{name}-dead"


def _azure_create(name: str, max_deliveries: int) -> tuple[str, str]:
    from azure.storage.queue import QueueClient  # noqa: PLC0415

    connection = os.environ["AZURE_STORAGE_CONNECTION_STRING"]
    for queue in (name, f"{name}-poison"):
        QueueClient.from_connection_string(connection, queue).create_queue()
    return f"azqueue://{name}?max_deliveries={max_deliveries}", f"azqueue://{name}-poison"


def _pubsub_create(name: str, max_deliveries: int) -> tuple[str, str]:
    from google.cloud import pubsub_v1  # noqa: PLC0415

    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=publisher.topic_path(PUBSUB_PROJECT, name)).name
    dead = publisher.create_topic(name=publisher.topic_path(PUBSUB_PROJECT, f"{name}-dead")).name
    subscriber.create_subscription(
        request={
            "name": subscriber.subscription_path(PUBSUB_PROJECT, f"{name}-dead"),
            "topic": dead,
        }
    )
    subscriber.create_subscription(
        request={
            "name": subscriber.subscription_path(PUBSUB_PROJECT, name),
            "topic": topic,
            "ack_deadline_seconds": 10,
            "enable_exactly_once_delivery": True,
            "dead_letter_policy": {
                "dead_letter_topic": dead,
                "max_delivery_attempts": max_deliveries,
            },
        }
    )
    return f"pubsub://{PUBSUB_PROJECT}/{name}", f"pubsub://{PUBSUB_PROJECT}/{name}-dead"


@contextlib.contextmanager
def _moto_serves_it(bucket: Bucket) -> Iterator[dict[str, str]]:
    """moto's server answers SQS on the S3 emulator's port: nothing more to start."""
    yield {}


@contextlib.contextmanager
def _azurite_queue(bucket: Bucket) -> Iterator[dict[str, str]]:
    azurite = azurite_command()
    queue_command = azurite and str(Path(azurite).with_name("azurite-queue"))
    if not queue_command or not Path(queue_command).exists():
        raise EmulatorError("Azurite's queue service is not installed: run `npm ci`")
    port = free_port()
    workspace = tempfile.mkdtemp(prefix="azurite-queue-")
    command = [
        queue_command,
        *("--queueHost", "127.0.0.1", "--queuePort", str(port), "--location", workspace),
        *("--skipApiVersionCheck", "--disableTelemetry", "--silent", "--loose"),
    ]
    try:
        with running(command, port, "Azurite queue"):
            connection = bucket.env["AZURE_STORAGE_CONNECTION_STRING"] + (
                f"QueueEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
            )
            yield {"AZURE_STORAGE_CONNECTION_STRING": connection}
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@contextlib.contextmanager
def _pubsub(bucket: Bucket) -> Iterator[dict[str, str]]:
    if not PUBSUB_EMULATOR.exists() or shutil.which("java") is None:
        raise EmulatorError(
            f"the Pub/Sub emulator needs the Cloud SDK's {PUBSUB_EMULATOR} and Java 17"
        )
    port = free_port()
    command = [str(PUBSUB_EMULATOR), "--host=127.0.0.1", f"--port={port}"]
    with running(command, port, "Pub/Sub emulator"):
        yield {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{port}", "PUBSUB_PROJECT_ID": PUBSUB_PROJECT}


@dataclass(frozen=True)
class QueueEmulator:
    start: Callable[[Bucket], AbstractContextManager[dict[str, str]]]
    """Starts beside the store emulator's bucket; yields what a worker needs on top of the
    store's variables (a variable of both, as Azure's connection string, replaces the
    store's)."""
    create: Callable[[str, int], tuple[str, str]]
    """``QueueService.create``."""


SQS = QueueEmulator(_moto_serves_it, _sqs_create)
PUBSUB = QueueEmulator(_pubsub, _pubsub_create)
AZURE = QueueEmulator(_azurite_queue, _azure_create)


@contextlib.contextmanager
def emulated_queue(kind: str) -> Iterator[QueueService]:
    """Start the queue emulator ``kind`` (one of :data:`QUEUES`) and its store's."""
    if kind not in NAMED:
        raise EmulatorError(f"unknown queue {kind!r}; allowed: {', '.join(QUEUES)}")
    backend = NAMED[kind]
    emulator: QueueEmulator = load(backend.emulator)
    with emulated(backend.store) as store, emulator.start(store) as env:
        bucket = Bucket(store.store, store.url, {**store.env, **env})
        yield QueueService(kind, bucket, dict(bucket.env), emulator.create)
