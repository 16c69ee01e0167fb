"""The rehearsal's reference batch work: deterministic, so that its results are checkable.

The result of an item is its payload hashed :data:`ROUNDS` times (:func:`result_of`), after
``ITEM_SECONDS`` of "inference" (``spotproof.runtime.settings``), so any number of workers,
interrupted any way, must end with the results of a plain loop over the items.
``python -m spotproof.runtime.batch spotproof.smoke.batch_work:reference_work`` serves it
(:data:`WORKER_COMMAND`), as a stack's batch workers do by default.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Mapping

from spotproof.runtime import settings
from spotproof.runtime.batch.entry import Process
from spotproof.runtime.batch.items import WorkItem

ROUNDS = 1000
REFERENCE = "spotproof.smoke.batch_work:reference_work"
"""How a worker's command names :func:`reference_work`."""
WORKER_COMMAND = (sys.executable, "-m", "spotproof.runtime.batch", REFERENCE)
"""A worker serving the reference work, as the rehearsal and the tests start one."""


def result_of(item: WorkItem) -> bytes:
    """The deterministic answer for ``item``."""
    digest = item.payload.encode()
    for _ in range(ROUNDS):
        digest = hashlib.sha256(digest).digest()
    return f"{item.id}:{digest.hex()}".encode()


def reference_work(env: Mapping[str, str]) -> Process:
    """:func:`result_of` after ``ITEM_SECONDS``, for ``runtime.batch.entry.serve``."""
    item_seconds = settings.ITEM_SECONDS.read(env)

    def process(item: WorkItem) -> bytes:
        time.sleep(item_seconds)
        return result_of(item)

    return process
