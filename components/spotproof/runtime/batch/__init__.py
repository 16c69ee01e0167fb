"""Batch work on spot capacity: queue-fed workers that lose nothing and duplicate nothing.

A dataset is published as work items on a queue (``producer``); workers on reclaimable
nodes pull a few at a time, compute each result and store it; a reclaimed worker's items
are simply delivered to another one. The protocol, for every item a worker holds:

1. **lease**: the queue hides the item from other workers for ``lease_seconds``, and the
   worker extends the lease while it holds the item (a heartbeat), so a long item is not
   redelivered while it is being worked on, and a dead worker's item is, soon;
2. **look**: if the item's result already exists (an earlier delivery computed it and
   died before acknowledging), the worker acknowledges it without recomputing;
3. **compute and store**: ``process(item)`` gives the result's bytes, written under a key
   derived from the item's id with a create-only write (``results``): whichever delivery
   stores first wins, and a duplicate can never overwrite it;
   If ``process`` raises, the item is handed back for another delivery; the queue's
   dead-letter policy ends the retries of an item that always fails;
4. **acknowledge**, only once the result is durable. An item is therefore acknowledged
   only with its result stored: a crash anywhere before costs a redelivery, never a result.

On SIGTERM (``PreemptionGuard``) a worker stops pulling and hands back at once every item
it holds but has not started (the lease is released, not left to expire). It finishes the
item in flight if the grace period is expected to allow it (its duration so far, against
the items it has done), else hands that one back too and exits at once; it exits
``PREEMPTED`` either way, as the trainer does. Queues (``open_queue``): ``sqs``,
``pubsub`` and ``azure_queue``, each module stating the service's lease rules; what they
share (items, leases, the queue interface) is ``items``. ``entry`` is a whole worker
process configured by its environment: ``python -m spotproof.runtime.batch
package.module:function`` serves the work that function returns.
"""

from spotproof.runtime.batch.items import Lease, WorkItem, WorkQueue
from spotproof.runtime.batch.queues import open_queue
from spotproof.runtime.batch.results import ResultStore
from spotproof.runtime.batch.worker import WorkerReport, run_worker

__all__ = [
    "Lease",
    "ResultStore",
    "WorkItem",
    "WorkQueue",
    "WorkerReport",
    "open_queue",
    "run_worker",
]
