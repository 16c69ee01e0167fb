"""Every work queue backend, declared once: :data:`QUEUE_BACKENDS`.

A backend is one record (:class:`QueueBackend`), read by everything that spells a queue:
``queues.open_queue`` (its URL scheme and the function that opens it), ``extras`` (which
extra installs its SDK), ``smoke.emulation.queues`` (its emulator, beside the emulator of
the store its results go to) and ``cli`` (the ``--queue`` choices, by
:attr:`QueueBackend.name`).

As for the stores (``runtime.storage.backends``, which says why), code is named by a
dotted path and imported only when asked for (``backends.load``): a worker imports the
SDK of its own queue alone, and the emulators live in ``smoke``, above the runtime.

So a new queue is its own module (``runtime/batch/<queue>.py``: a class implementing
``items.WorkQueue`` and its ``from_url``), its emulator in ``smoke/emulation/queues.py``,
and one record below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueueBackend:
    name: str
    """The backend's id outside the runtime: ``spotproof smoke --batch --queue``."""
    scheme: str
    """Its URL scheme."""
    spelled: str
    """Its URL as an error message shows what is allowed."""
    opens: str
    """``from_url(url)``: the queue at a URL of its scheme, or None for a URL of another
    shape."""
    store: str
    """The store backend of the same cloud (``runtime.storage.backends``), where a
    rehearsal's results go."""
    emulator: str
    """Its ``smoke.emulation.queues.QueueEmulator``."""
    extra: str
    """The extra of ``pyproject.toml`` that installs its SDK."""
    imports: tuple[str, ...]
    """The modules :attr:`extra` installs (``extras.PACKAGE_EXTRAS``)."""


QUEUE_BACKENDS = (
    QueueBackend(
        name="sqs",
        scheme="sqs",
        spelled="sqs://QUEUE",
        opens="spotproof.runtime.batch.sqs:from_url",
        store="s3",
        emulator="spotproof.smoke.emulation.queues:SQS",
        extra="batch-aws",
        imports=("boto3",),
    ),
    QueueBackend(
        name="pubsub",
        scheme="pubsub",
        spelled="pubsub://PROJECT/SUBSCRIPTION",
        opens="spotproof.runtime.batch.pubsub:from_url",
        store="gcs",
        emulator="spotproof.smoke.emulation.queues:PUBSUB",
        extra="batch-gcp",
        imports=("google.cloud.pubsub_v1",),
    ),
    QueueBackend(
        name="azure",
        scheme="azqueue",
        spelled="azqueue://QUEUE[?max_deliveries=N&ttl_days=D]",
        opens="spotproof.runtime.batch.azure_queue:from_url",
        store="azure",
        emulator="spotproof.smoke.emulation.queues:AZURE",
        extra="batch-azure",
        imports=("azure.storage.queue", "azure.identity"),
    ),
)

NAMED = {backend.name: backend for backend in QUEUE_BACKENDS}
"""Each backend by its :attr:`QueueBackend.name`."""
SCHEMES = {backend.scheme: backend for backend in QUEUE_BACKENDS}
"""The backend of each URL scheme ``open_queue`` opens."""
ALLOWED = ", ".join(backend.spelled for backend in QUEUE_BACKENDS)
