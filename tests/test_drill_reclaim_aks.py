"""``spotproof drill`` on AKS: a Spot VM evicted with Azure's ``simulateEviction``, through
azure-mgmt-compute with a transport of the test's own.

The transport records each request as the SDK would send it (method, ARM path, query,
body) and answers from a table; the credential is a fake that hands out a token. Nothing
reaches the network."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest import HttpRequest, HttpResponse
from azure.mgmt.compute import ComputeManagementClient

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillError, DrillRefused, GrantMissing
from spotproof.drill.instances import Instance
from spotproof.drill.reclaim import aks

SUBSCRIPTION = "00000000-0000-0000-0000-0000000000a1"
NODE_GROUP = "MC_ml-research_research_eastus"
CLUSTER = "research"
SCALE_SET = "aks-gpuspot-12345678-vmss"
ROLE = f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/d1"
GRANT = aks.Grant(SUBSCRIPTION, NODE_GROUP, ROLE)
# AKS writes the node resource group in lower case into provider ids.
GROUP_PATH = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{NODE_GROUP.lower()}"
COMPUTE = f"{GROUP_PATH}/providers/Microsoft.Compute"
SCALE_SET_PATH = f"{COMPUTE}/virtualMachineScaleSets/{SCALE_SET}"
SCALE_SET_VM_PATH = f"{SCALE_SET_PATH}/virtualMachines/3"
VM_NAME = "aks-gpuspot-a1b2c"
VM_PATH = f"{COMPUTE}/virtualMachines/{VM_NAME}"


class Canned(HttpResponse):
    """One canned answer, read whole."""

    def __init__(self, request: HttpRequest, status: int, body: Any, headers: dict[str, str]):
        self._request, self._status = request, status
        self._content = b"" if body is None else json.dumps(body).encode()
        self._headers = {**headers, **({"Content-Type": "application/json"} if body else {})}

    request = property(lambda self: self._request)
    status_code = property(lambda self: self._status)
    headers = property(lambda self: self._headers)
    content_type = property(lambda self: self._headers.get("Content-Type"))
    reason = property(lambda self: "Canned")
    encoding = property(lambda self: "utf-8")
    is_closed = property(lambda self: True)
    is_stream_consumed = property(lambda self: True)
    url = property(lambda self: self._request.url)
    content = property(lambda self: self._content)

    def text(self, encoding: str | None = None) -> str:
        return self._content.decode()

    def json(self) -> Any:
        return json.loads(self._content)

    def raise_for_status(self) -> None:
        if self._status >= 400:
            raise HttpResponseError(response=self)

    def read(self) -> bytes:
        return self._content

    def iter_raw(self, **_: Any) -> Iterator[bytes]:
        yield self._content

    def iter_bytes(self, **_: Any) -> Iterator[bytes]:
        yield self._content

    def close(self) -> None:
        pass

    def __enter__(self) -> Canned:
        return self

    def __exit__(self, *_: object) -> None:
        pass


@dataclass
class Sent:
    method: str
    host: str
    path: str
    query: dict[str, list[str]]
    body: bytes


@dataclass
class Arm(HttpTransport):
    """Azure Resource Manager as a table of (method, path) -> (status, body, headers)."""

    answers: dict[tuple[str, str], tuple[int, Any, dict[str, str]]] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)

    def answer(self, method: str, path: str, status: int, body: Any = None, **headers: str) -> None:
        self.answers[(method, path.lower())] = (status, body, headers)

    def send(self, request: HttpRequest, **_: Any) -> Canned:  # type: ignore[override]
        url = urlsplit(request.url)
        self.sent.append(
            Sent(request.method, url.netloc, url.path, parse_qs(url.query), request.content or b"")
        )
        found = self.answers.get((request.method, url.path.lower()))
        assert found, f"unexpected request {request.method} {url.path}"
        status, body, headers = found
        return Canned(request, status, body, headers)

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> Arm:
        return self

    def __exit__(self, *_: object) -> None:
        pass


class Token:
    """A credential that always has a token."""

    def get_token(self, *_scopes: str, **_: Any) -> AccessToken:
        return AccessToken("token", int(time.time()) + 3600)


class NoCredential:
    """What ``DefaultAzureCredential`` does when it finds none."""

    def get_token(self, *_scopes: str, **_: Any) -> AccessToken:
        raise ClientAuthenticationError(
            message="DefaultAzureCredential failed to retrieve a token from the included "
            "credentials.\nAttempted credentials:\n\tEnvironmentCredential: ..."
        )


@pytest.fixture
def arm() -> Arm:
    return Arm()


def _reclaimer(arm: Arm, credential: Any = None) -> aks.AzureReclaimer:
    client = ComputeManagementClient(credential or Token(), SUBSCRIPTION, transport=arm)
    return aks.reclaimer(GRANT, CLUSTER, client=client)


def _node(path: str) -> Instance:
    found = aks.instance(f"azure://{path}")
    assert found is not None
    return found


def _scale_set(priority: str = "Spot", tags: dict[str, str] | None = None) -> dict[str, Any]:
    profile = {"priority": priority, "evictionPolicy": "Delete"} if priority else {}
    return {
        "name": SCALE_SET,
        "location": "eastus",
        "tags": {"aks-managed-poolName": "gpuspot", **(tags or {})},
        "properties": {"virtualMachineProfile": profile},
    }


def _vm(priority: str = "Spot", tags: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": VM_NAME,
        "location": "eastus",
        "tags": {"karpenter.sh_nodepool": "gpu-spot", **(tags or {})},
        "properties": {"priority": priority, "evictionPolicy": "Delete"},
    }


def _arm_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _one_line(error: pytest.ExceptionInfo[Exception]) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


# The provider id.


def test_a_scale_set_provider_id_names_the_group_scale_set_and_instance() -> None:
    assert _node(SCALE_SET_VM_PATH) == Instance(
        Cloud.AKS,
        f"azure://{SCALE_SET_VM_PATH}",
        name="3",
        project=SUBSCRIPTION,
        group=NODE_GROUP.lower(),
        scale_set=SCALE_SET,
    )


def test_a_standalone_vm_provider_id_names_the_group_and_vm() -> None:
    found = _node(VM_PATH)
    assert (found.name, found.group, found.scale_set) == (VM_NAME, NODE_GROUP.lower(), "")


def test_provider_id_path_segments_match_in_any_case() -> None:
    found = aks.instance(
        f"azure:///subscriptions/{SUBSCRIPTION}/resourcegroups/{NODE_GROUP}/providers/"
        f"microsoft.compute/virtualmachinescalesets/{SCALE_SET}/virtualmachines/3"
    )
    assert found is not None
    assert (found.group, found.scale_set, found.name) == (NODE_GROUP, SCALE_SET, "3")


@pytest.mark.parametrize(
    "provider_id",
    [
        "gce://ml-research/us-central1-a/gke-research-l4-spot-5f3c2a1b-x7kq",
        "aws:///us-east-1a/i-0123456789abcdef0",
        f"azure://{SCALE_SET_PATH}/virtualMachines/{SCALE_SET}_3",
        f"azure://{GROUP_PATH}/providers/Microsoft.Network/networkInterfaces/nic",
        f"azure://{SCALE_SET_PATH}",
        SCALE_SET_VM_PATH,
        "",
    ],
)
def test_other_provider_ids_are_no_azure_vm(provider_id: str) -> None:
    assert aks.instance(provider_id) is None


# verify.


def test_verify_reads_a_scale_set_instance_and_its_scale_sets_priority(arm: Arm) -> None:
    arm.answer("GET", SCALE_SET_VM_PATH, 200, {"name": f"{SCALE_SET}_3", "instanceId": "3"})
    arm.answer("GET", SCALE_SET_PATH, 200, _scale_set())
    assert _reclaimer(arm).verify(_node(SCALE_SET_VM_PATH)) == "Spot, evict Delete"
    assert [(s.method, s.host, s.path.lower()) for s in arm.sent] == [
        ("GET", "management.azure.com", SCALE_SET_VM_PATH.lower()),
        ("GET", "management.azure.com", SCALE_SET_PATH.lower()),
    ]
    assert all(set(s.query) == {"api-version"} for s in arm.sent)


def test_verify_reads_a_standalone_vms_own_priority(arm: Arm) -> None:
    arm.answer("GET", VM_PATH, 200, _vm())
    assert _reclaimer(arm).verify(_node(VM_PATH)) == "Spot, evict Delete"
    [sent] = arm.sent
    assert (sent.method, sent.path.lower()) == ("GET", VM_PATH.lower())


def test_verify_refuses_a_regular_scale_set(arm: Arm) -> None:
    arm.answer("GET", SCALE_SET_VM_PATH, 200, {"name": f"{SCALE_SET}_3", "instanceId": "3"})
    arm.answer("GET", SCALE_SET_PATH, 200, _scale_set(priority="Regular"))
    with pytest.raises(DrillRefused) as refused:
        _reclaimer(arm).verify(_node(SCALE_SET_VM_PATH))
    assert "has priority Regular; a drill evicts only Spot VMs" in _one_line(refused)


def test_verify_refuses_a_vm_without_a_priority(arm: Arm) -> None:
    arm.answer("GET", VM_PATH, 200, {"name": VM_NAME, "location": "eastus", "properties": {}})
    with pytest.raises(DrillRefused) as refused:
        _reclaimer(arm).verify(_node(VM_PATH))
    assert "has priority Regular" in _one_line(refused)


def test_verify_refuses_a_vm_outside_the_node_resource_group_without_asking(arm: Arm) -> None:
    other = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/MC_prod_production_eastus"
    with pytest.raises(DrillRefused) as refused:
        _reclaimer(arm).verify(_node(f"{other}/providers/Microsoft.Compute/virtualMachines/v"))
    line = _one_line(refused)
    assert "is in resource group MC_prod_production_eastus, not this cluster's node" in line
    assert arm.sent == []


def test_verify_refuses_a_vm_in_another_subscription_without_asking(arm: Arm) -> None:
    other = "/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/" + NODE_GROUP
    with pytest.raises(DrillRefused) as refused:
        _reclaimer(arm).verify(_node(f"{other}/providers/Microsoft.Compute/virtualMachines/v"))
    assert f"the drill's grant covers subscription {SUBSCRIPTION} only" in _one_line(refused)
    assert arm.sent == []


def test_verify_refuses_a_vm_tagged_with_another_cluster(arm: Arm) -> None:
    arm.answer("GET", VM_PATH, 200, _vm(tags={"aks-managed-cluster-name": "production"}))
    with pytest.raises(DrillRefused) as refused:
        _reclaimer(arm).verify(_node(VM_PATH))
    assert "tagged aks-managed-cluster-name=production, not research" in _one_line(refused)


def test_verify_accepts_a_vm_tagged_with_this_cluster(arm: Arm) -> None:
    arm.answer("GET", VM_PATH, 200, _vm(tags={"aks-managed-cluster-name": CLUSTER}))
    assert _reclaimer(arm).verify(_node(VM_PATH)) == "Spot, evict Delete"


def test_a_denied_read_is_a_missing_grant_naming_the_read_action(arm: Arm) -> None:
    denied = _arm_error("AuthorizationFailed", "The client 'dev' does not have authorization")
    arm.answer("GET", VM_PATH, 403, denied)
    with pytest.raises(GrantMissing) as missing:
        _reclaimer(arm).verify(_node(VM_PATH))
    line = _one_line(missing)
    assert "Azure denied Microsoft.Compute/virtualMachines/read" in line
    assert f"(403 AuthorizationFailed); the stack's drill role {ROLE}" in line


def test_a_vm_that_is_gone_is_refused(arm: Arm) -> None:
    arm.answer("GET", VM_PATH, 404, _arm_error("ResourceNotFound", "The Resource was not found."))
    with pytest.raises(DrillRefused) as refused:
        _reclaimer(arm).verify(_node(VM_PATH))
    assert "no such Azure VM (404 ResourceNotFound" in _one_line(refused)


def test_no_credential_is_one_line_naming_what_failed(arm: Arm) -> None:
    with pytest.raises(DrillError) as no_credential:
        _reclaimer(arm, NoCredential()).verify(_node(VM_PATH))
    line = _one_line(no_credential)
    assert "no usable credential for Microsoft.Compute/virtualMachines/read" in line
    assert "DefaultAzureCredential failed to retrieve a token" in line
    assert "az login" in line
    assert arm.sent == []


# reclaim.


def test_reclaim_posts_simulate_eviction_on_the_scale_set_instance(arm: Arm) -> None:
    arm.answer(
        "POST", f"{SCALE_SET_VM_PATH}/simulateEviction", 204, None, **{"x-ms-request-id": "r1"}
    )
    before = time.time()
    reclaimed = _reclaimer(arm).reclaim(_node(SCALE_SET_VM_PATH))
    [sent] = arm.sent
    assert (sent.method, sent.path.lower(), set(sent.query), sent.body) == (
        "POST",
        f"{SCALE_SET_VM_PATH}/simulateEviction".lower(),
        {"api-version"},
        b"",
    )
    assert (reclaimed.reference, reclaimed.how) == ("r1", "simulateEviction (r1)")
    assert before <= reclaimed.requested_at <= time.time()


def test_reclaim_posts_simulate_eviction_on_a_standalone_vm(arm: Arm) -> None:
    arm.answer("POST", f"{VM_PATH}/simulateEviction", 204, None, **{"x-ms-request-id": "r2"})
    reclaimed = _reclaimer(arm).reclaim(_node(VM_PATH))
    [sent] = arm.sent
    assert (sent.method, sent.path.lower()) == ("POST", f"{VM_PATH}/simulateEviction".lower())
    assert reclaimed.reference == "r2"


def test_a_denied_eviction_is_a_missing_grant_naming_the_action_and_role(arm: Arm) -> None:
    action = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/simulateEviction/action"
    denied = _arm_error(
        "AuthorizationFailed",
        f"The client 'dev' does not have authorization to perform action '{action}' over "
        f"scope '{SCALE_SET_VM_PATH}' or the scope is invalid.",
    )
    arm.answer("POST", f"{SCALE_SET_VM_PATH}/simulateEviction", 403, denied)
    with pytest.raises(GrantMissing) as missing:
        _reclaimer(arm).reclaim(_node(SCALE_SET_VM_PATH))
    line = _one_line(missing)
    assert f"Azure denied {action}" in line
    assert f"role {ROLE} grants it on resource group {NODE_GROUP}" in line


def test_an_eviction_azure_refuses_is_a_drill_error_with_its_code(arm: Arm) -> None:
    refused = _arm_error("OperationNotAllowed", "The VM is not a Spot VM.\nMore details.")
    arm.answer("POST", f"{VM_PATH}/simulateEviction", 409, refused)
    with pytest.raises(DrillError) as error:
        _reclaimer(arm).reclaim(_node(VM_PATH))
    assert not isinstance(error.value, GrantMissing)
    assert "(409 OperationNotAllowed: The VM is not a Spot VM.)" in _one_line(error)


def test_reclaim_refuses_a_vm_outside_the_grant_without_asking(arm: Arm) -> None:
    other = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/elsewhere"
    with pytest.raises(DrillRefused):
        _reclaimer(arm).reclaim(_node(f"{other}/providers/Microsoft.Compute/virtualMachines/v"))
    assert arm.sent == []


# undo.


def test_undo_asks_nothing_and_is_safe_to_call_twice(arm: Arm) -> None:
    reclaimer = _reclaimer(arm)
    reclaimer.undo()
    reclaimer.undo()
    assert arm.sent == []
