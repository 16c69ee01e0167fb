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
