"""``spotproof status`` against a fake API server (``tests/kube_replay.py``, serving static
objects) and a ``file://`` checkpoint store written by the runtime's own ``CheckpointStore``.

The cluster: a TrainingJob ``llm-train`` whose first pod was reclaimed on GKE spot
(``DisruptionTarget`` ``TerminationByKubelet``, exit 143, its node gone) and whose
replacement runs on another spot node; the smoke Job's pod Pending for ten minutes with the
scheduler's message; batch workers running on an on-demand Karpenter node. The API server's
clock is frozen at the replay's epoch, so every age is exact."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spotproof.runtime.checkpointer import checkpoint as checkpoint_module
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.runtime.checkpointer.layout import part_key
from spotproof.scheduling import POOL_CLASS_LABEL, TARGET_CLASS_LABEL
from spotproof.status.checkpoints import last_committed
from tests.kube_replay import (
    GKE_SPOT,
    NAMESPACE,
    SHUTDOWN,
    VERSION,
    Replay,
    finish,
    job,
    node,
    pod,
    set_condition,
)
from tests.support import run_cli

MANAGED = {"app.kubernetes.io/managed-by": "spotproof"}
UNSCHEDULABLE = (
    "0/5 nodes are available: 2 node(s) had untolerated taint {spotproof.dev/capacity: spot}, "
    "3 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are available: 5 No preemption "
    "victims found for incoming pod."
)


@pytest.fixture
def replay() -> Iterator[Replay]:
    server = Replay()
    yield server
    server.close()


def _commit(monkeypatch: pytest.MonkeyPatch, url: str, steps: dict[int, float]) -> CheckpointStore:
    """Commits each step at the given writer time, as the trainer does."""
    store = CheckpointStore(url, keep=5)
    for step, at in steps.items():
        clock = SimpleNamespace(time=lambda at=at: at, monotonic=lambda: 0.0, sleep=lambda _s: None)
        monkeypatch.setattr(checkpoint_module, "time", clock)
        assert store.save(step, {"model": b"w" * 64}).committed
    monkeypatch.undo()
    return store


def _workload_job(name: str, target: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    obj = job(name)
    obj["spec"]["backoffLimit"] = 3
    obj["metadata"]["labels"] = {**MANAGED, "app.kubernetes.io/component": "trainer"}
    template = obj["spec"]["template"]
    template["metadata"] = {"labels": {TARGET_CLASS_LABEL: target}}
    if env:
        template["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return obj


def _pod_of(replay: Replay, job_name: str, name: str, node_name: str | None, **kw: Any) -> dict:
    labels = {"batch.kubernetes.io/job-name": job_name, TARGET_CLASS_LABEL: kw.pop("target")}
    return pod(replay, name, node_name, grace=30, labels=labels, **kw)


def _cluster(replay: Replay, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The scenario of the module docstring; the stack's outputs."""
    spot = {**GKE_SPOT, POOL_CLASS_LABEL: "spot-gpu"}
    replay.put("nodes", node(replay, "gke-spot-b", spot, "gce://ml/us-central1-a/gke-spot-b"))
    on_demand = {
        "karpenter.sh/capacity-type": "on-demand",
        "karpenter.sh/nodepool": "gpu-on-demand",
        POOL_CLASS_LABEL: "on-demand-gpu",
    }
    replay.put("nodes", node(replay, "ip-10-0-1-7", on_demand, "aws:///us-east-1a/i-07"))

    trainer_url = (tmp_path / "ckpt" / "llm-train").as_uri()
    replay.put("jobs", _workload_job("llm-train", "spot-gpu", {"CHECKPOINT_URL": trainer_url}))
    # The reclaimed pod: DisruptionTarget by the kubelet's graceful shutdown, exit 143, on a
    # node deleted since; its replacement scheduled on another spot node and running.
    first = _pod_of(
        replay, "llm-train", "llm-train-x7k2p", "gke-spot-a",
        created=-3600, running=-3590, target="spot-gpu",
    )  # fmt: skip
    set_condition(
        replay, first, "DisruptionTarget", "True", -1260,
        reason="TerminationByKubelet", message=SHUTDOWN,
    )  # fmt: skip
    finish(replay, first, -1250, 143, reason="Terminated", message=SHUTDOWN)
    replay.put("pods", first)
    second = _pod_of(
        replay, "llm-train", "llm-train-q9m4z", "gke-spot-b",
        created=-1249, running=-1100, target="spot-gpu",
    )  # fmt: skip
    replay.put("pods", second)
    _commit(monkeypatch, trainer_url, {100: replay.epoch - 1800, 200: replay.epoch - 900})
    # A save of step 300 cut off before its manifest: payload only, never a checkpoint.
    CheckpointStore(trainer_url).store.put(part_key(300, "w-cut", "model", 0), b"w" * 64)

    replay.put("jobs", _workload_job("spotproof-smoke", "flex-start"))
    waiting = _pod_of(
        replay, "spotproof-smoke", "spotproof-smoke-d2v8c", None,
        created=-600, running=None, target="flex-start",
    )  # fmt: skip
    set_condition(
        replay, waiting, "PodScheduled", "False", -600,
        reason="Unschedulable", message=UNSCHEDULABLE,
    )  # fmt: skip
    replay.put("pods", waiting)
    smoke_url = (tmp_path / "ckpt" / "smoke").as_uri()
    _commit(monkeypatch, f"{smoke_url}/run-0123456789ab", {40: replay.epoch - 7200})

    labels = {"app.kubernetes.io/name": "batch", "app.kubernetes.io/component": "batch-worker"}
    replay.put(
        "deployments",
        {
            "metadata": {"name": "batch", "namespace": NAMESPACE, "labels": MANAGED},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": {**labels, TARGET_CLASS_LABEL: "on-demand-gpu"}}
                },
            },
            "status": {"replicas": 1, "readyReplicas": 1},
        },
    )
    worker = pod(
        replay, "batch-5f7d9-k2l4m", "ip-10-0-1-7", created=-300, running=-290, grace=30,
        labels={**labels, TARGET_CLASS_LABEL: "on-demand-gpu"},
    )  # fmt: skip
    worker["status"]["containerStatuses"][0]["restartCount"] = 2
    replay.put("pods", worker)
    return {
        "kubeconfig": replay.kubeconfig(tmp_path / "kubeconfig").read_text(),
        "checkpoint_url": smoke_url,
        "cluster_name": "ml-dev",
    }


def _outputs_file(tmp_path: Path, outputs: dict[str, str]) -> Path:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return path


def test_text_shows_each_workloads_pods_where_they_run_why_they_wait_and_reclaims(
    replay: Replay, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    outputs = _cluster(replay, monkeypatch, tmp_path)
    code, out, err = run_cli(capsys, "status", "--outputs", str(_outputs_file(tmp_path, outputs)))
    ckpt = (tmp_path / "ckpt").as_uri()
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"{replay.url} at {replay.stamp(0)}: 3 workload(s)"
    assert out.split("\n", 2)[2] == (
        "Deployment train/batch  target on-demand-gpu  1/1 ready  reclaims seen 0\n"
        "  POD                PHASE    NODE         POOL           CAPACITY   RESTARTS\n"
        "  batch-5f7d9-k2l4m  Running  ip-10-0-1-7  gpu-on-demand  on-demand  2\n"
        "\n"
        "Job train/llm-train  target spot-gpu  Active 1  reclaims seen 1  failed 0 of "
        "backoffLimit 3\n"
        f"  checkpoint  step 200, committed 15m00s ago ({ckpt}/llm-train)\n"
        "  POD              PHASE    NODE        POOL       CAPACITY  RESTARTS\n"
        "  llm-train-x7k2p  Failed   gke-spot-a  -          gone      0         "
        "reclaimed: TerminationByKubelet, exit 143\n"
        "  llm-train-q9m4z  Running  gke-spot-b  spot-a100  spot      0\n"
        "\n"
        "Job train/spotproof-smoke  target flex-start  Active 1  reclaims seen 0  failed 0 of "
        "backoffLimit 3\n"
        f"  checkpoint  step 40, committed 2h00m ago ({ckpt}/smoke/run-0123456789ab)\n"
        "  POD                    PHASE    NODE  POOL  CAPACITY  RESTARTS\n"
        f"  spotproof-smoke-d2v8c  Pending  -     -     -         0         "
        f"waiting 10m00s: Unschedulable: {UNSCHEDULABLE}\n"
    )


def test_json_carries_the_same_facts_with_times_on_the_api_servers_clock(
    replay: Replay, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    outputs = _cluster(replay, monkeypatch, tmp_path)
    code, out, _ = run_cli(
        capsys, "status", "--outputs", str(_outputs_file(tmp_path, outputs)), "--format", "json"
    )
    report = json.loads(out)
    assert code == 0
    assert report["now"] == replay.stamp(0)
    trainer = next(w for w in report["workloads"] if w["name"] == "llm-train")
    assert trainer["reclaims"] == 1
    assert trainer["budget"] == {
        "counted": 0, "limit": 3, "field": "status.failed", "limit_field": "spec.backoffLimit",
        "restarts": None,
    }  # fmt: skip
    assert trainer["checkpoint"] == {
        "url": f"{(tmp_path / 'ckpt' / 'llm-train').as_uri()}",
        "step": 200,
        "committed_at": replay.stamp(-900),
        "age_seconds": 900,
        "error": "",
    }
    reclaimed, running = trainer["pods"]
    assert reclaimed["reclaim"] == {
        "reason": "TerminationByKubelet",
        "message": SHUTDOWN,
        "exit_code": 143,
        "at": replay.stamp(-1260),
    }
    assert reclaimed["placement"] == {
        "node": "gke-spot-a", "pool": "", "pool_class": "", "capacity": "gone",
    }  # fmt: skip
    assert running["placement"] == {
        "node": "gke-spot-b", "pool": "spot-a100", "pool_class": "spot-gpu", "capacity": "spot",
    }  # fmt: skip
    assert (running["phase"], running["reclaim"], running["waiting"]) == ("Running", None, None)
    smoke = next(w for w in report["workloads"] if w["name"] == "spotproof-smoke")
    assert smoke["pods"][0]["waiting"] == {
        "seconds": 600,
        "reason": "Unschedulable",
        "message": UNSCHEDULABLE,
    }
    assert smoke["target_class"] == "flex-start"


def test_payload_without_a_manifest_is_not_a_checkpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = (tmp_path / "run").as_uri()
    store = _commit(monkeypatch, url, {10: 1_000.0})
    store.store.put(part_key(20, "w-cut", "model", 0), b"w" * 64)
    found = last_committed(url, now=1_060.0)
    assert (found.step, found.committed_at, found.age_seconds) == (10, 1_000.0, 60.0)


def test_an_empty_store_says_none_committed(tmp_path: Path) -> None:
    found = last_committed((tmp_path / "empty").as_uri(), now=0.0)
    assert (found.step, found.error) == (None, "")


def test_a_store_it_cannot_read_is_reported_and_the_cluster_still_shown(
    replay: Replay, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    outputs = _cluster(replay, monkeypatch, tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    outputs["checkpoint_url"] = blocker.as_uri()
    code, out, _ = run_cli(capsys, "status", "--outputs", str(_outputs_file(tmp_path, outputs)))
    assert code == 0
    assert (
        f"  checkpoint  not read: StorageURLError: {blocker} is no directory, where the store "
        "keeps a folder of its objects"
    ) in out


def _fake_pulumi(tmp_path: Path, body: str) -> Path:
    """A ``pulumi`` on PATH that records its arguments and runs ``body`` (sh)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "pulumi"
    script.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/pulumi-args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def test_stack_outputs_come_from_the_pulumi_cli(
    replay: Replay, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    outputs = _outputs_file(tmp_path, _cluster(replay, monkeypatch, tmp_path))
    folder = _fake_pulumi(tmp_path, f'cat "{outputs}"')
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    code, out, err = run_cli(capsys, "status", "--stack", "gke-dev", "--format", "json")
    assert (code, err) == (0, "")
    assert (tmp_path / "pulumi-args").read_text().split() == [
        "stack", "output", "--json", "--show-secrets", "--stack", "gke-dev",
    ]  # fmt: skip
    report = json.loads(out)
    assert report["stack"] == "gke-dev"
    assert [w["name"] for w in report["workloads"]] == ["batch", "llm-train", "spotproof-smoke"]


def test_kubeconfig_flag_needs_no_outputs_and_reads_no_store(
    replay: Replay, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    _cluster(replay, monkeypatch, tmp_path)
    kubeconfig = str(tmp_path / "kubeconfig")
    code, out, _ = run_cli(
        capsys, "status", "--kubeconfig", kubeconfig, "--context", "replay", "--format", "json"
    )
    smoke = next(w for w in json.loads(out)["workloads"] if w["name"] == "spotproof-smoke")
    assert (code, smoke["checkpoint"]) == (0, None)


def test_a_queued_job_shows_what_kueue_and_the_provisioning_request_wait_for(
    replay: Replay, tmp_path: Path, capsys: Any
) -> None:
    queued = _workload_job("llm-queued", "flex-start")
    queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "dws"
    queued["spec"]["suspend"] = True
    replay.put("jobs", queued)
    message = "Waiting for resources. Currently there are not enough resources available."
    replay.put(
        "workloads",
        {
            "metadata": {
                "name": "job-llm-queued-3c1f0",
                "namespace": NAMESPACE,
                "labels": {"kueue.x-k8s.io/job-uid": "c1"},
            },
            "status": {
                "conditions": [
                    {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                    {"type": "Admitted", "status": "False", "reason": "Pending"},
                ],
                "admissionChecks": [{"name": "dws-prov", "state": "Pending", "message": message}],
            },
        },
    )
    kubeconfig = str(replay.kubeconfig(tmp_path / "kubeconfig"))
    code, out, _ = run_cli(capsys, "status", "--kubeconfig", kubeconfig)
    assert code == 0
    assert (
        "  queue       dws, suspended until admitted; QuotaReserved=True (QuotaReserved); "
        f"Admitted=False (Pending); check dws-prov Pending ({message})\n  no pods\n"
    ) in out
    assert "Job train/llm-queued  target flex-start  Suspended  reclaims seen 0" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), "nothing names the cluster; allowed: --stack NAME, --outputs FILE or --kubeconfig"),
        (("--outputs", "{missing}"), "--outputs {missing}: cannot read: No such file or directory"),
        (("--outputs", "{empty}"), "stack cluster exports no kubeconfig; allowed: pass"),
        (("--kubeconfig", "{garbage}"), "--kubeconfig {garbage}:2: not valid YAML"),
        (("--kubeconfig", "{closed}"), "the API server at http://127.0.0.1:9 did not answer"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: Any, argv: tuple[str, ...], expected: str
) -> None:
    files = {
        "missing": tmp_path / "none.json",
        "empty": tmp_path / "empty.json",
        "garbage": tmp_path / "garbage",
        "closed": tmp_path / "closed",
    }
    files["empty"].write_text("{}")
    files["garbage"].write_text("clusters: [")
    closed = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "c", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
    }  # fmt: skip
    files["closed"].write_text(json.dumps(closed))
    named = {k: str(v) for k, v in files.items()}
    code, out, err = run_cli(capsys, "status", *(a.format(**named) for a in argv))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(f"spotproof status: {expected.format(**named)}")


class _OddApiServer(BaseHTTPRequestHandler):
    """An API server that answers ``/version`` without a ``Date`` header when the path
    says so, and every list with a 200 that is not JSON (a proxy's login page)."""

    without_date = False

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/version":
            body = json.dumps(VERSION).encode()
            content_type = "application/json"
        else:
            body = b"<html><body>Sign in to continue</body></html>"
            content_type = "text/html"
        if self.without_date:
            self.send_response_only(200)  # no Server, no Date
        else:
            self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(params=[True, False], ids=["no-date-header", "html-lists"])
def odd_api_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A kubeconfig for :class:`_OddApiServer`, and the start of the line status prints."""
    handler = type("Handler", (_OddApiServer,), {"without_date": request.param})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "c", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
    }  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    expected = (
        f"the API server at {url} answered without a valid Date header (None)"
        if request.param
        else "listing "
    )
    try:
        yield kubeconfig, expected
    finally:
        server.shutdown()
        server.server_close()


def test_an_api_server_answering_oddly_is_one_line_and_exit_2(
    odd_api_server: tuple[Path, str], capsys: Any
) -> None:
    kubeconfig, expected = odd_api_server
    code, out, err = run_cli(capsys, "status", "--kubeconfig", str(kubeconfig))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(f"spotproof status: {expected}")
    if expected == "listing ":
        assert "not JSON (Expecting value at line 1); is the kubeconfig's server the" in err


def test_a_queued_job_is_explained_by_its_newest_workload(
    replay: Replay, tmp_path: Path, capsys: Any
) -> None:
    queued = _workload_job("llm-queued", "flex-start")
    queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "dws"
    queued["spec"]["suspend"] = True
    replay.put("jobs", queued)
    # The newer Workload is listed first: the older one, about to be deleted, comes last.
    for name, created, reason in (
        ("job-llm-queued-b", "2026-09-10T10:00:00Z", "WaitingForQuota"),
        ("job-llm-queued-a", "2026-09-10T09:00:00Z", "NoMatchingFlavor"),
    ):
        replay.put(
            "workloads",
            {
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "creationTimestamp": created,
                    "labels": {"kueue.x-k8s.io/job-uid": "c1"},
                },
                "status": {
                    "conditions": [{"type": "QuotaReserved", "status": "False", "reason": reason}]
                },
            },
        )
    kubeconfig = str(replay.kubeconfig(tmp_path / "kubeconfig"))
    code, out, _ = run_cli(capsys, "status", "--kubeconfig", kubeconfig)
    assert code == 0
    assert "QuotaReserved=False (WaitingForQuota)" in out
    assert "NoMatchingFlavor" not in out


def test_a_stack_whose_outputs_cannot_be_read_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    folder = _fake_pulumi(tmp_path, "echo \"error: no stack named 'gke-prod' found\" >&2; exit 255")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    code, out, err = run_cli(capsys, "status", "--stack", "gke-prod")
    assert (code, out) == (2, "")
    assert err == (
        "spotproof status: pulumi stack output --stack gke-prod failed: "
        "error: no stack named 'gke-prod' found\n"
    )


def test_a_gang_shows_its_ranks_and_the_restarts_its_jobset_counted(
    replay: Replay, tmp_path: Path, capsys: Any
) -> None:
    spot = {**GKE_SPOT, POOL_CLASS_LABEL: "spot-gpu"}
    for name in ("gke-spot-c", "gke-spot-d"):
        replay.put("nodes", node(replay, name, spot, f"gce://ml/us-central1-a/{name}"))
    template = {"metadata": {"labels": {TARGET_CLASS_LABEL: "spot-gpu"}}, "spec": {}}
    replay.put(
        "jobsets",
        {
            "metadata": {
                "name": "llm-gang",
                "namespace": NAMESPACE,
                "uid": "g1",
                "labels": MANAGED,
            },
            "spec": {
                "failurePolicy": {"maxRestarts": 3},
                "replicatedJobs": [
                    {"name": "node", "replicas": 2, "template": {"spec": {"template": template}}}
                ],
            },
            "status": {"restarts": 2, "restartsCountTowardsMax": 0},
        },
    )
    # The child Job is the JobSet's, labelled as spotproof's: not a workload of its own.
    child = _workload_job("llm-gang-node-0", "spot-gpu")
    child["metadata"]["ownerReferences"] = [{"kind": "JobSet", "name": "llm-gang", "uid": "g1"}]
    replay.put("jobs", child)
    for rank, name in enumerate(("gke-spot-c", "gke-spot-d")):
        labels = {"jobset.sigs.k8s.io/jobset-name": "llm-gang", TARGET_CLASS_LABEL: "spot-gpu"}
        replay.put(
            "pods",
            pod(replay, f"llm-gang-node-{rank}-0-abc{rank}", name, created=-60 + rank,
                running=-50, grace=30, labels=labels),
        )  # fmt: skip
    kubeconfig = str(replay.kubeconfig(tmp_path / "kubeconfig"))
    code, out, _ = run_cli(capsys, "status", "--kubeconfig", kubeconfig)
    assert code == 0
    assert out.split("\n", 2)[2] == (
        "JobSet train/llm-gang  target spot-gpu  Running  reclaims seen 0  restarts 2  "
        "restartsCountTowardsMax 0 of maxRestarts 3\n"
        "  POD                     PHASE    NODE        POOL       CAPACITY  RESTARTS\n"
        "  llm-gang-node-0-0-abc0  Running  gke-spot-c  spot-a100  spot      0\n"
        "  llm-gang-node-1-0-abc1  Running  gke-spot-d  spot-a100  spot      0\n"
    )
