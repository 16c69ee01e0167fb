"""Kueue (kubernetes-sigs/kueue): admission of batch work, and GKE's queued provisioning.

Facts from the v0.19.2 tag (commit 8eab6877) of https://github.com/kubernetes-sigs/kueue,
each with the file it comes from. Nothing here imports Pulumi or a cloud SDK.
"""

from __future__ import annotations

from spotproof.catalog.versions import Introduced

CHART = "oci://registry.k8s.io/kueue/charts/kueue"
"""``charts/kueue/README.md``: ``helm install kueue oci://registry.k8s.io/kueue/charts/kueue
--version="0.19.2" --namespace=kueue-system``."""
NAMESPACE = "kueue-system"


def _patches(minor: int, last: int) -> tuple[str, ...]:
    return tuple(f"0.{minor}.{patch}" for patch in range(last + 1))


VERSIONS: tuple[str, ...] = (
    *_patches(15, 8),
    *_patches(16, 9),
    *_patches(17, 8),
    *_patches(18, 6),
    *_patches(19, 2),
)
"""Chart versions (the release tags without their ``v``: ``hack/helm-chart-package.sh``)
from 0.15.0, the first that serves :data:`API_VERSION`, to 0.19.2. The ProvisioningRequest
admission check is GA and always on from 0.14
(``site/content/en/docs/concepts/admission_check/provisioning_request.md``). The patch
numbers of each minor line run without gaps in the repository's tags."""

REFUSED: dict[str, str] = {
    version: (
        "serves kueue.x-k8s.io/v1beta1 only, and spotproof's queue objects are v1beta2, "
        "first served in 0.15.0: every one of them would be refused"
    )
    for version in _patches(14, 8)
}
"""Published charts without v1beta2 (each tag's ``config/components/crd/bases/``)."""

API_VERSION = "kueue.x-k8s.io/v1beta2"
"""Served from 0.15.0 and the storage version from 0.16.0 (``config/components/crd/bases/``);
v1beta1 is still served but deprecated. In v1beta2 a ClusterQueue names its checks only
under ``admissionChecksStrategy.admissionChecks`` (``apis/kueue/v1beta2/clusterqueue_types.go``)."""

INTRODUCED: tuple[Introduced, ...] = (
    Introduced("ClusterQueue", "spec.concurrentAdmissionPolicy", "0.18.0"),
)
"""What v1beta2 accepts only from some release of :data:`VERSIONS` on: every other field
the plan checks is there from 0.15.0 to 0.19.2 (``catalog.versions``)."""

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
"""On a Job or JobSet: the LocalQueue it is submitted to (``QueueLabel``,
``pkg/controller/constants/constants.go``). Kueue's webhook suspends such an object at
creation and unsuspends it once admitted (``ApplyDefaultForSuspend``,
``pkg/controller/jobframework/defaults.go``), so it is not created suspended by hand."""

PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
"""``AdmissionCheck.spec.controllerName`` of the ProvisioningRequest admission check."""

PROVISIONING_REQUEST_PARAMETER_PREFIX = "provreq.kueue.x-k8s.io/"
"""Annotations of a Job with this prefix become ``spec.parameters`` of its
ProvisioningRequest, the prefix stripped (``pkg/controller/admissionchecks/provisioning``)."""

GKE_QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
"""``ProvisioningRequestConfig.spec.provisioningClassName`` for GKE's queued provisioning
(DWS flex-start): https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest."""

INTEGRATIONS = ("batch/job", "jobset.x-k8s.io/jobset")
"""Both enabled in the chart's default ``managerConfig.controllerManagerConfigYaml``
(``charts/kueue/values.yaml``)."""

UNDECLARED_RESOURCES_BLOCK = True
"""A workload asking for a resource its ClusterQueue does not list in ``coveredResources``
cannot be admitted (default ``quotaCheckStrategy`` BlockUndeclared,
``pkg/scheduler/flavorassigner/flavorassigner.go``): every resource the queued pods
request is covered."""

KINDS = frozenset(
    {"ResourceFlavor", "ClusterQueue", "LocalQueue", "AdmissionCheck", "ProvisioningRequestConfig"}
)
"""The kinds of ``kueue.x-k8s.io`` a queued-provisioning setup is made of
(``site/static/examples/provisioning/provisioning-setup.yaml``). All but LocalQueue are
cluster-scoped."""

NULL_NAMESPACE_SELECTOR_MATCHES_NOTHING = True
"""A ClusterQueue without ``namespaceSelector`` admits from no namespace; ``{}`` admits from
all (``apis/kueue/v1beta2/clusterqueue_types.go``: "Defaults to null which is a nothing
selector")."""

GKE_PROVISIONED_NODE_LABEL = "autoscaling.gke.io/provisioning-request"
GKE_RESIZE_REQUEST_DETAIL = "ResizeRequestName"
"""``ProvisioningRequestConfig.spec.podSetUpdates.nodeSelector``: pin an admitted workload
to the nodes provisioned for its own request, by the label GKE puts on them and the
request's ``status.provisioningClassDetails`` entry, so another pod cannot take them
(GKE's workload isolation for queued provisioning, as a Kueue maintainer gives it:
https://github.com/kubernetes-sigs/kueue/issues/9048)."""
