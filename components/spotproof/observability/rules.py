"""The alerts and recording rules every cloud's managed Prometheus evaluates, written once.

Each cloud's component renders :func:`rule_groups` into its managed Prometheus (on GKE a
``ClusterRules`` and Cloud Monitoring alert policies, an Amazon Managed Service for
Prometheus rule groups namespace, Azure Monitor prometheus rule groups);
``tests/test_alert_rules.py`` runs the very file :func:`~spotproof.observability.model.rule_file`
writes through ``promtool check rules`` and ``promtool test rules``. docs/monitoring.md says
what each alert means and what to do.

What the rules rely on from the scrape. Every trainer and worker series carries the
``namespace`` and ``pod`` of the pod it came from (GKE's ``PodMonitoring`` sets both; the
EKS and AKS scrape configurations relabel them from ``__meta_kubernetes_pod_*``), and
kube-state-metrics' own ``namespace``/``pod``/``uid`` labels reach the rules unrenamed
(``honor_labels``, or a collector that sets neither on its target): :data:`KSM_REQUIREMENT`.
Trainers are grouped by namespace where a rule needs a job's total; the metrics carry no
job label (a pod name changes on every restart, and an unbounded label is refused). Every
aggregation and join keeps ``cluster`` as well (:data:`~spotproof.observability.promql.POD`).

Counting events. Prometheus 2's ``increase()`` cannot see the first value of a series: a
process that counts only on its way out (a final save, steps lost) would be missed.
:func:`~spotproof.observability.promql.events` adds what a series that began inside the
window holds. Two storages meet these rules: Amazon's and Azure's managed Prometheus keep
a series as scraped; GKE's Managed Service for Prometheus drops the first sample of every
counter and histogram series and stores later ones less it (GoogleCloudPlatform/
prometheus-engine v0.15.3, ``pkg/export/series_cache.go`` ``getResetAdjusted``), which is
why a process serves its counters at 0 until its first scrape
(``runtime.metrics.recorders.Registry``). Each alert is tested under both
(``tests/promtool_cases.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spotproof import clouds
from spotproof.catalog import Cloud
from spotproof.fleet.monitoring import GPU_CLASSES, Monitoring
from spotproof.observability.health import KSM_METRICS as KSM_HEALTH_METRICS
from spotproof.observability.health import health_group
from spotproof.observability.model import Rule, RuleGroup
from spotproof.observability.promql import (
    EVALUATION_INTERVAL,
    NAMESPACE,
    POD,
    alert,
    events,
    label_name,
    shown,
)
from spotproof.observability.queues import batch_group
from spotproof.runtime.metrics import names
from spotproof.scheduling import TARGET_CLASS_LABEL

UP_WINDOW = "1d"
"""How far back a trainer's running time is counted; an overdue checkpoint is detected
for N intervals up to a day."""
RECLAIM_WINDOW = "6h"


@dataclass(frozen=True)
class KsmRequirement:
    """What kube-state-metrics must expose for the Pending alerts."""

    release: str
    metrics: tuple[str, ...]
    labels_allowlist: str
    """The value of ``--metric-labels-allowlist``: the pods' target-class label."""

    @property
    def arguments(self) -> tuple[str, ...]:
        """kube-state-metrics' command-line arguments that add what the rules need."""
        return (f"--metric-labels-allowlist={self.labels_allowlist}",)


KSM_REQUIREMENT = KsmRequirement(
    release="v2.20.0",
    metrics=(
        "kube_pod_status_phase",
        "kube_pod_created",
        "kube_pod_labels",
        *KSM_HEALTH_METRICS,
        "kube_node_labels",
    ),
    labels_allowlist=f"pods=[{TARGET_CLASS_LABEL}]",
)
"""Read in kubernetes/kube-state-metrics at v2.20.0 (4ffeda2), docs/metrics/workload/
pod-metrics.md: the pod series are STABLE and on by default, each labelled ``namespace``,
``pod`` and ``uid``; ``kube_pod_labels`` carries a pod label only when allowlisted
(docs/developer/cli-arguments.md), renamed ``label_`` + the key with every character outside
``[a-zA-Z0-9_]`` made ``_`` (internal/store/utils.go, ``SanitizeLabelName``). The Job and
restart series are ``observability.health``'s (job-metrics.md: STABLE, labelled
``namespace`` and ``job_name``); ``kube_node_labels`` with the nodes' pool class
allowlisted is read on EKS only (``observability.cloud_reclaims``), where spotproof's own
kube-state-metrics allowlists it. A collector that keeps only some metrics
(``--metric-allowlist``, or its own filter) must keep these: AKS's add-on drops
``kube_job_status_failed`` (``observability.health``)."""
TARGET_CLASS = label_name(TARGET_CLASS_LABEL, prefix="label_")

PENDING_AGE = "namespace_pod:kube_pod_pending_age:seconds"
CHECKPOINT_AGE = "namespace_pod:spotproof_checkpoint_age:seconds"
TRAINER_UP = "namespace_pod:spotproof_trainer_up:seconds"
INTERRUPTIONS = "namespace:spotproof_interruptions:increase6h"
"""Stop signals plus resumes from periodic checkpoints: every way a trainer's run was cut,
reclaims among them but not alone (``names.STOP_SIGNALS``)."""
POD_HOURS = "namespace:spotproof_trainer_pod_hours:sum6h"


def _pending(monitoring: Monitoring) -> RuleGroup:
    age = Rule(
        record=PENDING_AGE,
        expr=(
            "(\n"
            f"  (time() - max by ({POD}, uid) (kube_pod_created))\n"
            f"  and on ({POD}, uid)\n"
            f'  max by ({POD}, uid) (kube_pod_status_phase{{phase="Pending"}} == 1)\n'
            ")\n"
            f"* on ({POD}, uid) group_left (target_class)\n"
            f"label_replace(max by ({POD}, uid, {TARGET_CLASS})"
            f' (kube_pod_labels{{{TARGET_CLASS}!=""}}),'
            f' "target_class", "$1", "{TARGET_CLASS}", "(.+)")'
        ),
    )
    alerts = tuple(
        alert(
            "SpotproofGpuPodPendingTooLong",
            f'{PENDING_AGE}{{target_class="{pool_class}"}}'
            f" > {60 * monitoring.pending_minutes.of(pool_class)}",
            "warning",
            f"GPU pod {shown('namespace', 'pod')} ({pool_class}) has been Pending for "
            "{{ $value | humanizeDuration }}",
            f"Over this stack's {monitoring.pending_minutes.of(pool_class)} minutes for "
            f"{pool_class}. `kubectl describe pod` or `spotproof status` gives the "
            "scheduler's reason: no node fits (capacity or quota: check the autoscaler's "
            "events and the fallback pools), a taint or selector no pool matches, or an "
            "image still pulling. See docs/monitoring.md#spotproofgpupodpendingtoolong.",
            # One rule per class: promtool refuses two rules of one name and labels.
            target_class=str(pool_class),
        )
        for pool_class in GPU_CLASSES
    )
    return RuleGroup("spotproof-pending", EVALUATION_INTERVAL, (age, *alerts))


def _checkpoints(monitoring: Monitoring) -> RuleGroup:
    n = monitoring.checkpoint_age_intervals
    interval = f"max by ({POD}) ({names.INTERVAL_SECONDS.name} > 0)"
    periodic = f'{names.RESUMES.name}{{checkpoint="periodic"}}'
    failed = f'{names.FINAL_SAVES.name}{{outcome=~"refused|late"}}'
    budget = (
        str(monitoring.steps_lost_per_hour)
        if monitoring.steps_lost_per_hour is not None
        else f"on ({NAMESPACE}) max by ({NAMESPACE})"
        f" (max_over_time({names.INTERVAL_STEPS.name}[1h]))"
    )
    budget_text = (
        f"{monitoring.steps_lost_per_hour} steps"
        if monitoring.steps_lost_per_hour is not None
        else "one checkpoint interval's worth of steps"
    )
    return RuleGroup(
        "spotproof-checkpoints",
        EVALUATION_INTERVAL,
        (
            Rule(
                record=CHECKPOINT_AGE,
                expr=f"time() - max by ({POD}) ({names.LAST_COMMIT_TIME.name} > 0)",
            ),
            Rule(
                record=TRAINER_UP,
                expr=(
                    f"max by ({POD}) (count_over_time({names.INTERVAL_SECONDS.name}"
                    f"[{UP_WINDOW}])) * {monitoring.scrape_interval_seconds}"
                ),
            ),
            alert(
                "SpotproofCheckpointOverdue",
                # min(age, up): a restarted trainer is not overdue before it has run N
                # intervals; one that never committed (no age) counts from its start.
                f"({CHECKPOINT_AGE} < {TRAINER_UP} or {TRAINER_UP}) > {n} * {interval}",
                "critical",
                f"Trainer {shown('namespace', 'pod')} has committed no checkpoint for "
                "{{ $value | humanizeDuration }}",
                f"Over {n} of its expected checkpoint intervals: a reclaim now loses all of "
                "that work. Check the trainer's log for save errors, the checkpoint store "
                "(permissions, quota, throttling) and whether training is stalled. See "
                "docs/monitoring.md#spotproofcheckpointoverdue.",
                for_="5m",
            ),
            alert(
                "SpotproofFinalSaveFailed",
                f"sum by ({POD}, outcome) ({events(failed, '1h')}) > 0",
                "warning",
                f"A final checkpoint of {shown('namespace', 'pod')} was {{{{ $labels.outcome }}}}",
                "On its stop signal the trainer could not commit its state (refused: the "
                "store failed or refused it; late: it could not commit within the grace "
                "left), so the next run resumes from the last periodic checkpoint. For "
                "late: shorten the save (smaller or sharded state, async save) or lengthen "
                "the grace; for refused: the trainer's log names the store's error. See "
                "docs/monitoring.md#spotprooffinalsavefailed.",
            ),
            alert(
                "SpotproofResumedFromPeriodicCheckpoint",
                f"sum by ({POD}) ({events(periodic, '1h')}) > 0",
                "info",
                f"Trainer {shown('namespace', 'pod')} resumed from a periodic checkpoint",
                "The process before it ended without a final save (a node lost without "
                "notice, a kill, a crash, or a failed final save): the steps since that "
                "checkpoint are trained again. Frequent ones call for a shorter checkpoint "
                "interval (`spotproof plan` advises one). See "
                "docs/monitoring.md#spotproofresumedfromperiodiccheckpoint.",
            ),
            alert(
                "SpotproofStepsLostAboveBudget",
                f"sum by ({NAMESPACE}) ({events(names.STEPS_LOST.name, '1h')}) > {budget}",
                "warning",
                "Trainers in {{ $labels.namespace }} lost {{ $value }} steps in the last hour",
                f"Over the budget of {budget_text} an hour. Reclaims are more frequent than "
                "the checkpoint interval assumes, or final saves fail: see "
                "SpotproofFinalSaveFailed and SpotproofReclaimRateAboveAssumed, and shorten "
                "the interval. See docs/monitoring.md#spotproofstepslostabovebudget.",
            ),
        ),
    )


def _reclaims(monitoring: Monitoring, assumed_per_node_hour: float) -> RuleGroup:
    w = RECLAIM_WINDOW
    threshold = monitoring.reclaim_rate_factor * assumed_per_node_hour
    periodic = f'{names.RESUMES.name}{{checkpoint="periodic"}}'
    return RuleGroup(
        "spotproof-reclaims",
        EVALUATION_INTERVAL,
        (
            Rule(
                record=INTERRUPTIONS,
                expr=(
                    f"sum by ({NAMESPACE}) ({events(names.STOP_SIGNALS.name, w)}"
                    f" or {events(periodic, w)})"
                ),
            ),
            Rule(
                record=POD_HOURS,
                expr=(
                    f"sum by ({NAMESPACE}) (count_over_time({names.STEP.name}[{w}]))"
                    f" * {monitoring.scrape_interval_seconds} / 3600"
                ),
            ),
            alert(
                "SpotproofReclaimRateAboveAssumed",
                f"({INTERRUPTIONS} / {POD_HOURS} > {threshold:g}) and {INTERRUPTIONS} >= 2",
                "warning",
                'Trainers in {{ $labels.namespace }} see {{ $value | printf "%.3g" }} '
                "interruptions per pod-hour",
                f"Over {monitoring.reclaim_rate_factor:g} times the {assumed_per_node_hour:g} "
                "reclaims per node-hour the checkpoint advice assumes, over 6 hours. The "
                "count is rough: stop signals (reclaims, drains, scale-downs, deletions) "
                "plus resumes from periodic checkpoints (ends without notice, crashes), and "
                "every rank of a gang counts its restart. If real, set "
                "spotproof:reclaimModel.reclaimsPerNodeHour to the observed rate and follow "
                "`spotproof plan`'s new interval, or move to other zones or GPU types. See "
                "docs/monitoring.md#spotproofreclaimrateaboveassumed.",
            ),
        ),
    )


def rule_groups(
    monitoring: Monitoring,
    *,
    cloud: Cloud,
    assumed_reclaims_per_node_hour: float,
    batch_queue: str | None = None,
    namespaces: Sequence[str] = (),
) -> tuple[RuleGroup, ...]:
    """The groups a stack's managed Prometheus evaluates.

    ``namespaces``: the stack's workload namespaces, where the Job and restart alerts look
    (``observability.health``); none: every namespace of the cluster.

    ``assumed_reclaims_per_node_hour``: the rate the stack's checkpoint advice uses
    (``spotproof:reclaimModel.reclaimsPerNodeHour``, else the cloud's published rate).
    ``batch_queue``: the stack's batch queue, None without batch work; on GKE the
    subscription's path (``projects/P/subscriptions/S``), whose age Pub/Sub reports.

    Beyond the shared groups, the cloud's own (``observability.cloud``, each cloud's module
    found through ``spotproof.clouds``): its reclaim count and its queue's age, where its
    Prometheus sees them (``observability.queues`` says where it does not, and what stands
    in)."""
    groups = [
        _pending(monitoring),
        _checkpoints(monitoring),
        _reclaims(monitoring, assumed_reclaims_per_node_hour),
        health_group(monitoring, namespaces),
    ]
    own = clouds.module("spotproof.observability", cloud).RULES
    if own.reclaims is not None:
        groups.append(own.reclaims(monitoring, assumed_reclaims_per_node_hour))
    if batch_queue is not None:
        groups.append(batch_group(monitoring))
        if own.queue_age is not None:
            groups.append(own.queue_age(monitoring, batch_queue))
    return tuple(groups)
