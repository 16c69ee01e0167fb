"""``spotproof:monitoring``: the alerts a stack's managed Prometheus evaluates, and where
they go.

Every key is optional. Monitoring is on by default, except on a stack that says it is
disposable (``spotproof:disposable: true``, the dev stacks): managed Prometheus bills by
the sample ingested and the query evaluated, which a throwaway cluster need not pay. The
rules themselves are ``observability.rules``; each cloud's component renders them into its
managed Prometheus and sends what fires to ``notify``::

    spotproof:monitoring:
      pendingMinutes: {flex-start: 2880}    # our queued pool often waits two days
      checkpointAgeIntervals: 4
      notify: [projects/my-project/notificationChannels/1234567890]

A program of components on a cluster spotproof did not create states the same object as
``spotproof:existingCluster.monitoring``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import PROFILES, Cloud, profile
from spotproof.catalog.profile import ScrapeFloor
from spotproof.fleet.errors import SpecError
from spotproof.fleet.fields import Checked, ConfigObject, read_object, read_settings, setting
from spotproof.fleet.pools import PoolClass
from spotproof.fleet.readers import boolean, integer, items, number

WEEK_MINUTES = 7 * 24 * 60


@dataclass(frozen=True)
class PendingMinutes(Checked):
    """Minutes a GPU pod of each target class may stay Pending before the alert, each 1 to
    10080 (a week: flex-start's longest run, https://cloud.google.com/kubernetes-engine/docs/
    concepts/dws). A new node takes 80 to 120 s to start (GKE's capacity-provisioning page),
    a GPU driver and a training image minutes more."""

    spot_gpu: int = setting("spot-gpu", integer(1, WEEK_MINUTES), 30)
    """Default 30: a node that can be had is had within ten minutes; a spot pod waiting three
    times that finds no spot capacity, and the stack's on-demand fallback should have taken
    its work by then."""
    on_demand_gpu: int = setting("on-demand-gpu", integer(1, WEEK_MINUTES), 15)
    """Default 15: nothing falls back behind on-demand, so a stock-out or an exhausted quota
    here stops the work; it is worth knowing sooner."""
    flex_start: int = setting("flex-start", integer(1, WEEK_MINUTES), 24 * 60)
    """Default 1440 (a day): queued provisioning gives nodes when capacity frees up, and
    waits of days are reported (65 hours for TPUs, a field report noted in the project's
    platform facts, queued provisioning); a day says "look", not "broken". Work Kueue admits
    has no pods before admission, so its queueing is not counted here."""

    def of(self, pool_class: PoolClass) -> int:
        """The minutes of one GPU target class."""
        return {
            PoolClass.SPOT_GPU: self.spot_gpu,
            PoolClass.ON_DEMAND_GPU: self.on_demand_gpu,
            PoolClass.FLEX_START: self.flex_start,
        }[pool_class]


GPU_CLASSES = (PoolClass.SPOT_GPU, PoolClass.ON_DEMAND_GPU, PoolClass.FLEX_START)
"""The target classes a GPU workload's pods carry, each with its Pending threshold."""


def _any_cloud_target(key: str, raw: Any) -> str:
    """A target in any registered cloud's format (each cloud's profile says its own:
    ``catalog.profile.ManagedPrometheus``); the stack's cloud narrows it
    (:func:`check_notify`)."""
    routes = {cloud: p.managed_prometheus for cloud, p in PROFILES.items()}
    if isinstance(raw, str) and any(r.notify_target.fullmatch(raw) for r in routes.values()):
        return raw
    allowed = "; ".join(f"{cloud}: {r.notify_target_form}" for cloud, r in routes.items())
    raise SpecError(key, raw, "not a notification target", allowed)


def _targets(key: str, raw: Any) -> tuple[str, ...]:
    return tuple(_any_cloud_target(item_key, item) for item_key, item in items(key, raw))


@dataclass(frozen=True)
class Monitoring(Checked):
    """The stack's alerting: rules, thresholds and notification targets."""

    enabled: bool = setting("enabled", boolean, True)
    """Render the rules, the scrape configuration and the cloud's managed Prometheus
    resources. Default on, except on a disposable stack (off: ingestion costs money)."""
    pending_minutes: PendingMinutes = setting("pendingMinutes", None, factory=PendingMinutes)
    """Per target class (spot-gpu, on-demand-gpu, flex-start), minutes a GPU pod may stay
    Pending before ``SpotproofGpuPodPendingTooLong`` fires (:class:`PendingMinutes`)."""
    checkpoint_age_intervals: int = setting("checkpointAgeIntervals", integer(2, 20), 3)
    """N, 2 to 20: ``SpotproofCheckpointOverdue`` fires when a trainer has committed no
    checkpoint for longer than N of its expected intervals. Default 3: one interval is
    normal, a second covers a slow upload and uneven steps; a third is two saves missed."""
    steps_lost_per_hour: int | None = setting("stepsLostPerHour", integer(1, 10**12), None)
    """Steps a namespace's trainers may lose in an hour, 1 to 10^12, before
    ``SpotproofStepsLostAboveBudget`` fires. Default: one checkpoint interval's worth
    (``spotproof_checkpoint_interval_steps``), the most one reclaim should cost."""
    queue_age_minutes: int = setting("queueAgeMinutes", integer(1, 2 * WEEK_MINUTES), 30)
    """Minutes, 1 to 20160 (14 days, the longest SQS keeps a message), the oldest batch item
    may wait, or batch work may make no progress, before the batch alerts fire. Default 30:
    workers on spot GPUs start in minutes, scaled from zero included."""
    reclaim_rate_factor: float = setting("reclaimRateFactor", number(1, 100), 3.0)
    """``SpotproofReclaimRateAboveAssumed`` fires when the reclaims observed over 6 hours
    exceed this many times, 1 to 100, the rate the stack's checkpoint advice assumes
    (``spotproof:reclaimModel``). Default 3: the observed count is rough (drains and crashes
    count, every rank of a gang counts its restart: see the rule), so a smaller factor
    fires on that noise."""
    scrape_interval_seconds: int = setting("scrapeIntervalSeconds", integer(5, 120), 15)
    """Seconds, 5 to 120 (30 to 120 on EKS), between scrapes of the trainer and worker pods;
    the rules count samples to measure running time, so each cloud's collector is set to
    exactly this. Default 15: a trainer waits for one more scrape after its final save,
    within a grace period that is 15 s on GKE by default (``catalog.GRACE_PERIOD_SECONDS``).
    On EKS the default is 30, the shortest interval Amazon Managed Service for Prometheus's
    managed collector takes (its profile's ``ScrapeFloor``, ``catalog.eks``)."""
    target_down_minutes: int = setting("targetDownMinutes", integer(1, 60), 5)
    """Minutes, 1 to 60, a trainer's or worker's metrics endpoint may fail its scrapes before
    ``SpotproofMetricsTargetDown`` fires. Default 5: a process serves its metrics within
    seconds of starting, and one that is leaving stops being scraped once its pod has
    finished; minutes of failed scrapes are a process that does not serve, or a
    NetworkPolicy that stops the collector."""
    crash_loop_restarts: int = setting("crashLoopRestarts", integer(1, 100), 3)
    """N, 1 to 100: the crash-loop alerts fire once a training Job's pods have failed N
    times (failures its ``backoffLimit`` counts: reclaims are not among them), or a
    workload's container has restarted N times within an hour. Default 3: one crash may be
    bad luck, three are a pattern; a TrainingJob's default ``backoffLimit`` of 3 gives up
    at the fourth (``SpotproofJobFailed``)."""
    step_stall_intervals: int = setting("stepStallIntervals", integer(1, 20), 2)
    """N, 1 to 20: ``SpotproofTrainingStalled`` fires when a trainer's step has not advanced
    for N of its expected checkpoint intervals. Default 2: a periodic save holds training up
    for a fraction of an interval, and a stall is worth knowing before
    ``checkpointAgeIntervals`` (3) reports the missing checkpoints it causes."""
    notify: tuple[str, ...] = setting("notify", _targets, ())
    """Where firing alerts go: GKE Cloud Monitoring notification channels
    (``projects/P/notificationChannels/ID``), EKS SNS topic ARNs, AKS action group resource
    IDs; empty, alerts show in the cloud's console only."""

    @classmethod
    def judge(cls, key: str, raw: Any) -> Monitoring:
        return read_monitoring(None, disposable=False)(key, raw)


def _floored_scrape_interval(
    cloud: Cloud, floor: ScrapeFloor, key: str, value: int, *, given: bool
) -> int:
    """``value`` where the cloud's collector takes it; a default below the collector's
    shortest interval rises to it, a stated one is refused."""
    if value >= floor.seconds:
        return value
    if not given:
        return floor.seconds
    raise SpecError(
        key, value, f"shorter than {floor.by} scrapes", f"{floor.seconds} to 120 on {cloud.upper()}"
    )


def check_notify(cloud: Cloud, key: str, targets: tuple[str, ...]) -> None:
    """Each target in the format of ``cloud``'s alert routing."""
    routing = profile(cloud).managed_prometheus
    for index, target in enumerate(targets):
        if not routing.notify_target.fullmatch(target):
            raise SpecError(
                f"{key}[{index}]", target, f"not a target on {cloud}", routing.notify_target_form
            )


def read_monitoring(cloud: Cloud | None, *, disposable: bool) -> Callable[[str, Any], Monitoring]:
    """The reader of a stack's ``monitoring``: off by default on a disposable stack, and
    notification targets in the stack's cloud's format (any cloud's while it is unknown)."""

    def parse(key: str, raw: Any) -> Monitoring:
        obj = ConfigObject(key, raw, fields_of=Monitoring)
        values = read_settings(
            Monitoring,
            obj,
            enabled=obj.field("enabled", boolean, not disposable),
            pending_minutes=obj.section(
                "pendingMinutes", lambda k, r: read_object(PendingMinutes, k, r)
            ),
        )
        obj.finish()
        if cloud is not None:
            check_notify(cloud, obj.key_of("notify"), values["notify"])
            floor = profile(cloud).managed_prometheus.scrape_floor
            if floor is not None:
                values["scrape_interval_seconds"] = _floored_scrape_interval(
                    cloud,
                    floor,
                    obj.key_of("scrapeIntervalSeconds"),
                    values["scrape_interval_seconds"],
                    given="scrapeIntervalSeconds" in obj.raw,
                )
        return Monitoring(**values)

    return parse
