"""Asking a cloud to reclaim one spot instance, the way the cloud offers for drills.

Each cloud's module here (``gke``, ``eks``, ``aks``) ends in its :class:`CloudDrill`,
``DRILL``: what the drill's shared stages ask of the cloud, found through
``spotproof.clouds`` (``drill.instances``, ``drill.grants``, ``drill.command``).

A reclaimer never deletes a pod or cordons a node itself: the point of a drill is that the
cloud's own reclaim reaches the cluster the way a real one does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from spotproof.drill.instances import Instance


@dataclass(frozen=True)
class Reclaimed:
    """The cloud accepted a reclaim."""

    instance: Instance
    requested_at: float
    """This machine's ``time.time()`` when the cloud accepted the request. The timeline marks
    the reclaim when the request was sent, on the API server's clock (``drill.runner``)."""
    reference: str
    """The cloud's id for the request (an operation, an experiment)."""
    how: str
    """What was asked, in words: ``simulateMaintenanceEvent (operation-123)``."""


class Reclaimer(Protocol):
    def verify(self, instance: Instance) -> str:
        """Reads the instance and returns how it is reclaimable (``SPOT``, ``Spot, evict
        Delete``); DrillRefused when it is not spot or not a node of this cluster,
        GrantMissing (naming the permission) when the caller may not read it."""
        ...

    def reclaim(self, instance: Instance) -> Reclaimed:
        """Asks the cloud to reclaim ``instance`` now; GrantMissing on a permission error,
        DrillError (one line) on any other refusal by the cloud."""
        ...

    def check(self) -> None:
        """Follows what the cloud does with the reclaims it accepted, while the drill
        watches the cluster (``drill.runner`` calls it every few seconds): removes setup the
        cloud is done with, and raises DrillError (one line, the cloud's reason) when a
        reclaim it accepted failed, so the drill says so instead of waiting out a stage."""
        ...

    def undo(self) -> None:
        """Removes whatever ``reclaim`` set up that the cloud has not used (the AWS target
        tag); safe to call twice, and from a Ctrl-C handler."""
        ...


@dataclass(frozen=True)
class CloudDrill:
    """What one cloud's reclaim module gives the drill."""

    provider_id_form: str
    """The node ``spec.providerID`` form the cloud's nodes carry, for messages."""
    instance: Callable[[str], Instance | None]
    """The instance behind a provider id; None when it is not of this cloud."""
    grant: type[Any]
    """The frozen dataclass of the stack's ``drill`` output (``drill.grants``), as the
    cloud's components export it (``<cloud>.drill``'s ``DrillGrant``)."""
    reclaimer: Callable[[Any, str], Reclaimer]
    """A reclaimer for a grant and a cluster's name, with the caller's ambient credentials
    (application default credentials, the AWS credential chain, ``DefaultAzureCredential``);
    each module's own ``reclaimer`` also takes an SDK client, as tests pass one with a
    stubbed transport."""
