"""The smoke-test Job: a real training run, preempted on purpose, that must finish.

Why each field is what it is:

- ``restartPolicy: Never`` and a ``podFailurePolicy``: a preempted pod is replaced by the
  Job controller on another node instead of restarted in place on a node that is going
  away. Pods that fail with the ``DisruptionTarget`` condition (node shutdown, spot
  reclaim, eviction) and trainers that exit ``PREEMPTED`` after committing their final
  checkpoint are *ignored*, so preemptions never use up ``backoffLimit``; a ``BAD_CONFIG``
  exit fails the Job at once because no retry can fix it.
- ``terminationGracePeriodSeconds`` fits the cloud's preemption notice: a longer grace
  period is cut short by the node going away, and the final save would be lost with it.
- GPU limits are always declared: without them the device plugin gives the pod no GPU.
- A PodDisruptionBudget with ``minAvailable: 1``, the cluster autoscaler's
  ``safe-to-evict: "false"`` and Karpenter's ``do-not-disrupt`` keep *voluntary*
  disruptions (scale-down, consolidation, upgrades) away from a running trainer. Only an
  integer ``minAvailable`` is valid over a Job's pods: ``maxUnavailable`` and percentages
  need a controller with a scale subresource, which Jobs lack, and the disruption
  controller then fails the budget (Kubernetes, "Specifying a Disruption Budget for your
  Application", arbitrary workloads:
  https://kubernetes.io/docs/tasks/run-application/configure-pdb/).
- The spot reclaim is not voluntary, but on EKS it arrives as one: Karpenter drains the
  node through the Eviction API, which the budget and ``do-not-disrupt`` hold back. The
  NodePool's ``terminationGracePeriod`` bounds that wait, so the pod is deleted with its
  full grace period before the two-minute notice ends (``eks.nodepools``). On GKE the
  kubelet's graceful node shutdown ignores both and sends SIGTERM at once.
- Each run writes under its own prefix, ``<checkpoint_url>/run-<digest of the smoke
  settings>``: a Job replaced because a setting changed starts from step 0 instead of
  resuming the previous run's weights, while the pods of one Job (retries after each
  preemption) share it. The trainer also refuses a checkpoint of another seed or model size.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from spotproof.fleet import PoolClass, SmokeTest
from spotproof.kube import training
from spotproof.kube.baseline import MANAGED_BY
from spotproof.kube.pods import Trainer
from spotproof.kube.workload import TargetPlacement, WorkloadIdentity, queue_labels
from spotproof.runtime import settings

TRAINER_COMMAND = ["python", "-m", "spotproof.smoke.train"]
JOB_NAME = "spotproof-smoke"


@dataclass
class SmokeTestJobArgs:
    smoke: SmokeTest
    checkpoint_url: pulumi.Input[str]
    """Where smoke runs keep checkpoints, e.g. ``gs://bucket/checkpoints/smoke``; each run
    writes under its own :func:`run_prefix` there."""
    placement: TargetPlacement
    """The pools of ``smoke.target``, from the cluster the Job runs on."""
    identity: WorkloadIdentity
    """The trainer's service account (the cluster creates it: ``trainer_account``) and its
    binding to the identity that may write the checkpoint prefix."""
    metrics_port: int | None = None
    """Where the trainer serves its metrics (``kube.pods.Trainer.metrics_port``): the
    stack's monitoring scrapes it; None, no metrics are served."""


def pod_labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": "spotproof-smoke", "app.kubernetes.io/component": "trainer"}


def run_prefix(smoke: SmokeTest) -> str:
    """``run-`` and 12 hex digits of the smoke settings: the same for every pod of one Job,
    new whenever a setting (and so the Job) changes."""
    chosen = json.dumps(asdict(smoke), sort_keys=True, default=str)
    return f"run-{hashlib.sha256(chosen.encode()).hexdigest()[:12]}"


def trainer_env(
    smoke: SmokeTest, checkpoint_url: str, store: dict[str, str] | None = None
) -> list[dict[str, str]]:
    """The trainer's whole configuration (the environment ``spotproof.smoke.train`` reads),
    plus its grace budget, taken from the same field as the pod's
    terminationGracePeriodSeconds, and what the store's client needs (``store``)."""
    values = {
        **(store or {}),
        settings.CHECKPOINT_URL.name: checkpoint_url,
        settings.CHECKPOINT_INTERVAL.name: smoke.checkpoint_interval,
        settings.TOTAL_STEPS.name: smoke.total_steps,
        settings.SEED.name: smoke.seed,
        settings.MODEL_MB.name: smoke.model_mb,
        settings.GRACE_SECONDS.name: smoke.grace_period_seconds,
    }
    if smoke.step_milliseconds:
        values[settings.STEP_SECONDS.name] = smoke.step_milliseconds / 1000
    return [{"name": name, "value": str(value)} for name, value in values.items()]


def job_spec(
    smoke: SmokeTest,
    checkpoint_url: str,
    target: TargetPlacement,
    identity: WorkloadIdentity,
    metrics_port: int | None = None,
) -> dict[str, Any]:
    """The Job's ``spec`` in Kubernetes spelling: a training Job of the smoke trainer."""
    trainer = Trainer(
        image=smoke.image,
        command=tuple(TRAINER_COMMAND),
        cpu=smoke.cpu,
        memory=smoke.memory,
        gpus=smoke.gpus,
        state_mib=smoke.model_mb,
        step_seconds=smoke.step_milliseconds / 1000 or None,
        metrics_port=metrics_port,
    )
    return training.job_spec(
        trainer,
        trainer_env(smoke, f"{checkpoint_url}/{run_prefix(smoke)}", identity.environment),
        placement=replace(target, target=smoke.target),
        identity=identity,
        grace_period_seconds=smoke.grace_period_seconds,
        backoff_limit=smoke.backoff_limit,
        labels=pod_labels(),
    )


class SmokeTestJob(pulumi.ComponentResource):
    """The smoke Job, run as the cluster's trainer service account, and the disruption
    budget that keeps voluntary evictions away from it (left out where the cloud's reclaim
    drain would honour it: ``TargetPlacement.reclaim_honours_budgets``)."""

    job_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: SmokeTestJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spotproof:kube:SmokeTestJob", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.smoke.target is PoolClass.SYSTEM:
            raise ValueError("the smoke test never runs on the system pool")

        identity = args.identity
        namespace = identity.service_account.namespace
        job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={
                "name": JOB_NAME,
                "namespace": namespace,
                "labels": {
                    **MANAGED_BY,
                    **pod_labels(),
                    **queue_labels(args.placement),
                },
                "annotations": training.NOT_AWAITED,
            },
            spec=pulumi.Output.from_input(args.checkpoint_url).apply(
                lambda url: job_spec(args.smoke, url, args.placement, identity, args.metrics_port)
            ),
            # A Job's pod template is immutable: change means a new Job.
            opts=pulumi.ResourceOptions(
                parent=self,
                replace_on_changes=["spec"],
                delete_before_replace=True,
                depends_on=list(identity.granted_by),
            ),
        )
        if not args.placement.reclaim_honours_budgets:
            training.disruption_budget(f"{name}-pdb", JOB_NAME, namespace, pod_labels(), child)
        self.job_name = job.metadata.apply(lambda m: m["name"])
        self.register_outputs({"job_name": self.job_name})
