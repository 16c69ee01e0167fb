"""What a drill asks of the Kubernetes API, declared once: each kind of request it sends (the
client's method, and the verbs RBAC weighs it by), and the check, before anything is
reclaimed, that the kubeconfig's user may send every one of them.

``drill.target`` and ``drill.watch`` send their requests only through :meth:`Request.bind`
of a request declared here, and :func:`check_access` reviews the verbs of those same
requests, so the two cannot drift apart: a request that is not declared cannot be sent,
and one that is declared is reviewed. Without this, a missing permission (the pod's log,
a watch of the nodes) showed only after a node had been reclaimed.

The review is a SelfSubjectAccessReview per verb: ``POST
/apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` with ``spec.resourceAttributes``
(``namespace``, ``verb``, ``group``, ``resource``, ``subresource``; no namespace means every
namespace), answered with ``status.allowed``, and ``status.reason`` where the authorizer
gives one (https://kubernetes.io/docs/reference/kubernetes-api/authorization-resources/self-subject-access-review-v1/).
Every authenticated user may create one (the ``system:basic-user`` ClusterRole:
https://kubernetes.io/docs/reference/access-authn-authz/rbac/#discovery-roles); it is what
``kubectl auth can-i`` sends
(https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access).
``GET /version``, the drill's first request, answered already (``kube_api.server_time``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from spotproof.catalog import jobset as jobset_facts
from spotproof.drill.errors import DrillError, DrillRefused, GrantMissing
from spotproof.drill.kube_api import REQUEST_SECONDS, answer, json_answer

LIST_AND_WATCH = ("list", "watch")
"""``kube_api.stream`` lists, then watches from the list's resourceVersion."""


@dataclass(frozen=True)
class Request:
    """One kind of request a drill sends: ``method`` of the client's ``api`` class, which
    RBAC authorizes as each of ``verbs`` on ``group``/``resource``/``subresource``."""

    api: str
    method: str
    verbs: tuple[str, ...]
    resource: str
    group: str = ""
    subresource: str = ""
    namespaced: bool = True
    version: str = ""
    """A custom resource's API version: its methods take group, version and plural."""

    def bind(self, api: client.ApiClient) -> Callable[..., Any]:
        """The client's method on ``api``. A custom resource's is called as a built-in
        one is: ``(name, namespace)`` to read one, ``(namespace)`` to list."""
        method = getattr(getattr(client, self.api)(api), self.method)
        if not self.version:
            return method

        @functools.wraps(method)  # the watch reads the method's name and documentation
        def custom(*args: Any, **kwargs: Any) -> Any:
            *name, namespace = args
            return method(self.group, self.version, namespace, self.resource, *name, **kwargs)

        return custom

    def names(self, verb: str, namespace: str) -> str:
        """``watch pods in namespace ml``, as a missing permission is named."""
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        what += f".{self.group}" if self.group else ""
        return f"{verb} {what} " + (f"in namespace {namespace}" if self.namespaced else "(cluster)")


JOBSET_GROUP, JOBSET_VERSION = jobset_facts.API_VERSION.split("/")
PODS = Request("CoreV1Api", "list_namespaced_pod", LIST_AND_WATCH, "pods")
POD_LOG = Request("CoreV1Api", "read_namespaced_pod_log", ("get",), "pods", subresource="log")
NODE = Request("CoreV1Api", "read_node", ("get",), "nodes", namespaced=False)
NODES = Request("CoreV1Api", "list_node", LIST_AND_WATCH, "nodes", namespaced=False)
WORKLOAD = {
    "Job": Request("BatchV1Api", "read_namespaced_job", ("get",), "jobs", group="batch"),
    jobset_facts.KIND: Request(
        "CustomObjectsApi", "get_namespaced_custom_object", ("get",), "jobsets",
        group=JOBSET_GROUP, version=JOBSET_VERSION,
    ),
}  # fmt: skip
"""Reading the workload itself (``drill.target``: how many pods run when it is whole)."""
WORKLOADS = {
    "Job": Request("BatchV1Api", "list_namespaced_job", LIST_AND_WATCH, "jobs", group="batch"),
    jobset_facts.KIND: Request(
        "CustomObjectsApi", "list_namespaced_custom_object", LIST_AND_WATCH, "jobsets",
        group=JOBSET_GROUP, version=JOBSET_VERSION,
    ),
}  # fmt: skip
"""Watching the workload's status (``drill.watch``: its failures counted, its end)."""


def requests_of(kind: str) -> tuple[Request, ...]:
    """Every kind of request a drill of a ``kind`` workload sends."""
    if kind not in WORKLOAD:
        raise DrillRefused(f"workload kind {kind!r}; allowed: {', '.join(WORKLOAD)}")
    return (PODS, POD_LOG, NODE, NODES, WORKLOAD[kind], WORKLOADS[kind])


def read(api: client.ApiClient, request: Request, what: str, *args: str) -> dict[str, Any]:
    """One object, in the API's JSON; its failure is one line naming ``what``."""
    call = request.bind(api)
    found = json_answer(
        what,
        answer(what, lambda: call(*args, _preload_content=False, _request_timeout=REQUEST_SECONDS)),
    )
    if not isinstance(found, dict):
        raise DrillError(f"{what}: the answer is not a Kubernetes API object (JSON)")
    return found


def read_node(api: client.ApiClient, name: str) -> dict[str, Any]:
    return read(api, NODE, f"node {name}", name)


REVIEWING = (
    "checking the drill's permissions (create selfsubjectaccessreviews.authorization.k8s.io)"
)


def unpermitted(api: client.ApiClient, namespace: str, kind: str) -> list[str]:
    """Each verb of :func:`requests_of` the kubeconfig's user may not send, named (``get
    pods/log in namespace ml``), with the authorizer's reason where it gave one."""
    reviews = client.AuthorizationV1Api(api)
    missing = []
    for request in requests_of(kind):
        for verb in request.verbs:
            attributes = client.V1ResourceAttributes(
                namespace=namespace if request.namespaced else None,
                verb=verb,
                group=request.group,
                resource=request.resource,
                subresource=request.subresource or None,
            )
            review = client.V1SelfSubjectAccessReview(
                api_version="authorization.k8s.io/v1",
                kind="SelfSubjectAccessReview",
                spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes),
            )
            answered = json_answer(
                REVIEWING,
                answer(
                    REVIEWING,
                    lambda review=review: reviews.create_self_subject_access_review(
                        review, _preload_content=False, _request_timeout=REQUEST_SECONDS
                    ),
                ),
            )
            status = (answered.get("status") if isinstance(answered, dict) else None) or {}
            if not status.get("allowed"):
                reason = str(status.get("reason") or "").strip().splitlines()
                named = request.names(verb, namespace)
                missing.append(f"{named} ({reason[0]})" if reason else named)
    return missing


def check_access(api: client.ApiClient, namespace: str, kind: str) -> None:
    """GrantMissing, one line naming every permission missing, unless the kubeconfig's user
    may send each request a drill of this workload sends."""
    missing = unpermitted(api, namespace, kind)
    if missing:
        raise GrantMissing(
            f"the kubeconfig's user may not {'; '.join(missing)}; a drill sends these while "
            "the node is reclaimed, so it reclaims nothing without them; allowed: RBAC that "
            "grants each (kubectl auth can-i VERB RESOURCE [-n NAMESPACE] checks one)"
        )
