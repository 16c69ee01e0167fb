"""Azure: a drill evicts an AKS node's Spot VM with ``simulateEviction``.

Azure offers ``simulateEviction`` to test how an application handles a Spot eviction: the
VM gets the Scheduled Events ``Preempt`` notice and is then evicted by its eviction policy,
as in a real eviction ("Simulate an eviction" in
https://learn.microsoft.com/azure/virtual-machines/spot-vms and
https://learn.microsoft.com/azure/virtual-machine-scale-sets/use-spot; the REST calls:
https://learn.microsoft.com/rest/api/compute/virtual-machine-scale-set-vms/simulate-eviction,
https://learn.microsoft.com/rest/api/compute/virtual-machines/simulate-eviction). A spot
agent pool's node is an instance of a Uniform scale set; node auto-provisioning (Karpenter)
and Flexible scale sets make standalone VMs.

Which cluster a VM serves: the stack's grant is a role on the cluster's node resource
group, which AKS creates for one cluster alone
(https://learn.microsoft.com/azure/aks/faq#why-are-two-resource-groups-created-with-aks),
so the drill refuses any VM outside it, and that is the check that matters. AKS documents
no tag on an agent pool's scale set that names the cluster (the set carries
``aks-managed-poolName``, the pool's name), and Karpenter's ``karpenter.azure.com_cluster``
tag holds whatever name its operator was given (Azure/karpenter-provider-azure
``pkg/providers/launchtemplate/tags.go``, tag v1.14.2), so neither is required; a VM or scale
set that does carry ``aks-managed-cluster-name`` (as AKS puts on the node resource group
and its load balancer resources) must name this cluster.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillError, DrillRefused, GrantMissing
from spotproof.drill.instances import Instance
from spotproof.drill.reclaim import CloudDrill, Reclaimed

if TYPE_CHECKING:
    from azure.core.exceptions import HttpResponseError
    from azure.mgmt.compute import ComputeManagementClient

PROVIDER_ID_FORM = (
    "azure:///subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/"
    "virtualMachineScaleSets/VMSS/virtualMachines/N or azure:///subscriptions/SUB/"
    "resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/NAME"
)
"""The two forms the Azure node controller writes: a scale set's instance (numeric
instance id) and a standalone VM (kubernetes-sigs/cloud-provider-azure
``pkg/provider/azure_vmss.go`` ``vmssVMResourceIDTemplate`` and ``GetNodeNameByProviderID``,
``pkg/provider/azure_standard.go`` ``providerIDRE``, tag v1.36.5). ARM treats resource
paths without regard to case, and node provider ids may spell the resource group in lower
case, so the path's fixed segments match in any case and the group is compared so too."""

_PREFIX = r"^azure:///subscriptions/([^/]+)/resourceGroups/([^/]+)/providers/Microsoft\.Compute"
_SCALE_SET_VM = re.compile(
    _PREFIX + r"/virtualMachineScaleSets/([^/]+)/virtualMachines/(\d+)$", re.IGNORECASE
)
_VM = re.compile(_PREFIX + r"/virtualMachines/([^/]+)$", re.IGNORECASE)

CLUSTER_TAG = "aks-managed-cluster-name"

_COMPUTE = "Microsoft.Compute"
SCALE_SET_READ = f"{_COMPUTE}/virtualMachineScaleSets/read"
SCALE_SET_VM_READ = f"{_COMPUTE}/virtualMachineScaleSets/virtualMachines/read"
SCALE_SET_VM_EVICT = f"{_COMPUTE}/virtualMachineScaleSets/virtualMachines/simulateEviction/action"
VM_READ = f"{_COMPUTE}/virtualMachines/read"
VM_EVICT = f"{_COMPUTE}/virtualMachines/simulateEviction/action"
"""The Azure RBAC actions each call needs, for the message when one is missing
(https://learn.microsoft.com/azure/role-based-access-control/permissions/compute)."""

_T = TypeVar("_T")


def instance(provider_id: str) -> Instance | None:
    """The Azure VM behind an AKS node's provider id; None for another cloud's."""
    found = _SCALE_SET_VM.match(provider_id)
    if found:
        subscription, group, scale_set, instance_id = found.groups()
        return Instance(
            Cloud.AKS,
            provider_id,
            name=instance_id,
            project=subscription,
            group=group,
            scale_set=scale_set,
        )
    found = _VM.match(provider_id)
    if found:
        subscription, group, name = found.groups()
        return Instance(Cloud.AKS, provider_id, name=name, project=subscription, group=group)
    return None


@dataclass(frozen=True)
class Grant:
    """The stack output ``drill`` on AKS: a custom role allowing ``simulateEviction`` (and
    the reads before it), assigned on the cluster's node resource group."""

    subscription_id: str
    node_resource_group: str
    role_definition_id: str


def _first_line(text: object) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def _value(enum_or_text: object) -> str:
    """An SDK enum member or plain string, as the API spells it (``Spot``)."""
    return str(getattr(enum_or_text, "value", enum_or_text) or "")


class AzureReclaimer:
    """Evicts this cluster's Spot VMs, within the node resource group the stack grants."""

    def __init__(self, grant: Grant, cluster: str, client: ComputeManagementClient) -> None:
        self.grant = grant
        self.cluster = cluster
        self.client = client

    def verify(self, instance: Instance) -> str:
        self._within_grant(instance)
        group, name = instance.group, instance.name
        if instance.scale_set:
            # A Uniform scale set's instances take their priority from the set's profile.
            scale_set = instance.scale_set
            self._call(
                SCALE_SET_VM_READ,
                instance,
                lambda: self.client.virtual_machine_scale_set_vms.get(group, scale_set, name),
            )
            owner = self._call(
                SCALE_SET_READ,
                instance,
                lambda: self.client.virtual_machine_scale_sets.get(group, scale_set),
            )
            profile = owner.virtual_machine_profile
            priority = _value(profile.priority if profile else None)
            eviction = _value(profile.eviction_policy if profile else None)
            tags = owner.tags or {}
        else:
            vm = self._call(
                VM_READ, instance, lambda: self.client.virtual_machines.get(group, name)
            )
            priority, eviction, tags = _value(vm.priority), _value(vm.eviction_policy), vm.tags
        if priority.lower() != "spot":
            raise DrillRefused(
                f"{instance} has priority {priority or 'Regular'}; a drill evicts only Spot VMs"
            )
        owner_name = (tags or {}).get(CLUSTER_TAG)
        if owner_name is not None and owner_name != self.cluster:
            raise DrillRefused(
                f"{instance} is tagged {CLUSTER_TAG}={owner_name}, not {self.cluster}; a drill "
                f"evicts only this cluster's nodes"
            )
        return f"Spot, evict {eviction or 'Deallocate'}"

    def reclaim(self, instance: Instance) -> Reclaimed:
        self._within_grant(instance)
        group, name = instance.group, instance.name
        headers: dict[str, str] = {}

        def keep_headers(pipeline_response: Any, _body: None, _headers: Any) -> None:
            # The API answers 204 with no body; ARM's request id is what support asks for.
            headers.update(pipeline_response.http_response.headers)

        if instance.scale_set:
            scale_set = instance.scale_set
            action = SCALE_SET_VM_EVICT
            self._call(
                action,
                instance,
                lambda: self.client.virtual_machine_scale_set_vms.simulate_eviction(
                    group, scale_set, name, cls=keep_headers
                ),
            )
        else:
            action = VM_EVICT
            self._call(
                action,
                instance,
                lambda: self.client.virtual_machines.simulate_eviction(
                    group, name, cls=keep_headers
                ),
            )
        requested_at = time.time()
        request_id = next(
            (value for key, value in headers.items() if key.lower() == "x-ms-request-id"), ""
        )
        return Reclaimed(
            instance=instance,
            requested_at=requested_at,
            reference=request_id,
            how=f"simulateEviction ({request_id or 'no request id'})",
        )

    def check(self) -> None:
        """Nothing to follow: ``simulateEviction`` answers once Azure has taken the eviction."""

    def undo(self) -> None:
        """Nothing to undo: the request leaves nothing behind but the eviction itself."""

    def _within_grant(self, instance: Instance) -> None:
        """The grant's own bounds, checked here so a refusal names them. Subscription ids
        and resource group names are case-insensitive in ARM."""
        if instance.cloud is not Cloud.AKS:
            raise DrillRefused(f"{instance} is not an Azure VM; allowed: AKS nodes")
        if instance.project.lower() != self.grant.subscription_id.lower():
            raise DrillRefused(
                f"{instance} is in subscription {instance.project}; the drill's grant covers "
                f"subscription {self.grant.subscription_id} only"
            )
        if instance.group.lower() != self.grant.node_resource_group.lower():
            raise DrillRefused(
                f"{instance} is in resource group {instance.group}, not this cluster's node "
                f"resource group {self.grant.node_resource_group}; a drill evicts only "
                f"this cluster's nodes"
            )

    def _call(self, action: str, instance: Instance, call: Callable[[], _T]) -> _T:
        """``call()``, its failures turned into the one line a user can act on."""
        from azure.core.exceptions import AzureError, HttpResponseError  # noqa: PLC0415

        try:
            return call()
        except HttpResponseError as error:
            if error.status_code is not None:
                raise self._translate(error, action, instance) from error
            raise self._unanswered(error, action, instance) from error
        except AzureError as error:
            raise self._unanswered(error, action, instance) from error

    def _translate(self, error: HttpResponseError, action: str, instance: Instance) -> DrillError:
        status = error.status_code
        code = (error.error.code if error.error else None) or error.reason or ""
        message = _first_line(error.error.message if error.error else error.message)
        line = f"{status} {code}".strip()
        if status == 401:
            return DrillError(
                f"Azure did not accept the caller's credentials for {action} on {instance} "
                f"({line}); sign in (az login) and drill again"
            )
        if status == 403:
            return GrantMissing(
                f"Azure denied {action} on {instance} ({line}); the stack's drill role "
                f"{self.grant.role_definition_id} grants it on resource group "
                f"{self.grant.node_resource_group}: assign it to the caller and drill again"
            )
        if status == 404:
            return DrillRefused(f"{instance}: no such Azure VM ({line}: {message})")
        return DrillError(f"Azure refused {action} on {instance} ({line}: {message})")

    def _unanswered(self, error: Exception, action: str, instance: Instance) -> DrillError:
        from azure.core.exceptions import ClientAuthenticationError  # noqa: PLC0415

        line = f"{type(error).__name__}: {_first_line(getattr(error, 'message', error))}"
        if isinstance(error, ClientAuthenticationError):
            # DefaultAzureCredential finding no credential: no request was sent.
            return DrillError(
                f"Azure: no usable credential for {action} ({line}); sign in (az login) "
                f"and drill again"
            )
        return DrillError(f"Azure: {action} on {instance} got no answer ({line})")


def reclaimer(
    grant: Grant, cluster: str, *, client: ComputeManagementClient | None = None
) -> AzureReclaimer:
    """A reclaimer with ``DefaultAzureCredential``, or with ``client`` (a
    ``ComputeManagementClient``, as tests pass one with their own transport)."""
    if client is None:
        from azure.identity import DefaultAzureCredential  # noqa: PLC0415
        from azure.mgmt.compute import ComputeManagementClient  # noqa: PLC0415

        client = ComputeManagementClient(DefaultAzureCredential(), grant.subscription_id)
    return AzureReclaimer(grant, cluster, client)


DRILL = CloudDrill(
    provider_id_form=PROVIDER_ID_FORM, instance=instance, grant=Grant, reclaimer=reclaimer
)
