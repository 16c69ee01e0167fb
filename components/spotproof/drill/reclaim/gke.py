"""Compute Engine: a drill reclaims a GKE node's Spot VM with ``simulateMaintenanceEvent``.

Compute Engine documents ``instances.simulateMaintenanceEvent`` as the way to test how
workloads handle the preemption of Spot VMs ("Simulate a host maintenance event",
https://cloud.google.com/compute/docs/instances/simulating-host-maintenance): on a Spot or
preemptible VM the simulated event preempts it, with the same ACPI shutdown notice a real
preemption gives, so GKE's graceful node shutdown sees what it sees in production. The same
page limits the calls per project and region (the ``SimulateMaintenanceEventRequests
PerMinutePerProjectPerRegion`` API rate limit), so a rate-limit answer is told apart from a
missing permission.

What the drill may touch is what the stack's grant allows (``Grant``): a role on one
project whose IAM condition admits only instances named ``instance_prefix*``; the drill
checks the same before it asks, so a refusal names the rule rather than a 403.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillError, DrillRefused, GrantMissing, StageTimedOut
from spotproof.drill.instances import Instance
from spotproof.drill.reclaim import CloudDrill, Reclaimed

if TYPE_CHECKING:
    from google.api_core.exceptions import GoogleAPICallError
    from google.api_core.extended_operation import ExtendedOperation
    from google.cloud.compute_v1 import InstancesClient

PROVIDER_ID_FORM = "gce://PROJECT/ZONE/INSTANCE"
"""What GKE's node controller writes: ``gce://${project}/${zone}/${instance}``
(kubernetes/cloud-provider-gcp ``providers/gce/gce_util.go`` ``providerIDRE`` and
``splitProviderID``, tag v36.3.8)."""

_PROVIDER_ID = re.compile(r"^gce://([^/]+)/([^/]+)/([^/]+)$")

CLUSTER_LABEL = "goog-k8s-cluster-name"
"""The label GKE puts on the Compute Engine resources of a cluster, its VMs included, with
the cluster's name: Cloud Billing lists it among the GKE label keys ("Filter GKE resources
by cluster", https://cloud.google.com/billing/docs/how-to/reports, "Label keys for Google
Kubernetes Engine"; also https://cloud.google.com/kubernetes-engine/docs/how-to/
creating-managing-labels)."""

GET = "compute.instances.get"
SIMULATE = "compute.instances.simulateMaintenanceEvent"
POLL = "compute.zoneOperations.get"
"""The IAM permissions each call needs, for the message when one is missing
(https://cloud.google.com/compute/docs/reference/rest/v1/instances/simulateMaintenanceEvent,
https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get)."""

RATE_LIMITED = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED"})
"""Reasons Compute Engine gives a rate-limited call. A project over a rate quota gets "a 403
error with the reason rateLimitExceeded" (https://cloud.google.com/compute/docs/api-rate-limits),
so a 403 alone is not a missing permission."""

REQUEST_SECONDS = 60.0
"""Bound on each HTTP call: a drill that hangs on the cloud tells nobody anything."""
ACCEPT_SECONDS = 30.0
"""How long the reclaim waits for the operation to leave PENDING. Only that long: a Spot
VM's notice is 30 s, and the drill must be watching the node by then."""
POLL_SECONDS = 1.0

_T = TypeVar("_T")


def instance(provider_id: str) -> Instance | None:
    """The Compute Engine instance behind a GKE node's provider id; None for another cloud's."""
    found = _PROVIDER_ID.match(provider_id)
    if not found:
        return None
    project, zone, name = found.groups()
    return Instance(Cloud.GKE, provider_id, name=name, zone=zone, project=project)


@dataclass(frozen=True)
class Grant:
    """The stack output ``drill`` on GKE: the custom role that may simulate maintenance,
    granted on ``project`` under a condition admitting instances named
    ``instance_prefix*`` (the cluster's node VMs) and nothing else."""

    project: str
    role: str
    instance_prefix: str


def _first_line(text: object) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def _reason(error: GoogleAPICallError) -> str:
    """The API's own error reason (``forbidden``, ``rateLimitExceeded``), kept in messages."""
    for item in error.errors or ():
        if isinstance(item, dict) and item.get("reason"):
            return str(item["reason"])
    return str(error.reason or "")


class GceReclaimer:
    """Reclaims this cluster's Spot VMs through Compute Engine, within the stack's grant."""

    def __init__(
        self,
        grant: Grant,
        cluster: str,
        client: InstancesClient,
        *,
        accept_seconds: float = ACCEPT_SECONDS,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.grant = grant
        self.cluster = cluster
        self.client = client
        self.accept_seconds = accept_seconds
        self.poll_seconds = poll_seconds

    def verify(self, instance: Instance) -> str:
        self._within_grant(instance)
        found = self._call(
            GET,
            instance,
            lambda: self.client.get(
                project=instance.project,
                zone=instance.zone,
                instance=instance.name,
                timeout=REQUEST_SECONDS,
            ),
        )
        scheduling = found.scheduling
        model = scheduling.provisioning_model or "STANDARD"
        if model != "SPOT" and not scheduling.preemptible:
            raise DrillRefused(
                f"{instance} is a {model} VM; a drill reclaims only Spot or preemptible VMs"
            )
        owner = found.labels.get(CLUSTER_LABEL)
        if owner != self.cluster:
            raise DrillRefused(
                f"{instance} is labelled {CLUSTER_LABEL}={owner or '(none)'}, not "
                f"{self.cluster}; a drill reclaims only this cluster's nodes"
            )
        if found.status != "RUNNING":
            # A maintenance event on a VM that is not running preempts nothing.
            raise DrillRefused(f"{instance} is {found.status}; a drill reclaims a RUNNING VM")
        action = scheduling.instance_termination_action
        kind = "SPOT" if model == "SPOT" else "preemptible"
        return f"{kind}, on preemption {action}" if action else kind

    def reclaim(self, instance: Instance) -> Reclaimed:
        self._within_grant(instance)
        operation = self._call(
            SIMULATE,
            instance,
            lambda: self.client.simulate_maintenance_event(
                project=instance.project,
                zone=instance.zone,
                instance=instance.name,
                timeout=REQUEST_SECONDS,
            ),
        )
        # The zonal operation exists: Compute Engine has taken the request. That, not the
        # end of the wait below, is the drill's notice time.
        requested_at = time.time()
        self._await_accepted(operation, instance)
        return Reclaimed(
            instance=instance,
            requested_at=requested_at,
            reference=operation.name,
            how=f"simulateMaintenanceEvent ({operation.name})",
        )

    def check(self) -> None:
        """Nothing to follow: ``reclaim`` followed the zonal operation until Compute Engine
        took the event."""

    def undo(self) -> None:
        """Nothing to undo: the request leaves nothing behind but the preemption itself."""

    def _within_grant(self, instance: Instance) -> None:
        """The grant's own bounds, checked here so a refusal names them."""
        if instance.cloud is not Cloud.GKE:
            raise DrillRefused(f"{instance} is not a Compute Engine instance; allowed: GKE nodes")
        if instance.project != self.grant.project:
            raise DrillRefused(
                f"{instance} is in project {instance.project}; the drill's grant covers "
                f"project {self.grant.project} only"
            )
        if not instance.name.startswith(self.grant.instance_prefix):
            raise DrillRefused(
                f"{instance} is not named {self.grant.instance_prefix}*, the only instances "
                f"the drill's role {self.grant.role} may reclaim"
            )

    def _await_accepted(self, operation: ExtendedOperation, instance: Instance) -> None:
        """Waits, bounded, until the operation is RUNNING or DONE; raises its error if it
        ended with one (a VM that cannot be preempted now, a quota)."""
        from google.cloud.compute_v1 import Operation  # noqa: PLC0415

        deadline = time.monotonic() + self.accept_seconds
        while operation.status == Operation.Status.PENDING:
            if time.monotonic() >= deadline:
                raise StageTimedOut(
                    f"reclaim: Compute Engine left operation {operation.name} on {instance} "
                    f"PENDING for {self.accept_seconds:.0f} s; it may still preempt the VM "
                    f"(gcloud compute operations describe {operation.name} "
                    f"--zone {instance.zone} --project {instance.project})"
                )
            time.sleep(self.poll_seconds)
            self._call(POLL, instance, operation.done)
        if operation.status != Operation.Status.DONE:
            return
        errors = list(operation.error.errors) if operation.error else []
        if not errors and not operation.error_code:
            return
        code = errors[0].code if errors else str(operation.error_code)
        message = errors[0].message if errors else operation.error_message
        line = f"operation {operation.name} failed: {code}: {_first_line(message)}"
        if code in RATE_LIMITED:
            raise self._rate_limited(instance, line)
        if operation.error_code == 403:
            raise self._denied(SIMULATE, instance, line)
        raise DrillError(f"Compute Engine refused {SIMULATE} on {instance} ({line})")

    def _call(self, permission: str, instance: Instance, call: Callable[[], _T]) -> _T:
        """``call()``, its failures turned into the one line a user can act on."""
        from google.api_core import exceptions  # noqa: PLC0415
        from google.auth import exceptions as auth  # noqa: PLC0415

        try:
            return call()
        except exceptions.GoogleAPICallError as error:
            raise self._translate(error, permission, instance) from error
        except auth.GoogleAuthError as error:
            raise DrillError(
                f"Compute Engine: no usable Google credentials ({_first_line(error)}); run "
                f"gcloud auth application-default login, then drill again"
            ) from error
        except (exceptions.RetryError, OSError) as error:
            # OSError: the requests library's connection errors derive from it.
            raise DrillError(
                f"Compute Engine did not answer {permission} on {instance}: "
                f"{type(error).__name__}: {_first_line(error)}"
            ) from error

    def _translate(
        self, error: GoogleAPICallError, permission: str, instance: Instance
    ) -> DrillError:
        reason = _reason(error)
        line = f"{error.code} {reason}".strip() + f": {_first_line(error.message)}"
        if error.code == 429 or reason in RATE_LIMITED:
            return self._rate_limited(instance, line)
        if error.code == 403:
            return self._denied(permission, instance, line)
        if error.code == 404:
            return DrillRefused(f"{instance}: no such Compute Engine instance ({line})")
        return DrillError(f"Compute Engine refused {permission} on {instance} ({line})")

    def _denied(self, permission: str, instance: Instance, line: str) -> GrantMissing:
        return GrantMissing(
            f"Compute Engine denied {permission} on {instance} ({line}); the stack's drill "
            f"role {self.grant.role} grants it on instances named "
            f"{self.grant.instance_prefix}* in project {self.grant.project}: run the drill "
            f"as a principal holding that role"
        )

    def _rate_limited(self, instance: Instance, line: str) -> DrillError:
        return DrillError(
            f"Compute Engine rate-limited {SIMULATE} on {instance} ({line}); the calls per "
            f"project and region are limited: wait a minute, then drill again"
        )


def reclaimer(grant: Grant, cluster: str, *, client: InstancesClient | None = None) -> GceReclaimer:
    """A reclaimer with application default credentials, or with ``client`` (an
    ``InstancesClient``, as tests pass one with a stubbed transport)."""
    if client is None:
        from google.auth import exceptions as auth  # noqa: PLC0415
        from google.cloud import compute_v1  # noqa: PLC0415

        try:
            client = compute_v1.InstancesClient()
        except auth.GoogleAuthError as error:
            raise DrillError(
                f"Compute Engine: no usable Google credentials ({_first_line(error)}); run "
                f"gcloud auth application-default login, then drill again"
            ) from error
    return GceReclaimer(grant, cluster, client)


DRILL = CloudDrill(
    provider_id_form=PROVIDER_ID_FORM, instance=instance, grant=Grant, reclaimer=reclaimer
)
