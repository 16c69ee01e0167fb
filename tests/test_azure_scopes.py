"""On AKS the trainer and the batch workers each reach their own prefix of the container
and nothing else, as on GKE and EKS: their role assignments carry a condition that
confines reads, listings and changes, and every request the runtime really sends (to
Azurite, through a recording proxy) is one that condition admits. Azurite evaluates no
conditions, so the test judges each request the way Azure documents it: a blob's path
for reads and changes, the request's ``prefix`` for listings."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qs, unquote, urlparse

import pytest

from spotproof.catalog.aks import blobs_under
from spotproof.plan import PlanResult
from spotproof.runtime.batch import ResultStore
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.storage import open_store
from spotproof.smoke.emulation.fault_proxy import FaultProxy, emulator_port, fault_proxy, through
from spotproof.smoke.emulation.object_stores import Bucket

ROLE = "azure-native:authorization:RoleAssignment"
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"


def _blob_roles(plan: PlanResult) -> dict[str, dict]:
    return {
        r.name: r.inputs
        for r in plan.recording.resources
        if r.type == ROLE and str(r.inputs["roleDefinitionId"]).endswith(BLOB_DATA_CONTRIBUTOR)
    }


def test_the_trainers_role_is_confined_to_the_checkpoint_prefix(aks_dev: PlanResult) -> None:
    role = _blob_roles(aks_dev)["aks-dev-checkpoints-trainer-writes-container"]
    assert role["condition"] == blobs_under("checkpoints")
    assert role["conditionVersion"] == "2.0"


def test_the_workers_role_is_confined_to_the_results_prefix_for_reads_too(
    aks_dev: PlanResult,
) -> None:
    [worker] = [v for k, v in _blob_roles(aks_dev).items() if "worker" in k]
    assert worker["condition"] == blobs_under("results")
    assert "SubOperationMatches{'Blob.List'}" in worker["condition"]
    assert "blobs/read'} AND NOT SubOperationMatches" in worker["condition"]


def test_every_blob_role_of_the_stack_carries_a_confining_condition(aks_dev: PlanResult) -> None:
    roles = _blob_roles(aks_dev)
    assert len(roles) == 2
    assert all(re.search(r"StringStartsWith '[^']+/'", r["condition"]) for r in roles.values())


# --- what the runtime sends, judged by the condition -----------------------------------


def _admitted(method: str, target: str, container: str, prefix: str) -> bool:
    """Whether ``blobs_under(prefix)`` admits the request: a container-level request
    (no blob, not a listing) is no blob action and the condition does not judge it."""
    url = urlparse(target.split(" ", 1)[0])
    query = parse_qs(url.query)
    parts = unquote(url.path).lstrip("/").split("/", 2)  # account, container, blob
    if len(parts) < 2 or parts[1] != container:
        return False
    if query.get("comp") == ["list"]:
        return (query.get("prefix") or [""])[0].startswith(f"{prefix}/")
    if len(parts) == 2:
        return True
    return parts[2].startswith(f"{prefix}/")


@pytest.fixture
def recorded(emulators: dict[str, Bucket], monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple]:
    azure = emulators["azure"]
    with fault_proxy(emulator_port("azure", azure.env)) as proxy:
        for key, value in through("azure", azure.env, proxy).items():
            monkeypatch.setenv(key, value)
        yield azure, proxy


def _refused(proxy: FaultProxy, container: str, prefix: str) -> list[str]:
    return [
        f"{method} {target[:160]}"
        for method, target, _ in proxy.log
        if not _admitted(method, target, container, prefix)
    ]


def test_a_trainers_saves_loads_and_retention_stay_inside_its_prefix(recorded: tuple) -> None:
    azure, proxy = recorded
    container = urlparse(azure.url).netloc
    store = CheckpointStore(f"az://{container}/checkpoints/run-1", keep=1, part_bytes=4096)
    for step in (1, 2, 3):
        assert store.save(step, {"state": bytes([step]) * 10_000}).committed
    assert CheckpointStore(store.store.url).load_latest() is not None

    assert proxy.log, "nothing went through the proxy"
    assert _refused(proxy, container, "checkpoints") == []


def test_a_workers_results_stay_inside_its_prefix(recorded: tuple) -> None:
    azure, proxy = recorded
    container = urlparse(azure.url).netloc
    results = ResultStore(open_store(f"az://{container}/results"))
    assert results.put("item-1", b"answer")
    assert not results.put("item-1", b"again")
    assert results.exists("item-1") and results.get("item-1") == b"answer"

    assert proxy.log
    assert _refused(proxy, container, "results") == []


def test_the_judge_refuses_what_the_condition_refuses() -> None:
    container = "spotproof"
    assert not _admitted("GET", "/acct/spotproof?restype=container&comp=list", container, "a")
    assert not _admitted("GET", "/acct/spotproof/b/x", container, "a")
    assert not _admitted("GET", "/acct/spotproof?comp=list&prefix=ab/", container, "a")
    assert _admitted("GET", "/acct/spotproof?comp=list&prefix=a/x/", container, "a")
    assert _admitted("PUT", "/acct/spotproof/a/x.json", container, "a")
