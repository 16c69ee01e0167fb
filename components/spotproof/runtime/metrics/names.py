"""Every metric the trainer and the batch worker expose, named once.

The alert and recording rules (``spotproof.observability.rules``), the dashboards
(``spotproof.observability.dashboards``), ``spotproof status`` and the processes that
record the metrics (``runtime.metrics.recorders``) all spell a metric through its
:class:`Family` here, so none of them can drift from what a pod serves. This module imports
nothing: a Pulumi program reads the names without prometheus-client installed.

Conventions (https://prometheus.io/docs/practices/naming/): the ``spotproof_`` prefix,
base units in the name (``_seconds``, ``_bytes``), ``_total`` on counters, a timestamp
rather than an age (an age is ``time() - ..._timestamp_seconds`` in the query), and labels
with a few fixed values only: never a step, an item id or a pod name, which the scrape adds
as target labels.

What a process can and cannot know. A trainer counts what it sees: its SIGTERM, its final
save's outcome and the steps that outcome loses. A node that vanishes without notice
(SIGKILL, a kernel panic) leaves no trace in the process it killed; the process that
resumes counts it instead, in ``spotproof_resumes_total{checkpoint="periodic"}``: a resume
from a periodic checkpoint means the process before it ended without a final save. And a
process's last counts reach Prometheus only if it is scraped before it exits, which is why
a trainer with an endpoint waits for one more scrape after its final save, within its grace
(``runtime.metrics.endpoint``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Family:
    """One metric: the name a query uses, its type, its help text and its labels."""

    name: str
    """The name as it is exposed and queried: a counter's ends in ``_total``; a histogram's
    series add ``_bucket``, ``_sum`` and ``_count`` to it."""
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    """A histogram's upper bounds; empty for the other kinds."""

    @property
    def base_name(self) -> str:
        """The name prometheus-client is given (it appends ``_total`` to a counter)."""
        return self.name.removesuffix("_total") if self.kind is Kind.COUNTER else self.name


SAVE_KINDS = ("periodic", "final")
"""``kind`` label of a save: every ``CHECKPOINT_INTERVAL`` steps, or on leaving."""
FINAL_OUTCOMES = ("committed", "refused", "late", "unknown")
"""``outcome`` label of a final save: committed; not committed because the store refused it
or failed; abandoned because it could not commit within the grace left; unknown, when the
commit's answer never came (the manifest may have landed: the next start finds out)."""
RESUME_SOURCES = ("final", "periodic")
"""``checkpoint`` label of a resume: from the final save of the process before (nothing
lost), or from a periodic one (that process ended without a final save: the steps since
that checkpoint are trained again)."""

_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_GRACE = (0, 1, 2, 5, 10, 15, 30, 60, 120, 300)

# The trainer: the smoke trainer, training() and a gang's ranks.

STOP_SIGNALS = Family(
    "spotproof_stop_signals_total",
    Kind.COUNTER,
    "Stop signals (SIGTERM, SIGINT) the trainer received: a reclaim's notice, but also a "
    "drain's, a scale-down's or a deletion's; the process cannot tell which.",
)
"""Named for what it counts, not for the reclaims among it: Kubernetes ends a pod with the
same SIGTERM whoever stops it, a reclaim's graceful node shutdown, a drain's eviction or a
``kubectl delete`` (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/
#pod-termination), so a process that receives one cannot say which it was. Was
``spotproof_preemptions_total``."""
FINAL_SAVES = Family(
    "spotproof_final_saves_total",
    Kind.COUNTER,
    "Final checkpoints on leaving, by outcome: committed, refused (the store failed or "
    "refused it), late (abandoned: it could not commit within the grace left), unknown "
    "(no answer to the commit: the next start reads what the store holds).",
    ("outcome",),
)
FINAL_SAVE_GRACE_LEFT = Family(
    "spotproof_final_save_grace_left_seconds",
    Kind.HISTOGRAM,
    "Seconds of the grace period left when the final checkpoint committed.",
    buckets=_GRACE,
)
SAVES = Family(
    "spotproof_checkpoint_saves_total",
    Kind.COUNTER,
    "Checkpoints committed, by kind: periodic or final.",
    ("kind",),
)
SAVE_SECONDS = Family(
    "spotproof_checkpoint_save_seconds",
    Kind.HISTOGRAM,
    "Seconds from the start of a checkpoint's upload to its commit, by kind.",
    ("kind",),
    _SECONDS,
)
SAVE_BYTES = Family(
    "spotproof_checkpoint_save_bytes_total",
    Kind.COUNTER,
    "Bytes of committed checkpoints, by kind.",
    ("kind",),
)
RESTORE_SECONDS = Family(
    "spotproof_checkpoint_restore_seconds",
    Kind.HISTOGRAM,
    "Seconds to find, verify and load the checkpoint a process resumed from.",
    buckets=_SECONDS,
)
RESTORE_BYTES = Family(
    "spotproof_checkpoint_restore_bytes_total",
    Kind.COUNTER,
    "Bytes of the checkpoints processes resumed from.",
)
RESUMES = Family(
    "spotproof_resumes_total",
    Kind.COUNTER,
    "Processes that resumed from a checkpoint, by the kind of save it was: final (nothing "
    "lost) or periodic (the process before ended without a final save).",
    ("checkpoint",),
)
STEPS_LOST = Family(
    "spotproof_steps_lost_total",
    Kind.COUNTER,
    "Steps trained past the newest committed checkpoint by a process that then stopped "
    "without committing them: a restart trains them again.",
)
STALL_SECONDS = Family(
    "spotproof_checkpoint_stall_seconds",
    Kind.HISTOGRAM,
    "Seconds a periodic save held training up: the wait for the previous upload plus the "
    "copy of the state.",
    buckets=_SECONDS,
)
LAST_COMMITTED_STEP = Family(
    "spotproof_checkpoint_last_committed_step",
    Kind.GAUGE,
    "The step of the newest committed checkpoint this process knows of.",
)
LAST_COMMIT_TIME = Family(
    "spotproof_checkpoint_last_commit_timestamp_seconds",
    Kind.GAUGE,
    "Unix time the newest committed checkpoint this process knows of was committed.",
)
INTERVAL_SECONDS = Family(
    "spotproof_checkpoint_interval_seconds",
    Kind.GAUGE,
    "Seconds expected between periodic checkpoints: the interval in steps times the mean "
    "step time so far.",
)
INTERVAL_STEPS = Family(
    "spotproof_checkpoint_interval_steps",
    Kind.GAUGE,
    "Steps between periodic checkpoints (CHECKPOINT_INTERVAL).",
)
STEP = Family("spotproof_training_step", Kind.GAUGE, "The step training has reached.")
LAST_STEP_TIME = Family(
    "spotproof_training_last_step_timestamp_seconds",
    Kind.GAUGE,
    "Unix time this process last reached a step, or resumed: training has not advanced "
    "for time() minus it.",
)
"""What tells a stalled trainer (a hung collective, a data loader waiting forever) apart:
the step gauge alone says where training is, not since when, and no PromQL range can be
as long as each trainer's own interval. A gauge, so it is stored as served everywhere."""
STEPS = Family(
    "spotproof_training_steps_total",
    Kind.COUNTER,
    "Steps trained by this process (steps trained again after a resume included).",
)

TRAINER = (
    STOP_SIGNALS,
    FINAL_SAVES,
    FINAL_SAVE_GRACE_LEFT,
    SAVES,
    SAVE_SECONDS,
    SAVE_BYTES,
    RESTORE_SECONDS,
    RESTORE_BYTES,
    RESUMES,
    STEPS_LOST,
    STALL_SECONDS,
    LAST_COMMITTED_STEP,
    LAST_COMMIT_TIME,
    INTERVAL_SECONDS,
    INTERVAL_STEPS,
    STEP,
    LAST_STEP_TIME,
    STEPS,
)

# The batch worker (runtime.batch.worker): one family per WorkerReport count.

ITEMS_LEASED = Family(
    "spotproof_batch_items_leased_total", Kind.COUNTER, "Work items pulled from the queue."
)
ITEMS_DONE = Family(
    "spotproof_batch_items_done_total", Kind.COUNTER, "Work items computed and stored."
)
ITEMS_ALREADY_DONE = Family(
    "spotproof_batch_items_already_done_total",
    Kind.COUNTER,
    "Deliveries whose result was already stored: acknowledged without computing.",
)
ITEMS_DUPLICATE = Family(
    "spotproof_batch_items_duplicate_total",
    Kind.COUNTER,
    "Work items computed after another delivery had stored the result (work wasted).",
)
ITEMS_HANDED_BACK = Family(
    "spotproof_batch_items_handed_back_total",
    Kind.COUNTER,
    "Work items released to the queue unfinished on SIGTERM, for another worker.",
)
ITEMS_FAILED = Family(
    "spotproof_batch_items_failed_total",
    Kind.COUNTER,
    "Deliveries whose computation raised: handed back for another try.",
)
ITEMS_DEAD_LETTERED = Family(
    "spotproof_batch_items_dead_lettered_total",
    Kind.COUNTER,
    "Failures and malformed messages on their last allowed delivery: the queue moves them "
    "to its dead-letter queue.",
)
ITEMS_IN_FLIGHT = Family(
    "spotproof_batch_items_in_flight", Kind.GAUGE, "Work items leased and not yet finished."
)
ITEM_SECONDS = Family(
    "spotproof_batch_item_seconds",
    Kind.HISTOGRAM,
    "Seconds to compute and store one work item.",
    buckets=_SECONDS,
)

BATCH = (
    ITEMS_LEASED,
    ITEMS_DONE,
    ITEMS_ALREADY_DONE,
    ITEMS_DUPLICATE,
    ITEMS_HANDED_BACK,
    ITEMS_FAILED,
    ITEMS_DEAD_LETTERED,
    ITEMS_IN_FLIGHT,
    ITEM_SECONDS,
)

ALL = TRAINER + BATCH

DEFAULT_PORT = 9464
"""The port a pod serves ``/metrics`` on when its manifest asks for metrics (the
``METRICS_PORT`` its components render)."""
METRICS_PATH = "/metrics"
PORT_NAME = "metrics"
"""The name of the container port serving ``/metrics``: scrape configurations select it."""
