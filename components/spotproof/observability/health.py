"""Whether the stack's workloads are seen at all, and whether they make progress: a trainer
or worker whose metrics cannot be scraped, a Job that failed, a workload that keeps
crashing, a trainer whose step stands still. Every other alert reads the workloads' own
metrics, so without the first of these a broken scrape (a NetworkPolicy that keeps the
collector out, a process that serves nothing) silences them all.

Facts they rely on, each from what it names:

- ``up``: Prometheus writes it for every target it scrapes, 1 or 0, with the target's
  labels (https://prometheus.io/docs/concepts/jobs_instances/); the workloads' targets
  carry ``target_class`` on every cloud (``gke.monitoring_documents.pod_monitoring``,
  ``eks.monitoring_documents.workload_job``, ``aks.monitoring_documents.pod_monitor``), and
  GKE's Managed Service for Prometheus exports it as a gauge (GoogleCloudPlatform/
  prometheus-engine v0.15.3 ``pkg/export/export.go``, ``internalMetricMetadata``). A pod
  that has finished is no target: each cloud's scrape drops pods in phase ``Failed`` or
  ``Succeeded`` (prometheus-engine v0.17.2 ``pod_config.go``, ``FilterRunning``;
  prometheus-operator v0.92.0 ``pkg/prometheus/promcfg.go``, ``generateRunningFilter``,
  which AKS's add-on runs; EKS's own job), and a Pending pod has no address to scrape.
  A pod that declares no ``metrics`` port is no target either: whether it should have
  served metrics is not known to any series, so a workload scraped nowhere at all (no
  ``up`` series) is not alerted on.
- kube-state-metrics v2.20.0 (``docs/metrics/workload/job-metrics.md``,
  ``internal/store/job.go``): ``kube_job_failed{condition="true"}`` is 1 while a Job has
  its ``Failed`` condition; ``kube_job_status_failed`` is ``.status.failed`` while the Job
  has not failed (no ``reason`` label; once it has, one 0-or-1 series per reason instead).
  ``.status.failed`` counts the pod failures ``backoffLimit`` counts, and a
  ``podFailurePolicy`` rule with action ``Ignore`` leaves it alone
  (kubernetes/enhancements KEP-3329, ``PodFailurePolicyActionIgnore``): spotproof's Jobs
  ignore reclaims that way (``kube.training.pod_failure_policy``), so what it counts are
  crashes. ``kube_pod_container_status_restarts_total`` is a counter of a container's
  restarts in its pod (``pod-metrics.md``).
- A JobSet's child Jobs (``backoffLimit: 0``) fail on a gang's every crash and reclaim,
  and the JobSet restarts the gang by deleting them in the foreground: a failed child Job
  is gone once its pods have terminated, within their grace; only when the JobSet itself
  has failed does its failed Job stay, until the JobSet's TTL (kubernetes-sigs/jobset
  v0.12.0, f22e565, ``pkg/controllers/jobset_controller.go``: ``getChildJobs`` files a
  Job of an earlier restart attempt as ``previous``, ``deleteJobs`` deletes with
  ``DeletePropagationForeground``, and a finished JobSet deletes only its active Jobs). So
  :data:`JOB_FAILED_FOR` outlasts a restart, and a failed JobSet shows as its failed child
  Job. A gang's crashes before that are not counted by any Job (each restart makes new
  ones): they show as its ranks' ``SpotproofResumedFromPeriodicCheckpoint``. The JobSet
  controller's own ``jobset_failed_total`` (``pkg/metrics/metrics.go``) is served over
  authenticated HTTPS only (``main.go``, ``SecureServing``), which no managed collector
  here is given credentials for.
- AKS: its metrics add-on keeps only listed kube-state-metrics series under its minimal
  ingestion profile, ``kube_job_failed`` and ``kube_pod_container_status_restarts_total``
  among them and ``kube_job_status_failed`` not (Azure/prometheus-collector@39583fd
  ``otelcollector/shared/configmap/mp/tomlparser-default-targets-metrics-keep-list.go``):
  there ``SpotproofTrainerCrashLooping`` needs it added to the add-on's keep list.
"""

from __future__ import annotations

from collections.abc import Sequence

from spotproof.fleet.monitoring import Monitoring
from spotproof.observability.model import Rule, RuleGroup
from spotproof.observability.promql import EVALUATION_INTERVAL, NAMESPACE, POD, alert, shown
from spotproof.runtime.metrics import names

STEP_AGE = "namespace_pod:spotproof_step_age:seconds"
JOB = f"{NAMESPACE}, job_name"
"""The labels that name one Job in kube-state-metrics' series."""
JOB_FAILED_FOR = "10m"
"""Longer than a JobSet's restart keeps its failed child Job: the Job goes once its pods
have terminated, within a grace period of minutes (see the module)."""
STALL_FOR = "5m"
"""As ``SpotproofCheckpointOverdue``: a trainer slow for a moment is not stalled."""
KSM_METRICS = (
    "kube_job_failed",
    "kube_job_status_failed",
    "kube_pod_container_status_restarts_total",
)
"""The kube-state-metrics series these alerts read (``rules.KSM_REQUIREMENT``)."""


def _in(namespaces: Sequence[str]) -> str:
    """A matcher keeping the stack's workload namespaces; none given: every namespace."""
    return f'namespace=~"{"|".join(sorted(namespaces))}"' if namespaces else ""


def _selector(metric: str, *matchers: str) -> str:
    kept = ", ".join(m for m in matchers if m)
    return f"{metric}{{{kept}}}" if kept else metric


def _target_down(monitoring: Monitoring) -> Rule:
    minutes = monitoring.target_down_minutes
    return alert(
        "SpotproofMetricsTargetDown",
        f'max by ({POD}) (up{{target_class!=""}}) == 0',
        "critical",
        f"The metrics of {shown('namespace', 'pod')} cannot be scraped",
        f"Every scrape for {minutes} minutes failed, so no other alert sees this pod. A "
        "NetworkPolicy that keeps the collector out of the namespace, a process that does "
        "not serve METRICS_PORT (its image lacks spotproof[metrics], or it has not reached "
        "training() yet), or a port the pod does not listen on. See "
        "docs/monitoring.md#spotproofmetricstargetdown.",
        for_=f"{minutes}m",
    )


def _stalled(monitoring: Monitoring) -> tuple[Rule, Rule]:
    n = monitoring.step_stall_intervals
    interval = f"max by ({POD}) ({names.INTERVAL_SECONDS.name} > 0)"
    age = Rule(
        record=STEP_AGE,
        expr=f"time() - max by ({POD}) ({names.LAST_STEP_TIME.name} > 0)",
    )
    stalled = alert(
        "SpotproofTrainingStalled",
        f"{STEP_AGE} > {n} * {interval}",
        "critical",
        f"Trainer {shown('namespace', 'pod')} has not advanced a step for "
        "{{ $value | humanizeDuration }}",
        f"Over {n} of its expected checkpoint intervals: its GPUs are held and train "
        "nothing. A hung collective (one rank lost or stuck), a data loader waiting on its "
        "source, a save that never returns. Read its log and its ranks' logs; a restart of "
        "the pod resumes from the last checkpoint. See "
        "docs/monitoring.md#spotprooftrainingstalled.",
        for_=STALL_FOR,
    )
    return age, stalled


def _failures(monitoring: Monitoring, namespaces: Sequence[str]) -> tuple[Rule, ...]:
    n, where = monitoring.crash_loop_restarts, _in(namespaces)
    failed = _selector("kube_job_failed", 'condition="true"', where)
    pod_failures = _selector("kube_job_status_failed", 'reason=""', where)
    restarts = _selector("kube_pod_container_status_restarts_total", where)
    return (
        alert(
            "SpotproofJobFailed",
            f"max by ({JOB}) ({failed}) == 1",
            "critical",
            "Job {{ $labels.namespace }}/{{ $labels.job_name }} has failed",
            "It will not run again by itself: its pods crashed more often than its "
            "backoffLimit allows, a configuration error failed it at once, or it is the "
            "failed child Job of a JobSet that has given up. `kubectl describe job` gives "
            "the reason; the pods' logs the error. Fix it and submit the run again: it "
            "resumes from its last checkpoint. See docs/monitoring.md#spotproofjobfailed.",
            for_=JOB_FAILED_FOR,
        ),
        alert(
            "SpotproofTrainerCrashLooping",
            f"max by ({JOB}) ({pod_failures}) >= {n}",
            "warning",
            "Pods of Job {{ $labels.namespace }}/{{ $labels.job_name }} failed {{ $value }} times",
            f"{n} or more failures its backoffLimit counts: crashes, not reclaims (the "
            "Job's podFailurePolicy ignores those). Each restart resumes from the last "
            "checkpoint and crashes again. Read the failed pods' logs (`kubectl logs "
            "--previous`, or the pods the Job keeps). See "
            "docs/monitoring.md#spotprooftrainercrashlooping.",
        ),
        alert(
            "SpotproofContainerCrashLooping",
            f"max by ({POD}, container) (({restarts} - {restarts} offset 1h)"
            f" or ({restarts} unless {restarts} offset 1h)) >= {n}",
            "warning",
            f"Container {{{{ $labels.container }}}} of {shown('namespace', 'pod')} "
            "restarted {{ $value }} times in an hour",
            f"{n} or more restarts in its pod within an hour: a batch worker (or any "
            "workload restarted in place) that fails as it starts or as it works. A "
            "reclaim is no restart: the pod goes with its node. `kubectl logs --previous` "
            "gives the error. See docs/monitoring.md#spotproofcontainercrashlooping.",
        ),
    )


def health_group(monitoring: Monitoring, namespaces: Sequence[str] = ()) -> RuleGroup:
    """The group; ``namespaces``: the stack's workload namespaces, the only ones whose
    Jobs and containers its alerts judge (none: every namespace)."""
    age, stalled = _stalled(monitoring)
    return RuleGroup(
        "spotproof-health",
        EVALUATION_INTERVAL,
        (age, _target_down(monitoring), stalled, *_failures(monitoring, namespaces)),
    )
