"""The requests ``spotproof status`` makes, each one bounded and each failure one line.

Everything is read as the API's JSON (``_preload_content=False``), as the drill reads it
(``drill.kube_api``): lists across namespaces of what spotproof manages, the nodes, and the
pods of each workload by the labels its controller puts on them. A resource type the
cluster does not serve (no JobSet or Kueue CRD installed: 404) lists as empty; any other
refusal (401, 403) or an API server out of reach stops the command (``StatusError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from spotproof.drill.errors import DrillError
from spotproof.drill.kube_api import REQUEST_SECONDS, json_answer, server_time
from spotproof.drill.target import JOBSET_API
from spotproof.kube.baseline import MANAGED_BY
from spotproof.runtime.messages import first_line
from spotproof.status.queueing import JOB_UID_LABEL, WORKLOAD_API

MANAGED = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
"""The label selector of what a spotproof stack renders (``kube.baseline.MANAGED_BY`` on
every Job, JobSet and Deployment)."""


class StatusError(Exception):
    """The cluster could not be read; ``str()`` is the one line to print (exit 2)."""


def _read(what: str, call: Callable[..., Any], *, optional: bool = False) -> Any:
    try:
        response = call(_preload_content=False, _request_timeout=REQUEST_SECONDS)
        found = json_answer(what, response)  # within its size, depth and time
    except ApiException as error:
        if optional and error.status == 404:
            return None
        raise StatusError(f"{what}: {error.status} {error.reason}") from None
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise StatusError(f"{what}: {first_line(error)}") from None
    except DrillError as error:  # not JSON, too large or too slow: a proxy's page, say
        raise StatusError(str(error)) from None
    if not isinstance(found, dict):
        raise StatusError(
            f"{what}: the answer is not a Kubernetes API object (JSON); is the kubeconfig's "
            "server the cluster's API server?"
        )
    return found


def server_now(api: client.ApiClient) -> float:
    """The API server's time, which the pods' stamps are on (``drill.kube_api``)."""
    try:
        return server_time(api)
    except DrillError as error:
        raise StatusError(str(error)) from None


def managed(api: client.ApiClient, kind: str) -> list[dict[str, Any]]:
    """Every ``Job``, ``JobSet`` or ``Deployment`` a spotproof stack rendered, in any
    namespace."""
    if kind == "Job":
        call = client.BatchV1Api(api).list_job_for_all_namespaces
    elif kind == "Deployment":
        call = client.AppsV1Api(api).list_deployment_for_all_namespaces
    else:
        group, version, plural = JOBSET_API
        custom = client.CustomObjectsApi(api)
        found = _read(
            f"listing {plural}",
            lambda **kw: custom.list_cluster_custom_object(
                group, version, plural, label_selector=MANAGED, **kw
            ),
            optional=True,
        )
        return (found or {}).get("items") or []
    found = _read(f"listing {kind}s", lambda **kw: call(label_selector=MANAGED, **kw))
    return found.get("items") or []


def nodes(api: client.ApiClient) -> dict[str, dict[str, Any]]:
    found = _read("listing nodes", client.CoreV1Api(api).list_node)
    return {n["metadata"]["name"]: n for n in found.get("items") or []}


def pods(api: client.ApiClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api)
    found = _read(
        f"listing pods in {namespace} ({selector})",
        lambda **kw: core.list_namespaced_pod(namespace, label_selector=selector, **kw),
    )
    return found.get("items") or []


def kueue_workloads(api: client.ApiClient, namespace: str, uid: str) -> list[dict[str, Any]]:
    """The Kueue Workloads of the Job or JobSet with ``uid``; none without Kueue."""
    group, version, plural = WORKLOAD_API
    custom = client.CustomObjectsApi(api)
    found = _read(
        f"listing {plural} in {namespace}",
        lambda **kw: custom.list_namespaced_custom_object(
            group, version, namespace, plural, label_selector=f"{JOB_UID_LABEL}={uid}", **kw
        ),
        optional=True,
    )
    return (found or {}).get("items") or []
