"""What the fleet runs on its cluster to prove and use spot capacity: the smoke-test Job and
the queue-fed batch workers; each as declared, and how it is read from stack config."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import jobset, keda, kueue
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import ConfigObject, config_key, read_settings, setting
from spotproof.fleet.images import image_reference
from spotproof.fleet.pools import PoolClass
from spotproof.fleet.readers import boolean, choice, dns_label, integer, items, key_prefix, text
from spotproof.runtime.settings import MAX_STEPS

QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


@dataclass(frozen=True)
class SmokeTest:
    """The training Job that proves preemption recovery on the real cluster."""

    image: str = setting("image", image_reference, "ghcr.io/spotproof/smoke-trainer:0.1.0")
    """The trainer's image: a tag other than ``latest``, or a digest (advised in
    production, ``fleet.images``)."""
    namespace: str = setting("namespace", dns_label(63), "spotproof")
    target: PoolClass = setting("target", None, PoolClass.SPOT_GPU)
    """Pool class the Job runs on: spot-gpu, flex-start or on-demand-gpu; the stack must
    have a pool of it."""
    gpus: int = setting("gpus", None, 1)
    """GPUs the Job requests: 1 up to the largest node of its target class."""
    cpu: str = setting("cpu", text(QUANTITY, "a Kubernetes quantity like 2 or 500m"), "2")
    memory: str = setting("memory", text(QUANTITY, "a Kubernetes quantity like 8Gi"), "8Gi")
    checkpoint_interval: int = setting("checkpointInterval", integer(1), 50)
    """Steps between periodic checkpoints."""
    total_steps: int = setting("totalSteps", None, 2000)
    """Steps to train; at least one checkpoint interval."""
    seed: int = setting("seed", integer(0, 2**32 - 1), 0)
    model_mb: int = setting("modelMb", integer(1, 65536), 64)
    """Size of the model's state; large values exercise checkpoint throughput."""
    step_milliseconds: int = setting("stepMilliseconds", integer(0, 60_000), 0)
    """A pause after each step (the trainer's ``STEP_SECONDS``), 0 to 60,000; default 0.
    The smoke model trains 2,000 steps in seconds, too fast for ``spotproof drill`` to reclaim
    its node mid-run: at 500 ms the run lasts about 17 minutes on the cluster, while the
    drill's local reference run of the same settings trains without pausing."""
    grace_period_seconds: int | None = setting("gracePeriodSeconds", None, None)
    """terminationGracePeriodSeconds: 1 up to, and by default, what a reclaim of the
    target's pools leaves the pod: the cloud's (``catalog.GRACE_PERIOD_SECONDS``), or the
    shortest its pools set (a GKE spot pool's ``shutdownSeconds`` less the system pods'
    15 s). A longer one is cut short when the node goes away."""
    backoff_limit: int = setting("backoffLimit", integer(0, 100), 3)
    """Real failures allowed; preemptions do not count (see the Job's podFailurePolicy)."""


def _command(key: str, raw: Any) -> tuple[str, ...]:
    words = tuple(value for _, value in items(key, raw))
    if not words or not all(isinstance(word, str) and word for word in words):
        raise SpecError(key, raw, "not a command", 'a list of words, e.g. ["python", "-m", "w"]')
    return words


@dataclass(frozen=True)
class BatchSpec:
    """Queue-fed batch workers on reclaimable capacity and the queue that feeds them
    (``spotproof.kube.batch`` and each cloud's ``WorkQueue``): a work queue with its
    dead-letter queue, a worker identity allowed to consume it and to write results under
    ``resultsPrefix`` only, and a Deployment of workers that KEDA scales on the queue's
    depth. Declared by ``spotproof:batch``; a stack without it has none of these."""

    image: str = setting("image", image_reference, "ghcr.io/spotproof/smoke-trainer:0.1.0")
    """The worker's image. The default carries spotproof's batch worker and its reference
    work, whose results are checkable against a plain loop (``spotproof.smoke.batch_work``)."""
    command: tuple[str, ...] = setting(
        "command",
        _command,
        (
            "python",
            "-m",
            "spotproof.runtime.batch",
            "spotproof.smoke.batch_work:reference_work",
        ),
    )
    """What the container runs: by default spotproof's worker serving the reference work; a
    worker of your own names its work factory in the last word (``package.module:function``,
    ``spotproof.runtime.batch.entry.Work``). It reads ``QUEUE_URL``, ``RESULTS_URL``,
    ``GRACE_SECONDS``, ``LEASE_SECONDS``, ``BATCH_SIZE``, ``MAX_DELIVERIES`` and
    ``PROGRESS_SECONDS`` (``spotproof.runtime.settings``)."""
    namespace: str = setting("namespace", dns_label(63), "spotproof")
    target: PoolClass = setting("target", None, PoolClass.SPOT_GPU)
    """Pool class the workers run on: spot-gpu (the point), on-demand-gpu, or a flex-start
    pool without queued provisioning; the stack must have a pool of it."""
    gpus: int = setting("gpus", None, 1)
    """GPUs per worker: 0 up to the largest node of the target class."""
    cpu: str = setting("cpu", text(QUANTITY, "a Kubernetes quantity like 2 or 500m"), "2")
    memory: str = setting("memory", text(QUANTITY, "a Kubernetes quantity like 8Gi"), "8Gi")
    min_workers: int = setting("minWorkers", integer(0, 1000), 0)
    """Workers kept with an empty queue; 0 lets KEDA scale to none (and needs KEDA)."""
    max_workers: int = setting(
        "maxWorkers",
        integer(1, 1000),
        None,
        derived_default=lambda read: max(10, read["min_workers"]),
    )
    """Upper bound of KEDA's scaling; at least ``minWorkers``."""
    items_per_worker: int = setting("itemsPerWorker", integer(1, 10_000), 5)
    """Waiting items per worker KEDA aims for (the trigger's target value)."""
    batch_size: int = setting("batchSize", integer(1, 32), 4)
    """Items a worker leases at a time (32: the most one Azure Get Messages returns)."""
    lease_seconds: int = setting("leaseSeconds", integer(10, 600), 60)
    """How long a leased item stays hidden before a heartbeat extends it: the Pub/Sub ack
    deadline (10-600 s, the range all three queues accept) and the SQS visibility
    timeout. A dead worker's items come back within one lease."""
    max_deliveries: int = setting("maxDeliveries", integer(5, 100), 5)
    """Deliveries of an item before it is dead-lettered: Pub/Sub accepts 5-100 (its
    ``DeadLetterPolicy``), SQS 1-1000, Azure's poison handling any."""
    retention_days: int = setting("retentionDays", integer(1, 13), 7)
    """Days an item waits on the queue. At most 13: an SQS dead-letter queue keeps a
    message only until the source queue's retention ends, counted from the first enqueue,
    so the dead-letter queue keeps 14 days, the most SQS allows (SQS developer guide,
    "Setting-up dead-letter queue retention")."""
    results_prefix: str = setting("resultsPrefix", key_prefix("results"), "results")
    """Where results go in the stack's bucket; the worker identity may write only there,
    so it must not overlap the checkpoint prefix."""
    grace_period_seconds: int | None = setting("gracePeriodSeconds", None, None)
    """terminationGracePeriodSeconds: 1 up to, and by default, what a reclaim of the
    target's pools leaves the pod, as for the smoke test. A worker hands back what it has not
    started at once and finishes the item in flight only if it fits."""


def read_smoke_test(
    pool_classes: dict[PoolClass, int], graces: Mapping[PoolClass, int]
) -> Callable[[str, Any], SmokeTest | None]:
    """``pool_classes`` maps each class that has pools to its largest GPUs-per-node,
    ``graces`` each to what a reclaim leaves a pod on it (``pools.shortest_reclaim_grace``)."""

    def parse(key: str, raw: Any) -> SmokeTest | None:
        obj = ConfigObject(key, raw, fields_of=SmokeTest)
        if not obj.field("enabled", boolean, True):
            return None
        targets = tuple(c.value for c in PoolClass if c is not PoolClass.SYSTEM)
        target_key = config_key(SmokeTest, "target")
        target = PoolClass(obj.field(target_key, choice(targets), SmokeTest.target.value))
        if target not in pool_classes:
            raise SpecError(
                f"{key}.{target_key}",
                target.value,
                "no pool of that class in this stack",
                ", ".join(c.value for c in pool_classes) or "add a GPU pool first",
            )
        interval_key = config_key(SmokeTest, "checkpoint_interval")
        interval = obj.field(interval_key, integer(1, MAX_STEPS), SmokeTest.checkpoint_interval)
        # No longer than the preemption path delivers: a longer grace is cut short.
        grace = graces[target]
        smoke = SmokeTest(
            **read_settings(
                SmokeTest,
                obj,
                target=target,
                checkpoint_interval=interval,
                gpus=obj.field(
                    config_key(SmokeTest, "gpus"), integer(1, pool_classes[target]), SmokeTest.gpus
                ),
                total_steps=obj.field(
                    config_key(SmokeTest, "total_steps"),
                    integer(interval, MAX_STEPS),
                    SmokeTest.total_steps,
                ),
                grace_period_seconds=obj.field(
                    config_key(SmokeTest, "grace_period_seconds"), integer(1, grace), grace
                ),
            )
        )
        check_workload_namespace(f"{key}.namespace", smoke.namespace)
        obj.finish()
        return smoke

    return parse


def read_batch(
    pool_classes: dict[PoolClass, int],
    graces: Mapping[PoolClass, int],
    queued: set[PoolClass],
    checkpoints: str,
) -> Callable[[str, Any], BatchSpec]:
    """``pool_classes`` and ``graces`` as for the smoke test; ``queued``: classes whose
    pools all get nodes only through a ProvisioningRequest (a Deployment's pods are never
    admitted that way); ``checkpoints``: the checkpoint prefix the results must stay out of."""

    def parse(key: str, raw: Any) -> BatchSpec:
        obj = ConfigObject(key, raw, fields_of=BatchSpec)
        targets = tuple(c.value for c in PoolClass if c is not PoolClass.SYSTEM)
        target_key = config_key(BatchSpec, "target")
        target = PoolClass(obj.field(target_key, choice(targets), BatchSpec.target.value))
        if target not in pool_classes or target in queued:
            usable = [c.value for c in pool_classes if c not in queued]
            raise SpecError(
                f"{key}.{target_key}",
                target.value,
                "no pool of that class in this stack"
                if target not in pool_classes
                else "its pools get nodes only through queued provisioning, which admits "
                "Jobs, not a Deployment's workers",
                ", ".join(usable) or "add a GPU pool first",
            )
        grace = graces[target]
        values = read_settings(
            BatchSpec,
            obj,
            target=target,
            gpus=obj.field(
                config_key(BatchSpec, "gpus"), integer(0, pool_classes[target]), BatchSpec.gpus
            ),
            grace_period_seconds=obj.field(
                config_key(BatchSpec, "grace_period_seconds"), integer(1, grace), grace
            ),
        )
        batch = BatchSpec(**values)
        if batch.max_workers < batch.min_workers:
            raise SpecError(
                f"{key}.maxWorkers",
                batch.max_workers,
                f"below minWorkers ({batch.min_workers})",
                f"{batch.min_workers} or more",
            )
        check_workload_namespace(f"{key}.namespace", batch.namespace)
        results = batch.results_prefix
        if _overlaps(results, checkpoints):
            raise SpecError(
                f"{key}.resultsPrefix",
                results,
                f"overlaps the checkpoint prefix {checkpoints!r}: the worker identity may "
                "write only under its own prefix",
                "a prefix beside it, e.g. results",
            )
        obj.finish()
        return batch

    return parse


SYSTEM_NAMESPACES = frozenset(
    {"default", keda.NAMESPACE, jobset.NAMESPACE, kueue.NAMESPACE, "gke-managed-system"}
)
"""Namespaces no workload of the stack may use: the add-ons' (each chart's own) and
default (which the stack's Pod Security labels and NetworkPolicies would then govern for
everything else in it)."""


def check_workload_namespace(key: str, namespace: str) -> None:
    """The smoke Job and the batch workers get a namespace of their own."""
    if namespace in SYSTEM_NAMESPACES or namespace.startswith("kube-"):
        raise SpecError(
            key,
            namespace,
            "belongs to the platform or an add-on, whose namespace its own release owns",
            "a namespace for workloads, e.g. spotproof",
        )


def _overlaps(one: str, other: str) -> bool:
    return one == other or one.startswith(f"{other}/") or other.startswith(f"{one}/")
