"""Why a queued Job or JobSet has no pods yet: its Kueue ``Workload``.

Kueue suspends a Job or JobSet labelled ``kueue.x-k8s.io/queue-name`` until it is admitted
(``catalog.kueue.QUEUE_NAME_LABEL``), so a queued run has no Pending pod to explain it. Its
``Workload`` does, found by the label ``kueue.x-k8s.io/job-uid`` = the Job's uid
(kubernetes-sigs/kueue@v0.19.2 ``pkg/controller/constants/constants.go`` ``JobUIDLabel``,
set in ``pkg/controller/jobframework/reconciler.go``):

- the conditions ``QuotaReserved`` (reasons such as ``WaitingForQuota``,
  ``NoMatchingFlavor``), ``Admitted`` and ``Evicted`` (``apis/kueue/v1beta2/workload_types.go``);
- ``status.admissionChecks[]``: each check's ``state`` (Pending, Ready, Retry, Rejected) and
  ``message``. For GKE queued provisioning the ProvisioningRequest check copies the
  request's own condition message there
  (``pkg/controller/admissionchecks/provisioning/controller.go``, ``updateCheckMessage``),
  so a DWS wait is explained in the same place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotproof.catalog import kueue

WORKLOAD_API = ("kueue.x-k8s.io", "v1beta2", "workloads")
"""Served from Kueue 0.15.0, the first release spotproof installs (``catalog.kueue``)."""
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
CONDITIONS = ("QuotaReserved", "Admitted", "Evicted")


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    message: str


@dataclass(frozen=True)
class Queued:
    queue: str
    """The LocalQueue the run is submitted to."""
    suspended: bool
    conditions: tuple[Condition, ...] = ()
    checks: tuple[Check, ...] = ()


def queue_name(obj: Mapping[str, Any]) -> str | None:
    return (obj["metadata"].get("labels") or {}).get(kueue.QUEUE_NAME_LABEL)


def newest(workloads: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The Workload created last. A Job can have more than one for a while: Kueue replaces
    a Workload that no longer matches its Job and deletes the extras (``ensureOneWorkload``,
    kubernetes-sigs/kueue ``pkg/controller/jobframework/reconciler.go``), and a list
    promises no order. ``creationTimestamp`` is RFC 3339 in UTC to the second
    (``metav1.Time``), so its text sorts as its time; the name breaks a tie."""
    return max(
        workloads,
        key=lambda w: (
            str((w.get("metadata") or {}).get("creationTimestamp") or ""),
            str((w.get("metadata") or {}).get("name") or ""),
        ),
    )


def queued(obj: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]]) -> Queued | None:
    """The queue state of a Job or JobSet ``obj``; ``workloads``: its Kueue Workloads (none
    where Kueue has not made one yet). None when it is not submitted to a queue."""
    name = queue_name(obj)
    if name is None:
        return None
    suspended = bool((obj.get("spec") or {}).get("suspend"))
    status = (newest(workloads).get("status") or {}) if workloads else {}
    conditions = tuple(
        Condition(c["type"], c.get("status", ""), c.get("reason", ""), c.get("message", ""))
        for c in status.get("conditions") or []
        if c.get("type") in CONDITIONS
    )
    checks = tuple(
        Check(c.get("name", ""), c.get("state", ""), c.get("message", ""))
        for c in status.get("admissionChecks") or []
    )
    return Queued(name, suspended, conditions, checks)
