"""The Kubernetes Job controller: what it does with a failed pod, per index.

Read from kubernetes/kubernetes (the repository is too large to mirror here, so each file
was read through the public code index, at the commit named): the ``batch/v1`` API types
(``staging/src/k8s.io/api/batch/v1/types.go``, commit 025f2834) and the controller
(``pkg/controller/job/``). Nothing here imports Pulumi or a cloud SDK.
"""

from __future__ import annotations

IGNORE = "Ignore"
"""``PodFailurePolicyActionIgnore``: "the counter towards .backoffLimit, represented by the
job's .status.failed field, is not incremented and a replacement pod is created"
(``types.go``, ``PodFailurePolicyAction``; the same words on ``PodFailurePolicyRule.Action``).
The controller returns "do not count" for it (``matchPodFailurePolicy`` in
``pkg/controller/job/pod_failure_policy.go``: ``case batch.PodFailurePolicyActionIgnore:
return nil, false, &ignore``), so the Job neither fails nor spends ``backoffLimit``."""
FAIL_JOB = "FailJob"
"""``PodFailurePolicyActionFailJob``: "mark the pod's job as Failed and terminate all running
pods", with reason ``PodFailurePolicy`` (``types.go``)."""

REPLACED_PER_INDEX = True
"""In an ``Indexed`` Job each completion index has its own pod, and the Job is complete when
"there is one successfully completed Pod for each index" (``types.go``, ``CompletionMode``):
an index whose pod failed and was not counted has no active and no succeeded pod, so the
controller creates a pod for that index again (``firstPendingIndexes``,
``pkg/controller/job/indexed_job_utils.go``), with the same hostname
``$(job-name)-$(index)`` (``types.go``, ``completionMode``). The other indexes' pods are
left alone."""

REPLACEMENT_WAITS_FOR_FAILED = True
"""``podReplacementPolicy``: "Failed means to wait until a previously created Pod is fully
terminated (has phase Failed or Succeeded) before creating a replacement Pod. When using
podFailurePolicy, Failed is the only allowed value" (``types.go``, ``JobSpec``); the
controller replaces only failed pods whenever a ``podFailurePolicy`` is set
(``onlyReplaceFailedPods`` in ``pkg/controller/job/job_controller.go``: ``return
job.Spec.PodFailurePolicy != nil``). So a reclaimed rank's replacement never runs beside the
pod it replaces: the old one has finished its final save before the new one starts."""

RESTART_POLICY_WITH_FAILURE_POLICY = "Never"
""""only "Never" is supported when podFailurePolicy is specified"
(``pkg/apis/batch/validation/validation.go``, ``validateJobSpec``)."""
