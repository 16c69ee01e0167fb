"""A training run's one-pod Job ``spec``: what ``TrainingJob`` renders for one node, and
what each replicated Job of its gang starts from (``kube.jobset``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spotproof.kube.pods import TRAINER_CONTAINER, Trainer, pod_spec
from spotproof.kube.workload import TargetPlacement, WorkloadIdentity, target_labels
from spotproof.runtime import exit_codes
from spotproof.scheduling import run_profile


def pod_failure_policy() -> dict[str, Any]:
    """Reclaims are ignored (``DisruptionTarget``, or the trainer's ``PREEMPTED`` exit after
    its final save); a ``BAD_CONFIG`` exit fails the Job at once."""

    def exits(code: int) -> dict[str, Any]:
        return {"containerName": TRAINER_CONTAINER, "operator": "In", "values": [code]}

    disrupted = [{"type": "DisruptionTarget", "status": "True"}]
    return {
        "rules": [
            {"action": "FailJob", "onExitCodes": exits(exit_codes.BAD_CONFIG)},
            {"action": "Ignore", "onPodConditions": disrupted},
            {"action": "Ignore", "onExitCodes": exits(exit_codes.PREEMPTED)},
        ]
    }


def job_spec(
    trainer: Trainer,
    env: list[dict[str, str]],
    *,
    placement: TargetPlacement,
    identity: WorkloadIdentity,
    grace_period_seconds: int,
    backoff_limit: int,
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """A one-pod training Job's ``spec`` in Kubernetes spelling; ``env`` is the whole
    environment of the container and ``labels`` those of its pod."""
    return {
        "backoffLimit": backoff_limit,
        "completions": 1,
        "parallelism": 1,
        "ttlSecondsAfterFinished": 7 * 24 * 3600,
        "podFailurePolicy": pod_failure_policy(),
        "template": {
            "metadata": {
                "labels": {**identity.pod_labels, **labels, **target_labels(placement)},
                "annotations": {
                    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                    "karpenter.sh/do-not-disrupt": "true",
                    **run_profile.annotations_of(trainer),
                },
            },
            "spec": pod_spec(
                trainer,
                env,
                placement=placement,
                identity=identity,
                grace_period_seconds=grace_period_seconds,
            ),
        },
    }
