"""Every environment variable the trainer and the batch worker read, named once.

Each variable below is one definition: its name, its default and its range, with its
meaning on the docstring under it. Both sides use the definition: the components that
render a container's environment (``kube.smoke``, ``kube.training``, ``kube.jobset``,
``kube.batch``, and the rehearsal's harness) spell the name through it, and the processes
that read the environment (``runtime.loop``, ``smoke.train`` and ``smoke.data_parallel``,
``runtime.batch.entry`` and ``smoke.batch_work``) read it through it, so the two cannot
drift apart. This module imports nothing of spotproof but its readers: a Pulumi program imports it
without the runtime.

How a value is read (strictly, one line of error) is ``runtime.setting_readers``.
"""

from __future__ import annotations

import os

from spotproof.runtime.setting_readers import (  # noqa: F401 (every caller's settings.ConfigError)
    Choice,
    ConfigError,
    Flag,
    ModuleNames,
    Number,
    OptionalNumber,
    OptionalText,
    OptionalWhole,
    RequiredWhole,
    Setting,
    Text,
    Whole,
)

MAX_SECONDS = 86_400
"""A day: the longest wait, pause or grace any variable asks for."""
MAX_STEPS = 10**12
"""The most steps, and the longest checkpoint interval, a run may ask for."""
MAX_WORLD_SIZE = 1_000_000
"""More processes than any gang: a bound for the reader, not a limit of torch."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


# Checkpoints: the smoke trainer, training() and a TrainingJob's own trainer.

CHECKPOINT_URL = Text("CHECKPOINT_URL", "a file://, s3://, gs:// or az:// URL")
"""Where checkpoints go; required. The smoke Job and a ``TrainingJob`` set it to their
run's prefix in the stack's bucket."""
CHECKPOINT_INTERVAL = RequiredWhole("CHECKPOINT_INTERVAL", 1, MAX_STEPS)
"""Steps between periodic checkpoints, 1 to 10^12; required."""
GRACE_SECONDS = Number("GRACE_SECONDS", 1, MAX_SECONDS, default=15)
"""Seconds from SIGTERM to SIGKILL, 1 to 86,400; default 15, GKE's notice to non-system
pods. Rendered from the same field as the pod's ``terminationGracePeriodSeconds``: the
final checkpoint, or a batch worker's item in flight, must fit in what is left of it."""
KEEP_CHECKPOINTS = Whole("KEEP_CHECKPOINTS", 1, 1000, default=3)
"""Committed checkpoints kept, 1 to 1,000; default 3, the checkpointer's own
(``checkpointer.manifest.DEFAULT_KEEP``)."""
CHECKPOINT_PART_KB = Whole("CHECKPOINT_PART_KB", 0, 65_536, default=0)
"""KiB in each uploaded part, 0 to 65,536 (the transfer's largest part,
``checkpointer.transfer.MAX_PART``); default 0, parts sized from the state."""
STORAGE_STARTUP_SECONDS = Number("STORAGE_STARTUP_SECONDS", 1, 3600, default=60.0)
"""How long opening the store, reachability check included, may take before the process
exits ``STORAGE_UNAVAILABLE`` for a retry, 1 to 3,600; default 60 (each call is bounded
too: ``storage.deadlines``). The storage layer reads it itself; the trainer checks it."""

# What the runtime tells (runtime.events).

SPOTPROOF_LOG = Choice("SPOTPROOF_LOG", ("text", "json", "off"))
"""How the runtime's lines on stderr are written: ``text`` (``key=value``, the default),
``json`` (one object a line) or ``off``."""
SPOTPROOF_EVENTS = OptionalText("SPOTPROOF_EVENTS")
"""Where every event goes as a JSON line, steps included, for a program to read:
``stdout``, or the path of a file to append to; unset, nowhere. The smoke trainer writes
to stdout unless told otherwise; ``spotproof smoke --command`` gives each process a file."""
STATE_DIGESTS = Flag("SPOTPROOF_STATE_DIGESTS")
"""1: each committed save's event carries a digest of every state it holds (model,
optimizer, each other object by name), so a rehearsal can name the state a resumed run
lost; default 0 (hashing the whole state at every save costs time)."""

# The smoke trainer (spotproof.smoke.train) alone. SEED and MODEL_MB define its run: they
# are recorded in every checkpoint, and a checkpoint of other values is never resumed.

TOTAL_STEPS = RequiredWhole("TOTAL_STEPS", 1, MAX_STEPS)
"""Steps to train, 1 to 10^12; required."""
SEED = Whole("SEED", 0, 2**32 - 1, default=0)
"""Seed of weights, data and dropout, 0 to 2^32-1; default 0. The data of a step is
seeded ``SEED * 1_000_003 + step``, which a 32-bit seed keeps inside torch's 64 bits."""
MODEL_MB = Number("MODEL_MB", 0.01, 65_536, default=16)
"""MiB of model and optimizer state, 0.01 to 65,536; default 16."""
STEP_SECONDS = Number("STEP_SECONDS", 0, MAX_SECONDS, default=0)
"""Pause after each step, 0 to 86,400; default 0. Lets a harness interrupt a tiny model
mid-run, as a real model's seconds-long steps would be."""
EMIT_STEPS = Flag("EMIT_STEPS")
"""1: a ``step`` event after every step; default 0."""
TRAIN_THREADS = Whole("TRAIN_THREADS", 1, usable_cpus, default=1)
"""torch's intra-op threads, 1 to the CPUs the process may run on (more only contend);
default 1."""
PEER_WAIT_SECONDS = Number("PEER_WAIT_SECONDS", 0, MAX_SECONDS, default=600.0)
"""How long a rank stopped by a peer waits to be torn down before it exits ``PEER_LOST``,
0 to 86,400; default 600, the checkpointer's (``checkpointer.gang.PEER_WAIT_SECONDS``
says why)."""
PEER_SILENCE_SECONDS = Number("PEER_SILENCE_SECONDS", 3, MAX_SECONDS, default=15.0)
"""How long a gang's rank may go unheard on the gang's store before the others take it for
lost and stop as ranks stopped by a peer, even while blocked in a collective that would
wait out the process group's timeout (``runtime.liveness``), 3 to 86,400; default 15.
Longer than any stretch in which a live trainer's threads get no CPU at all."""
RENDEZVOUS_SECONDS = Number("RENDEZVOUS_SECONDS", 10, MAX_SECONDS, default=600.0)
"""How long a gang's ranks wait for each other at start-up before they exit ``PEER_LOST``
(a SIGTERM ends the wait at once), 10 to 86,400; default 600. torch's own default is 30
minutes; the ranks of a gang start within seconds of each other once placed, but placing
a pod can take minutes (a node scaled up for it)."""

# A gang, as torchrun and a JobSet start one (kube.jobset renders them for a trainer that
# forms its own process group).

WORLD_SIZE = Whole("WORLD_SIZE", 1, MAX_WORLD_SIZE, default=1)
"""Processes in the gang; default 1, a process alone. The smoke trainer takes a divisor of
its batch's rows (``smoke.BATCH_ROWS``); ``training()`` only 1."""
RANK = Whole("RANK", 0, MAX_WORLD_SIZE - 1, default=0)
"""This process's place in the gang, 0 to ``WORLD_SIZE`` - 1; default 0."""
MASTER_ADDR = Text("MASTER_ADDR", "the host name or address of rank 0")
"""Where rank 0 serves the rendezvous: a host name or an IP address; required in a gang."""
MASTER_PORT = RequiredWhole("MASTER_PORT", 1, 65_535)
"""Rank 0's rendezvous port, 1 to 65,535; required in a gang."""

WARM_IMPORTS = ModuleNames("SPOTPROOF_WARM_IMPORTS")
"""Under ``runtime.warm_torchrun``, modules to import once in the process every worker is
forked from, beside torch and spotproof's loop: the trainer's own heavy imports
(``transformers``, its model package), separated by commas; none when unset. Each is
imported with the agent's environment, before a worker's own variables are set, and must
leave CUDA uninitialized."""

# A gang's memory tier and peer replicas (runtime.checkpointer.tiers).

MEMORY_TIER_DIR = OptionalText("MEMORY_TIER_DIR")
"""A directory on the node that outlives the trainer but not the node (a tmpfs such as
``/dev/shm``, or a local SSD): periodic saves commit there first and are replicated to a
peer's; unset, every save goes to the bucket. Only for a gang (``WORLD_SIZE`` over 1)."""
PERSIST_EVERY = Whole("PERSIST_EVERY", 1, 1000, default=4)
"""With a memory tier, every this-many-th periodic save also goes to the bucket, 1 to
1,000; final saves always do; default 4."""
REPLICA_PORT = Whole("REPLICA_PORT", 0, 65_535, default=9471)
"""The port this rank serves its peers' replicas on, 0 (any free one) to 65,535; default
9471."""
REPLICA_SECRET_FILE = OptionalText("REPLICA_SECRET_FILE")
"""The path of a file holding the gang's replica secret, 32 to 4,096 bytes (a Kubernetes
Secret volume only the gang's pods mount; ``openssl rand -hex 32`` makes one): every
request between the ranks' replica servers is signed with a key derived from it
(``runtime.storage.replica_auth``). Required with ``MEMORY_TIER_DIR``. A path, never the
secret itself, which an environment would show to ``kubectl describe``."""
REPLICA_LIMIT_MIB = OptionalWhole("REPLICA_LIMIT_MIB", 1, 2**24)
"""The most MiB of its peers' replicas this rank's server holds, 1 to 16,777,216; unset,
half the file system ``MEMORY_TIER_DIR`` is on (a memory-backed ``emptyDir`` is as large as
its ``sizeLimit``, which the plan wants at six copies of the state, three of them its
peer's). A write past it is refused, never held."""
POD_IP = OptionalText("POD_IP")
"""The address peers reach this rank's replica server at (the downward API's
``status.podIP``): an IP address of this pod, not 0.0.0.0, ``::`` or a multicast or
reserved one; unset, 127.0.0.1, which only a gang on one machine can use."""
NODE_NAME = OptionalText("NODE_NAME")
"""This rank's node (``spec.nodeName``): a replica is never held on the same node."""
NODE_ZONE = OptionalText("NODE_ZONE")
"""This rank's zone: a replica is held in another zone where the gang spans zones."""

# The batch worker (spotproof.runtime.batch).

QUEUE_URL = Text("QUEUE_URL", "an sqs://, pubsub:// or azqueue:// URL")
"""The work queue (``runtime.batch.queues.open_queue``); required."""
RESULTS_URL = Text("RESULTS_URL", "a file://, s3://, gs:// or az:// URL")
"""Where results go; required."""
LEASE_SECONDS = Whole("LEASE_SECONDS", 1, 43_200, default=10)
"""Whole seconds a pulled item stays hidden from other workers, extended while held, 1 to
43,200 (SQS's longest visibility timeout; Pub/Sub's ack deadline stops at 600 and is
clamped there by ``runtime.batch.pubsub``); default 10."""
BATCH_SIZE = Whole("BATCH_SIZE", 1, 1000, default=4)
"""Items pulled at a time, 1 to 1,000; default 4."""
MAX_DELIVERIES = OptionalWhole("MAX_DELIVERIES", 1, 1000)
"""The queue's dead-letter limit, 1 to 1,000, so that a failure on an item's last delivery
is counted as dead-lettered; unset, none is."""
PROGRESS_SECONDS = Number("PROGRESS_SECONDS", 1, MAX_SECONDS, default=30.0)
"""How often a ``progress`` line gives the counts so far, 1 to 86,400; default 30."""
RESULTS_TABLE = OptionalText("RESULTS_TABLE")
"""Also UPSERT each result into this table (``sqlite:///PATH``, ``postgresql://...``);
unset, results go to ``RESULTS_URL`` only."""
STOP_WHEN_IDLE = OptionalNumber("STOP_WHEN_IDLE", 0, MAX_SECONDS)
"""Exit 0 once the queue has been empty this long, 0 to 86,400; unset, never (a
Deployment's worker runs until it is scaled down)."""
STOP_AFTER_STORED = OptionalWhole("STOP_AFTER_STORED", 1, 10**9)
"""The rehearsal's probe: the worker SIGSTOPs itself once its Nth result is stored, before
the acknowledgement, 1 to 10^9; unset, never."""
ITEM_SECONDS = Number("ITEM_SECONDS", 0, MAX_SECONDS, default=0.05)
"""The "inference" time of each item of the rehearsal's reference work
(``smoke.batch_work``), 0 to 86,400; default 0.05."""

# Metrics: the trainer and the batch worker (runtime.metrics).

METRICS_PORT = OptionalWhole("METRICS_PORT", 1, 65_535)
"""The port ``/metrics`` is served on in Prometheus's text format, 1 to 65,535 (the
components render ``runtime.metrics.names.DEFAULT_PORT``, 9464); unset, no metrics are
served and prometheus-client is not needed."""
