"""``spotproof drill`` on GKE: a Spot VM reclaimed with Compute Engine's
``simulateMaintenanceEvent``, through google-cloud-compute's REST transport.

Every HTTP request the SDK makes goes to a stub at the ``requests`` adapter, so what is
asserted is the request as it would leave the machine: method, path, query and body.
Nothing reaches the network."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from spotproof.catalog import Cloud
from spotproof.drill.errors import DrillError, DrillRefused, GrantMissing, StageTimedOut
from spotproof.drill.instances import Instance
from spotproof.drill.reclaim import gke

PROJECT = "ml-research"
ZONE = "us-central1-a"
CLUSTER = "research"
NODE = "gke-research-l4-spot-5f3c2a1b-x7kq"
INSTANCE_PATH = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/{NODE}"
OPERATION = "operation-1767000000000-abc123"
OPERATION_PATH = f"/compute/v1/projects/{PROJECT}/zones/{ZONE}/operations/{OPERATION}"
GRANT = gke.Grant(
    project=PROJECT,
    role=f"projects/{PROJECT}/roles/spotproofDrill",
    instance_prefix="gke-research-",
)


@dataclass
class Sent:
    method: str
    host: str
    path: str
    query: dict[str, list[str]]
    body: bytes | None


@dataclass
class ComputeApi:
    """Canned Compute Engine answers by (method, path), in order (the last one repeats)."""

    answers: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)

    def answer(self, method: str, path: str, status: int, body: dict[str, Any]) -> None:
        self.answers.setdefault((method, path), []).append((status, body))

    def send(self, request: requests.PreparedRequest) -> requests.Response:
        url = urlsplit(request.url or "")
        body = request.body.encode() if isinstance(request.body, str) else request.body
        self.sent.append(
            Sent(request.method or "", url.netloc, url.path, parse_qs(url.query), body)
        )
        queue = self.answers.get((request.method or "", url.path))
        assert queue, f"unexpected request {request.method} {url.path}"
        status, payload = queue.pop(0) if len(queue) > 1 else queue[0]
        response = requests.Response()
        response.status_code = status
        response.url = request.url or ""
        response.request = request
        response.headers["Content-Type"] = "application/json"
        response._content = json.dumps(payload).encode()
        return response


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[ComputeApi]:
    """Every ``requests`` session, the SDK's operation poller's included, answers from here."""
    stub = ComputeApi()
    monkeypatch.setattr(
        requests.adapters.HTTPAdapter, "send", lambda _self, request, **_kw: stub.send(request)
    )
    yield stub


def _reclaimer(**kwargs: float) -> gke.GceReclaimer:
    client = compute_v1.InstancesClient(credentials=AnonymousCredentials(), transport="rest")
    found = gke.reclaimer(GRANT, CLUSTER, client=client)
    for name, value in kwargs.items():
        setattr(found, name, value)
    return found


def _node(name: str = NODE, project: str = PROJECT) -> Instance:
    found = gke.instance(f"gce://{project}/{ZONE}/{name}")
    assert found is not None
    return found


def _vm(
    *, model: str | None = "SPOT", preemptible: bool = False, cluster: str | None = CLUSTER
) -> dict[str, Any]:
    scheduling: dict[str, Any] = {"preemptible": preemptible}
    if model:
        scheduling["provisioningModel"] = model
    if model == "SPOT":
        scheduling["instanceTerminationAction"] = "DELETE"
    labels = {"goog-k8s-node-pool-name": "l4-spot"}
    if cluster:
        labels["goog-k8s-cluster-name"] = cluster
    return {"name": NODE, "status": "RUNNING", "scheduling": scheduling, "labels": labels}


def _operation(status: str, **more: Any) -> dict[str, Any]:
    return {"kind": "compute#operation", "name": OPERATION, "status": status, **more}


def _forbidden(permission: str, reason: str = "forbidden") -> dict[str, Any]:
    message = f"Required '{permission}' permission for 'projects/{PROJECT}/zones/{ZONE}/...'"
    return {
        "error": {
            "code": 403,
            "message": message,
            "errors": [{"message": message, "domain": "global", "reason": reason}],
        }
    }


def _one_line(error: pytest.ExceptionInfo[Exception]) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


# The provider id.


def test_a_gke_provider_id_names_the_project_zone_and_instance() -> None:
    assert gke.instance(f"gce://{PROJECT}/{ZONE}/{NODE}") == Instance(
        Cloud.GKE, f"gce://{PROJECT}/{ZONE}/{NODE}", name=NODE, zone=ZONE, project=PROJECT
    )


@pytest.mark.parametrize(
    "provider_id",
    [
        "aws:///us-east-1a/i-0123456789abcdef0",
        "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/v",
        f"gce://{PROJECT}/{ZONE}",
        f"gce://{PROJECT}/{ZONE}/{NODE}/extra",
        f"{PROJECT}/{ZONE}/{NODE}",
        "",
    ],
)
def test_other_provider_ids_are_no_gke_instance(provider_id: str) -> None:
    assert gke.instance(provider_id) is None


# verify.


def test_verify_reads_the_vm_with_a_get_on_its_zonal_path(api: ComputeApi) -> None:
    api.answer("GET", INSTANCE_PATH, 200, _vm())
    assert _reclaimer().verify(_node()) == "SPOT, on preemption DELETE"
    [sent] = api.sent
    assert (sent.method, sent.host, sent.path, sent.query, sent.body) == (
        "GET",
        "compute.googleapis.com",
        INSTANCE_PATH,
        {},
        None,
    )


def test_verify_accepts_a_preemptible_vm(api: ComputeApi) -> None:
    api.answer("GET", INSTANCE_PATH, 200, _vm(model=None, preemptible=True))
    assert _reclaimer().verify(_node()) == "preemptible"


def test_verify_refuses_a_standard_vm(api: ComputeApi) -> None:
    api.answer("GET", INSTANCE_PATH, 200, _vm(model="STANDARD"))
    with pytest.raises(DrillRefused) as refused:
        _reclaimer().verify(_node())
    assert "is a STANDARD VM; a drill reclaims only Spot or preemptible VMs" in _one_line(refused)


def test_verify_refuses_a_vm_of_another_cluster(api: ComputeApi) -> None:
    api.answer("GET", INSTANCE_PATH, 200, _vm(cluster="production"))
    with pytest.raises(DrillRefused) as refused:
        _reclaimer().verify(_node())
    assert "labelled goog-k8s-cluster-name=production, not research" in _one_line(refused)


def test_verify_refuses_a_vm_without_the_cluster_label(api: ComputeApi) -> None:
    api.answer("GET", INSTANCE_PATH, 200, _vm(cluster=None))
    with pytest.raises(DrillRefused) as refused:
        _reclaimer().verify(_node())
    assert "goog-k8s-cluster-name=(none)" in _one_line(refused)


def test_verify_refuses_a_vm_that_is_not_running(api: ComputeApi) -> None:
    api.answer("GET", INSTANCE_PATH, 200, {**_vm(), "status": "STOPPING"})
    with pytest.raises(DrillRefused) as refused:
        _reclaimer().verify(_node())
    assert "is STOPPING; a drill reclaims a RUNNING VM" in _one_line(refused)


def test_verify_refuses_a_vm_outside_the_granted_name_prefix_without_asking(
    api: ComputeApi,
) -> None:
    with pytest.raises(DrillRefused) as refused:
        _reclaimer().verify(_node("gke-production-l4-spot-1a2b3c4d-abcd"))
    assert "is not named gke-research-*" in _one_line(refused)
    assert "spotproofDrill" in str(refused.value)
    assert api.sent == []


def test_verify_refuses_a_vm_in_another_project_without_asking(api: ComputeApi) -> None:
    with pytest.raises(DrillRefused) as refused:
        _reclaimer().verify(_node(project="someone-else"))
    assert "in project someone-else; the drill's grant covers project ml-research" in _one_line(
        refused
    )
    assert api.sent == []


def test_verify_refuses_an_instance_of_another_cloud(api: ComputeApi) -> None:
    other = Instance(Cloud.EKS, "aws:///us-east-1a/i-0abc", name="i-0abc", zone="us-east-1a")
    with pytest.raises(DrillRefused):
        _reclaimer().verify(other)
    assert api.sent == []


def test_a_denied_get_is_a_missing_grant_naming_compute_instances_get(api: ComputeApi) -> None:
    api.answer("GET", INSTANCE_PATH, 403, _forbidden("compute.instances.get"))
    with pytest.raises(GrantMissing) as missing:
        _reclaimer().verify(_node())
    line = _one_line(missing)
    assert "Compute Engine denied compute.instances.get" in line
    assert "(403 forbidden:" in line
    assert f"role {GRANT.role}" in line


def test_a_vm_that_is_gone_is_refused(api: ComputeApi) -> None:
    gone = {"error": {"code": 404, "message": "The resource was not found", "errors": []}}
    api.answer("GET", INSTANCE_PATH, 404, gone)
    with pytest.raises(DrillRefused) as refused:
        _reclaimer().verify(_node())
    assert "no such Compute Engine instance (404" in _one_line(refused)


# reclaim.


def test_reclaim_posts_simulate_maintenance_event_with_no_body(api: ComputeApi) -> None:
    api.answer("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent", 200, _operation("RUNNING"))
    before = time.time()
    reclaimed = _reclaimer().reclaim(_node())
    [sent] = api.sent
    assert (sent.method, sent.path, sent.query) == (
        "POST",
        f"{INSTANCE_PATH}/simulateMaintenanceEvent",
        {},
    )
    assert not sent.body
    assert reclaimed.instance == _node()
    assert reclaimed.reference == OPERATION
    assert reclaimed.how == f"simulateMaintenanceEvent ({OPERATION})"
    assert before <= reclaimed.requested_at <= time.time()


def test_reclaim_polls_a_pending_operation_until_it_runs(api: ComputeApi) -> None:
    api.answer("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent", 200, _operation("PENDING"))
    api.answer("GET", OPERATION_PATH, 200, _operation("PENDING"))
    api.answer("GET", OPERATION_PATH, 200, _operation("RUNNING"))
    _reclaimer(poll_seconds=0).reclaim(_node())
    assert [(s.method, s.path) for s in api.sent] == [
        ("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent"),
        ("GET", OPERATION_PATH),
        ("GET", OPERATION_PATH),
    ]


def test_reclaim_waits_for_a_pending_operation_no_longer_than_its_bound(
    api: ComputeApi,
) -> None:
    api.answer("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent", 200, _operation("PENDING"))
    with pytest.raises(StageTimedOut) as timed_out:
        _reclaimer(accept_seconds=0, poll_seconds=0).reclaim(_node())
    assert f"left operation {OPERATION}" in _one_line(timed_out)
    assert "gcloud compute operations describe" in str(timed_out.value)


def test_an_operation_that_failed_is_a_drill_error_with_its_code(api: ComputeApi) -> None:
    failed = _operation(
        "DONE",
        httpErrorStatusCode=400,
        httpErrorMessage="BAD REQUEST",
        error={"errors": [{"code": "UNSUPPORTED_OPERATION", "message": "Not a Spot VM."}]},
    )
    api.answer("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent", 200, failed)
    with pytest.raises(DrillError) as refused:
        _reclaimer().reclaim(_node())
    assert not isinstance(refused.value, GrantMissing)
    assert "UNSUPPORTED_OPERATION: Not a Spot VM." in _one_line(refused)


def test_a_denied_simulate_is_a_missing_grant_naming_the_permission_and_role(
    api: ComputeApi,
) -> None:
    denied = _forbidden("compute.instances.simulateMaintenanceEvent")
    api.answer("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent", 403, denied)
    with pytest.raises(GrantMissing) as missing:
        _reclaimer().reclaim(_node())
    line = _one_line(missing)
    assert "denied compute.instances.simulateMaintenanceEvent" in line
    assert f"role {GRANT.role} grants it on instances named gke-research-*" in line


def test_a_denied_operation_poll_is_a_missing_grant_naming_zone_operations_get(
    api: ComputeApi,
) -> None:
    api.answer("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent", 200, _operation("PENDING"))
    api.answer("GET", OPERATION_PATH, 403, _forbidden("compute.zoneOperations.get"))
    with pytest.raises(GrantMissing) as missing:
        _reclaimer(poll_seconds=0).reclaim(_node())
    assert "denied compute.zoneOperations.get" in _one_line(missing)


def test_a_rate_limited_simulate_is_no_missing_grant(api: ComputeApi) -> None:
    limited = _forbidden("compute.instances.simulateMaintenanceEvent", "rateLimitExceeded")
    api.answer("POST", f"{INSTANCE_PATH}/simulateMaintenanceEvent", 403, limited)
    with pytest.raises(DrillError) as limited_error:
        _reclaimer().reclaim(_node())
    assert not isinstance(limited_error.value, GrantMissing)
    line = _one_line(limited_error)
    assert "rate-limited" in line
    assert "403 rateLimitExceeded" in line


def test_reclaim_refuses_a_vm_outside_the_grant_without_asking(api: ComputeApi) -> None:
    with pytest.raises(DrillRefused):
        _reclaimer().reclaim(_node("some-other-vm"))
    assert api.sent == []


# undo, and the credentials.


def test_undo_asks_nothing_and_is_safe_to_call_twice(api: ComputeApi) -> None:
    reclaimer = _reclaimer()
    reclaimer.undo()
    reclaimer.undo()
    assert api.sent == []


def test_no_application_default_credentials_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(DrillError) as no_credentials:
        gke.reclaimer(GRANT, CLUSTER)
    assert "gcloud auth application-default login" in _one_line(no_credentials)
