"""JobSet (kubernetes-sigs/jobset): the controller that runs a gang of Jobs as one unit.

Facts from the v0.12.0 tag (commit f22e565a) of https://github.com/kubernetes-sigs/jobset,
each with the file it comes from. Nothing here imports Pulumi or a cloud SDK.
"""

from __future__ import annotations

import re

from spotproof.catalog.versions import Introduced

CHART = "oci://registry.k8s.io/jobset/charts/jobset"
"""``charts/jobset/README.md``: ``helm install ... oci://registry.k8s.io/jobset/charts/jobset
--version 0.12.0``; there is no ``latest`` tag, so a version is always given."""
NAMESPACE = "jobset-system"
"""The namespace the installation guide installs into
(``site/content/en/docs/installation/_index.md``)."""

VERSIONS: tuple[str, ...] = (
    "0.10.1",
    "0.11.0",
    "0.11.1",
    "0.12.0",
)
"""Chart versions: the release tags without their ``v`` (``hack/helm-chart-package.sh``
packages ``--version "${GIT_TAG/#v/}"``), from the first whose chart's CRD has
``failurePolicy.rules[].onJobFailureMessagePatterns`` (:data:`REFUSED`)."""

REFUSED: dict[str, str] = {
    version: (
        "its CRD has no failurePolicy.rules[].onJobFailureMessagePatterns (the CRD gains it "
        "in 0.10.0, the chart in 0.10.1): the API server prunes it, and the rule meant for a "
        "configuration error then fails the whole gang on every reclaim"
    )
    for version in ("0.9.0", "0.9.1", "0.10.0")
}
"""Published charts spotproof's gangs cannot run on (each tag's
``config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml`` and
``charts/jobset/crds/``; the 0.10.0 chart's CRD was stale, fixed by #1048 in 0.10.1)."""

INTRODUCED: tuple[Introduced, ...] = (
    Introduced("JobSet", "spec.failurePolicy.restartStrategy", "0.11.0", "InPlaceRestart"),
    Introduced("JobSet", "spec.failurePolicy.rules[].action", "0.12.0", "RestartJob"),
    Introduced(
        "JobSet", "spec.failurePolicy.rules[].action", "0.12.0", "RestartJobAndIgnoreMaxRestarts"
    ),
)
"""What the CRD accepts only from some release of :data:`VERSIONS` on (``catalog.versions``)."""

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""On every child Job and pod (``labelAndAnnotateObject`` in
``pkg/controllers/jobset_controller.go``), and the selector of the headless Service: the
label that selects all pods of one JobSet across restarts (``restart-attempt`` changes on
every restart)."""

# The other labels the controller puts on every child Job and its pod template, so on every
# pod (``labelAndAnnotateObject``, ``pkg/controllers/jobset_controller.go``: the template's
# own labels first, then these over them; keys in ``api/jobset/v1alpha2/jobset_types.go``,
# ``pkg/constants/constants.go``). A selector on any of them selects pods on a cluster, so
# the rules that judge who reaches whom must see them (``scheduling.pod_templates``).

REPLICATED_JOB_NAME_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
"""``ReplicatedJobNameKey``: the replicated Job's ``name``, the same on all its pods."""
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
"""``ReplicatedJobReplicas``: the replicated Job's ``replicas``."""
GLOBAL_REPLICAS_LABEL = "jobset.sigs.k8s.io/global-replicas"
"""``GlobalReplicasKey``: the sum of every replicated Job's ``replicas`` (``globalReplicas``)."""
GROUP_NAME_LABEL = "jobset.sigs.k8s.io/group-name"
"""``GroupNameKey``: the replicated Job's ``groupName``, :data:`DEFAULT_GROUP` when unset."""
GROUP_REPLICAS_LABEL = "jobset.sigs.k8s.io/group-replicas"
"""``GroupReplicasKey``: the sum of ``replicas`` over the replicated Jobs of that group
(``groupReplicas``)."""
DEFAULT_GROUP = "default"
"""``groupName``'s default (``+kubebuilder:default=default``, ``jobset_types.go``)."""
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
"""``JobIndexKey``: the child Job's index in its replicated Job, 0 to ``replicas`` - 1:
one value per child Job, so a selector on it selects the pods of some of them."""
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
"""``JobGlobalIndexKey``: the child Job's index across the JobSet (the ``replicas`` of the
replicated Jobs before it, plus its own index; ``globalJobIndex``)."""
JOB_GROUP_INDEX_LABEL = "jobset.sigs.k8s.io/job-group-index"
"""``JobGroupIndexKey``: the same within its group (``groupJobIndex``)."""
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"
"""``JobKey``: the SHA-1 hex digest of ``<namespace>/<child Job name>`` (``jobHashKey``)."""
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
"""``JobSetUIDKey``: the JobSet's uid, which the API server picks at creation."""
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
"""``RestartsKey``: ``status.restarts`` when the child Job was made, so it changes with every
restart."""
COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
"""``CoordinatorKey``: only with ``spec.coordinator``, the coordinator pod's address
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`` (``CoordinatorEndpoint``;
the subdomain is ``spec.network.subdomain``, else the JobSet's name: ``GetSubdomain``)."""
PER_JOB_LABELS = (JOB_INDEX_LABEL, JOB_GLOBAL_INDEX_LABEL, JOB_GROUP_INDEX_LABEL, JOB_KEY_LABEL)
"""The labels whose value differs from one child Job of a replicated Job to the next."""
UNKNOWN_LABELS = (JOBSET_UID_LABEL, RESTART_ATTEMPT_LABEL)
"""The labels on every pod whose value cannot be known before the JobSet runs."""
DEFAULT_COMPLETION_MODE = "Indexed"
"""The webhook makes every replicated Job without a ``completionMode`` ``Indexed``
(``Default``, ``pkg/webhooks/jobset_webhook.go``), so its pods also carry the Job
controller's completion index (``catalog.kubernetes_job.COMPLETION_INDEX_LABEL``)."""
# Two labels are left out, as not on every pod: ``jobset.sigs.k8s.io/job-restart-attempt``,
# set only under the alpha ``RestartJob`` gate (off by default), and
# ``jobset.sigs.k8s.io/priority``, which the pod webhook sets to the pod's priority, except
# under the node-selector exclusive placement (``pkg/webhooks/pod_webhook.go``).

FAILURE_REASONS = frozenset(
    {
        "BackoffLimitExceeded",
        "DeadlineExceeded",
        "FailedIndexes",
        "MaxFailedIndexesExceeded",
        "PodFailurePolicy",
    }
)
"""The only ``failurePolicy.rules[].onJobFailureReasons`` the webhook accepts
(``validOnJobFailureReasons``, ``pkg/webhooks/jobset_webhook.go``)."""

ACTIONS = frozenset({"FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"})
"""Rule actions usable without an alpha feature gate (``api/jobset/v1alpha2/jobset_types.go``;
``RestartJob`` and ``RestartJobAndIgnoreMaxRestarts`` need the ``RestartJob`` gate, off by
default in ``pkg/features/features.go``)."""

RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
"""``failurePolicy.rules[].name``: 1 to 128 characters of this pattern, unique within the
JobSet (``pkg/webhooks/jobset_webhook.go``)."""
RULE_NAME_MAX = 128

MAX_NAME_LENGTH = 63
"""Child Jobs are named ``<jobset>-<replicatedJob>-<index>`` (``GenJobName``,
``pkg/util/placement/placement.go``); the webhook refuses a JobSet whose longest such name
is not a DNS-1035 label of at most 63 characters, and with Indexed Jobs whose
``<job>-<podIndex>-abcde`` pod names are longer than that."""

FIRST_MATCHING_RULE_WINS = True
"""How the controller picks the action (``findFirstFailedPolicyRuleAndJob``,
``pkg/controllers/failure_policy.go``): it walks the rules in order and takes the first
one that matches *any* child Job failed at that moment; with no match, ``RestartJobSet``
(counted against ``maxRestarts``). So a gang member that fails on its own while a
reclaimed member's Job has not failed yet can decide the action: ranks stopped by a peer
wait to be torn down instead of failing first (``spotproof.runtime.checkpointer.gang``)."""


def pod_hostname(jobset: str, replicated_job: str, job_index: int, pod_index: int) -> str:
    """The DNS label of a pod in an Indexed child Job; with ``network.enableDNSHostnames``
    (the webhook's default) it resolves as ``<label>.<subdomain>`` through the headless
    Service the controller creates, named after the subdomain, which defaults to the
    JobSet's name (``api/jobset/v1alpha2/jobset_types.go``, ``createHeadlessSvcIfNecessary``)."""
    return f"{jobset}-{replicated_job}-{job_index}-{pod_index}"


# How a JobSet restarts, and what that leaves of its pods' memory
# (``plan.simulation.memory_tiers``).

RECREATE = "Recreate"
"""``spec.failurePolicy.restartStrategy``'s default (``+kubebuilder:default=Recreate``,
``api/jobset/v1alpha2/jobset_types.go``). A restart marks every child Job of an older
``restart-attempt`` as previous and deletes it with foreground propagation
(``deleteJobs``, ``pkg/controllers/jobset_controller.go``), so every pod goes, and with it
every ``emptyDir`` ("When a Pod is removed from a node for any reason, the data in the
``emptyDir`` is deleted permanently", https://kubernetes.io/docs/concepts/storage/volumes/#emptydir).
``BlockingRecreate`` does the same, creating no new Job until the old ones are gone."""
IN_PLACE_RESTART = "InPlaceRestart"
"""The one strategy that keeps pods: "When no Job has failed, restart the JobSet by
restarting healthy Pods in-place and recreating failed Pods. When a Job has failed, fall
back to action "Recreate"" (``jobset_types.go``; KEP-467, ``keps/467-InPlaceRestart/``). A
surviving pod stays on its node with its ``emptyDir`` (a container crash "does *not* remove
a Pod from a node", the page above), while the pod of a node that is gone is replaced by
the Job controller (``backoffLimit`` 2147483647, ``podReplacementPolicy: Failed``), on
another node, with an empty one."""
KEEPS_PODS = frozenset({IN_PLACE_RESTART})
"""Restart strategies under which a pod that survived the failure keeps its memory."""

IN_PLACE_RESTART_GATE = "InPlaceRestart"
"""The controller's feature gate for :data:`IN_PLACE_RESTART`: Alpha, ``Default: false``
(``pkg/features/features.go``). With it off the webhook refuses the JobSet ("InPlaceRestart
restart strategy cannot be set when InPlaceRestart feature gate is disabled",
``ValidateCreate`` in ``pkg/webhooks/jobset_webhook.go``)."""
CHART_FEATURE_GATES: frozenset[str] = frozenset()
"""Feature gates the chart's values can turn on: none. The controller reads its gates only
from its configuration file's ``featureGates`` (``SetFromMap(cfg.FeatureGates)`` in
``main.go``; there is no ``--feature-gates`` flag), and the chart writes that file from a
template with no ``featureGates`` in it and nothing in ``values.yaml`` to add one
(``charts/jobset/templates/controller/configmap.yaml``; unchanged on ``main`` when read). So
a JobSet installed from :data:`CHART` cannot use :data:`IN_PLACE_RESTART`."""
IN_PLACE_RESTART_AGENT_IMAGE: str | None = None
"""Where the in-place restart agent's image is published: nowhere. Every pod of an
:data:`IN_PLACE_RESTART` JobSet runs the agent (``cmd/in-place-restart-agent``), which
watches its JobSet and exits to have its pod restarted in place, but the release build
pushes only the controller and the chart (``cloudbuild.yaml``: ``image-push
helm-chart-push``; ``Makefile``: ``IN_PLACE_RESTART_AGENT_IMAGE_REGISTRY ?=`` empty,
left to "the beta of in-place restart" in its comment; the examples say ``image: <CHANGE ME>``)."""
IN_PLACE_RESTART_POD_NEEDS = (
    "the agent as a sidecar (an init container with restartPolicy Always and a restartPolicyRules "
    "action RestartAllContainers, Kubernetes' RestartAllContainersOnContainerExits gate: alpha "
    "from 1.35, off by default), or as the main container running the trainer as its "
    "WORKER_COMMAND (ContainerRestartRules: beta, on from 1.35), where SIGTERM stops the agent, "
    "which ends the trainer without passing the signal on, so no final save is made; "
    "a service-account token in the pod and the right to patch pods and watch JobSets"
)
"""What :data:`IN_PLACE_RESTART` asks of each pod
(``site/static/examples/in-place-restart/``: ``jobset-sidecar-container-mode.yaml``,
``jobset-main-container-mode.yaml``, ``service-account.yaml``; ``start`` and
``StartWorker`` in ``cmd/in-place-restart-agent/main.go``). The webhook also requires
``backoffLimit: 2147483647``, ``podReplacementPolicy: Failed`` and ``completions`` equal to
``parallelism`` in every replicated Job (``ValidateCreate``). The Kubernetes gates are those
of ``pkg/features/kube_features.go`` (kubernetes/kubernetes, 1.35 series) and KEP-5307 and
KEP-5532 (kubernetes/enhancements ``keps/sig-node/``)."""
IN_PLACE_RESTART_REFUSED = (
    f"{IN_PLACE_RESTART} needs the controller's alpha {IN_PLACE_RESTART_GATE} feature gate, "
    "which the JobSet chart cannot turn on, and an agent in every pod whose image JobSet does "
    "not publish"
)
"""Why spotproof renders no :data:`IN_PLACE_RESTART` JobSet, in one clause."""


# A gang whose ranks are replaced one at a time (``kube.jobset.GangRecovery.REPLACE_RANK``).

REPLICATED_JOBS_DIFFER = True
"""``spec.replicatedJobs`` is a list keyed by ``name`` (``+listType=map``, ``+listMapKey=name``
in ``api/jobset/v1alpha2/jobset_types.go``), each with a template of its own; the webhook
checks each one alone (job and pod name lengths, ``dependsOn``; ``ValidateCreate`` in
``pkg/webhooks/jobset_webhook.go``) and asks nothing of two templates alike. Every child Job
and pod carries :data:`JOBSET_NAME_LABEL`, the headless Service selects by it alone
(``createHeadlessSvcIfNecessary``, ``pkg/controllers/jobset_controller.go``: ``Selector:
{jobset.JobSetNameKey: js.Name}``, ``PublishNotReadyAddresses`` true by default), and every
child Job's pods get the JobSet's subdomain (``constructJob``: ``Subdomain =
GetSubdomain(js)``): so a pod of any replicated Job resolves as
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<jobset>`` (:func:`pod_hostname`)."""
ACTS_ON_FAILED_JOBS_ONLY = True
"""The controller runs its failure policy only when a child Job has the ``Failed``
condition (``getChildJobs`` sorts Jobs into active, successful and failed by their
finished condition; ``Reconcile`` calls ``executeFailurePolicy`` only ``if
len(ownedJobs.failed) > 0``, ``pkg/controllers/jobset_controller.go``). A pod failure its
child Job ignores (``catalog.kubernetes_job.IGNORE``) leaves the Job active, so the JobSet
does nothing and the Job controller replaces that pod alone."""
