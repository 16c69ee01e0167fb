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


# The labels every pod of a Job carries, which a selector (a NetworkPolicy's, a budget's)
# may select it by.

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
GENERATED_LABELS = True
"""Unless ``spec.manualSelector`` is true, the API server adds to a Job's pod template
:data:`LEGACY_JOB_NAME_LABEL` and :data:`JOB_NAME_LABEL` (the Job's name), and
:data:`LEGACY_CONTROLLER_UID_LABEL` and :data:`CONTROLLER_UID_LABEL` (its uid, picked at
creation, so unknown before), the legacy ones still, beside the prefixed ones of 1.27 on
(``generateSelector`` in ``pkg/registry/batch/job/strategy.go``; a template that sets one to
another value is refused, ``validateGeneratedSelector`` in
``pkg/apis/batch/validation/validation.go``;
https://kubernetes.io/docs/reference/labels-annotations-taints/#batchkubernetesiojob-name).
A JobSet's child Jobs are Jobs: their pods carry them too."""
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""On each pod of an ``Indexed`` Job, its completion index, 0 to ``completions`` - 1: one
value per pod (``addCompletionIndexLabel`` in ``pkg/controller/job/job_controller.go``,
under the ``PodIndexLabel`` gate, beta and on by default from 1.28, GA in 1.32;
https://kubernetes.io/docs/reference/labels-annotations-taints/#batchkubernetesiojob-completion-index)."""
INDEXED = "Indexed"
NON_INDEXED = "NonIndexed"
"""``completionMode``'s default (``types.go``)."""
