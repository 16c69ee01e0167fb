"""The Kubernetes permissions a drill needs, checked before it reclaims anything: one
SelfSubjectAccessReview per verb of each request ``drill.access`` declares, and those
declarations the only way ``drill.target`` and ``drill.watch`` reach the API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from spotproof.catalog import Cloud
from spotproof.drill import access
from spotproof.drill.errors import GrantMissing
from spotproof.drill.kube_api import connect
from spotproof.drill.runner import run_drill
from spotproof.drill.subject import Subject
from tests.kube_replay import JOB, NAMESPACE, PATH, SCENARIOS, Replay
from tests.test_drill_end_to_end import FAST, ReplayedReclaim

DRILL = Path(access.__file__).parent


@pytest.fixture
def replay() -> Iterator[Replay]:
    server = Replay()
    yield server
    server.close()


def _drill(replay: Replay, tmp_path: Path) -> tuple[object, ReplayedReclaim]:
    scenario = SCENARIOS["gke"](replay)
    reclaim = ReplayedReclaim(replay, scenario)
    api = connect(str(replay.kubeconfig(tmp_path / "kubeconfig")))
    subject = Subject(Cloud.GKE, "Job", NAMESPACE, JOB)
    report = run_drill(subject, api, reclaim, FAST, progress=lambda _l: None, clock=replay.clock)
    return report, reclaim


def test_a_missing_permission_is_named_in_one_line_before_the_cloud_is_asked(
    replay: Replay, tmp_path: Path
) -> None:
    replay.denied |= {("get", "pods/log"), ("watch", "nodes")}

    with pytest.raises(GrantMissing) as missing:
        _drill(replay, tmp_path)

    line = str(missing.value)
    assert "\n" not in line
    assert line.startswith(
        f"the kubeconfig's user may not get pods/log in namespace {NAMESPACE}; "
        "watch nodes (cluster); a drill sends these while the node is reclaimed"
    )
    assert not any(path.startswith(f"/api/v1/namespaces/{NAMESPACE}/") for path in replay.requests)


def test_every_request_a_drill_sends_was_reviewed_first(replay: Replay, tmp_path: Path) -> None:
    report, _ = _drill(replay, tmp_path)

    assert report.passed, report.failures  # type: ignore[attr-defined]
    reviewed = {
        (r["verb"], r.get("group", ""), r["resource"], r.get("subresource", ""), r.get("namespace"))
        for r in replay.reviews
    }
    sent = {_authorized_as(path) for path in replay.requests if path.rstrip("/") != "/version"}
    assert sent, "the drill sent nothing"
    assert sent <= reviewed


def _authorized_as(path: str) -> tuple[str, str, str, str, str | None]:
    """How RBAC authorizes a GET the replay served: verb, group, resource, subresource,
    namespace (https://kubernetes.io/docs/reference/access-authn-authz/authorization/#determine-the-request-verb)."""
    url = urlparse(path)
    found = PATH.match(url.path)
    assert found is not None, path
    group = url.path.split("/")[2] if url.path.startswith("/apis/") else ""
    watching = parse_qs(url.query).get("watch") == ["true"]
    verb = "get" if found["name"] else "watch" if watching else "list"
    return verb, group, found["resource"], "log" if found["log"] else "", found["ns"]


@pytest.mark.parametrize("kind", ["Job", "JobSet"])
def test_a_drill_reviews_list_and_watch_of_what_it_streams_and_get_of_what_it_reads(
    kind: str,
) -> None:
    named = {
        request.names(verb, "ml") for request in access.requests_of(kind) for verb in request.verbs
    }
    workload = "jobs.batch" if kind == "Job" else "jobsets.jobset.x-k8s.io"
    assert named == {
        "list pods in namespace ml",
        "watch pods in namespace ml",
        "get pods/log in namespace ml",
        "get nodes (cluster)",
        "list nodes (cluster)",
        "watch nodes (cluster)",
        f"get {workload} in namespace ml",
        f"list {workload} in namespace ml",
        f"watch {workload} in namespace ml",
    }


def test_no_drill_module_but_access_makes_a_kubernetes_api_client_of_its_own() -> None:
    # What is not declared in drill.access is neither reviewed nor sent. VersionApi reads the
    # server's clock (GET /version, open to every client) before any review.
    making = re.compile(
        r"\bclient\.(?!VersionApi)[A-Za-z0-9]+Api\(|\b(CoreV1|BatchV1|CustomObjects)Api\b"
    )
    found = sorted(
        f"{path.relative_to(DRILL)}:{number}"
        for path in DRILL.rglob("*.py")
        if path.name != "access.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if making.search(line)
    )
    assert found == []
