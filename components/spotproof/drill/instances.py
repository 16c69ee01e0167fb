"""A Kubernetes node's cloud instance, read from the node's ``spec.providerID``.

Each cloud's node controller writes the provider id in its own form; each cloud's reclaim
module (``drill.reclaim.<cloud>``'s ``DRILL``) reads it (``instance``) and says the form
it expects (``provider_id_form``), so a node of another cloud, or one with no provider id,
is refused in one line before anything is asked of a cloud.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotproof import clouds
from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillRefused

RECLAIM_LAYER = "spotproof.drill.reclaim"


@dataclass(frozen=True)
class Instance:
    """One cloud VM, named the way its cloud's API takes it."""

    cloud: Cloud
    provider_id: str
    name: str
    """GCE instance name; EC2 instance id; Azure VM name, or the scale set's instance id."""
    zone: str = ""
    """GCE and EC2 zone; empty on Azure (its provider id does not carry one)."""
    project: str = ""
    """GCP project; Azure subscription id; empty on AWS."""
    group: str = ""
    """Azure resource group (the cluster's node resource group)."""
    scale_set: str = ""
    """Azure scale set when the VM is one of its instances; empty for a standalone VM."""

    def __str__(self) -> str:
        return self.provider_id


def instance_of(provider_id: str, cloud: Cloud) -> Instance:
    """The instance behind a node's ``provider_id``; DrillRefused when it is not one of
    ``cloud``'s."""
    reclaim = clouds.module(RECLAIM_LAYER, cloud).DRILL
    found = reclaim.instance(provider_id.strip())
    if found is None:
        raise DrillRefused(
            f"node providerID {provider_id!r} is not a {cloud.value.upper()} instance; "
            f"allowed: {reclaim.provider_id_form}"
        )
    return found
