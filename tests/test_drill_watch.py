"""The Kubernetes side of ``spotproof drill``, against a fake API server replaying each
documented reclaim path (``tests/kube_replay.py`` cites them) through the real client."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotproof.drill.errors import DrillError, DrillRefused, StageTimedOut
from spotproof.drill.kube_api import connect
from spotproof.drill.target import find_target
from spotproof.drill.timeline import Event, Mark, Timeline
from spotproof.drill.watch import ClusterWatch
from tests import kube_replay as replay_
from tests.kube_replay import JOB, NAMESPACE, SCENARIOS, Replay, Scenario

RUN_SECONDS = 20.0
"""Bound on one replayed run (each takes about 1.5 s at the replay's scale)."""


@pytest.fixture
def replay(tmp_path: Path) -> Iterator[Replay]:
    server = Replay()
    server.kubeconfig(tmp_path / "kubeconfig")
    yield server
    server.close()


def _api(replay: Replay, tmp_path: Path) -> Any:
    return connect(str(replay.kubeconfig(tmp_path / "kubeconfig")))


def _watch(replay: Replay, tmp_path: Path, timeline: Timeline, **options: Any) -> ClusterWatch:
    options = {"window": 5, "idle": 5.0, "clock": replay.clock, **options}
    return ClusterWatch(_api(replay, tmp_path), timeline, NAMESPACE, "Job", JOB, **options)


def _replayed(
    replay: Replay, tmp_path: Path, name: str, **extra: Any
) -> tuple[Scenario, Timeline, ClusterWatch]:
    """Runs scenario ``name`` to the Job's completion under a ClusterWatch."""
    scenario = SCENARIOS[name](replay)
    for at, step in extra.get("steps", []):
        scenario.steps.append((at, step))
    timeline = Timeline(origin=replay.epoch)
    watch = _watch(replay, tmp_path, timeline).start()
    try:
        replay.play(scenario.steps)
        watch.until(
            lambda t: watch.outcome is not None and bool(t.of(Mark.DONE)),
            RUN_SECONDS,
            "the run to complete",
        )
        watch.until(lambda t: len(t.of(Mark.POD_ENDED)) >= 2, RUN_SECONDS, "both pods to end")
    finally:
        watch.stop()
    return scenario, timeline, watch


def _in_order(timeline: Timeline, *expected: tuple[Mark, str, dict[str, Any]]) -> list[Event]:
    """The first event of each ``(mark, pod, detail)`` in turn, each no earlier than the one
    before; fails naming the first one missing."""
    found, since = [], float("-inf")
    for mark, pod, detail in expected:
        match = [
            e
            for e in timeline.ordered()
            if e.mark is mark
            and (not pod or e.pod == pod)
            and e.at >= since
            and all(e.detail.get(k) == v for k, v in detail.items())
        ]
        assert match, f"no {mark.value} {pod} {detail} at or after {since} in:\n" + "\n".join(
            map(str, timeline.ordered())
        )
        found.append(match[0])
        since = match[0].at
    return found


def _marks_of(timeline: Timeline, pod: str) -> list[Mark]:
    return [e.mark for e in timeline.ordered() if e.pod == pod]


# --- target ---------------------------------------------------------------------------------


def test_target_finds_the_pod_on_the_spot_node_and_its_provider_id(
    replay: Replay, tmp_path: Path
) -> None:
    scenario = SCENARIOS["gke"](replay)
    target = find_target(_api(replay, tmp_path), NAMESPACE, "Job", JOB, timeout=5)
    assert (target.pod, target.node) == (scenario.original, scenario.reclaimed)
    assert target.provider_id == f"gce://ml-proj/us-central1-a/{scenario.reclaimed}"
    assert (target.pool, target.spot) == ("spot-a100", "cloud.google.com/gke-spot=true")
    assert (target.container, target.grace_seconds) == ("trainer", 25)
    assert target.env == {"CHECKPOINT_URL": "gs://ckpt/llm-train", "GRACE_SECONDS": "25"}
    assert target.nodes == target.ranks and len(target.nodes) == 1


def test_target_refuses_a_pod_on_an_on_demand_node_in_one_line(
    replay: Replay, tmp_path: Path
) -> None:
    labels = {"eks.amazonaws.com/capacityType": "ON_DEMAND", "eks.amazonaws.com/nodegroup": "gpu"}
    replay.put(
        "nodes", replay_.node(replay, "ip-10-0-1-5.ec2.internal", labels, "aws:///us-east-1a/i-0aa")
    )
    replay.put("jobs", replay_.job())
    replay.put(
        "pods",
        replay_.pod(
            replay, "llm-train-od", "ip-10-0-1-5.ec2.internal", created=-9, running=-8, grace=30
        ),
    )
    started = time.monotonic()
    with pytest.raises(DrillRefused) as refused:
        # A running pod does not move: refused at once, not when the wait ends.
        find_target(_api(replay, tmp_path), NAMESPACE, "Job", JOB, timeout=60)
    message = str(refused.value)
    assert "\n" not in message
    assert (
        "ip-10-0-1-5.ec2.internal" in message
        and "eks.amazonaws.com/capacityType=ON_DEMAND" in message
    )
    assert time.monotonic() - started < 3


def test_target_waits_on_the_watch_until_the_pod_runs(replay: Replay, tmp_path: Path) -> None:
    replay.put("nodes", replay_.gke_node(replay, "gke-ml-spot-a100-1"))
    replay.put("jobs", replay_.job())
    replay.put("pods", replay_.pod(replay, "llm-train-p", None, created=-1, running=None, grace=25))

    def runs(r: Replay) -> None:
        def edit(obj: dict[str, Any]) -> None:
            replay_.schedule(r, obj, "gke-ml-spot-a100-1", 20)
            replay_.run(r, obj, 20)

        r.change("pods", "llm-train-p", edit, at=20)

    replay.play([(20, runs)])
    target = find_target(_api(replay, tmp_path), NAMESPACE, "Job", JOB, timeout=5)
    assert (target.pod, target.node) == ("llm-train-p", "gke-ml-spot-a100-1")


def test_target_times_out_when_no_pod_of_the_workload_runs(replay: Replay, tmp_path: Path) -> None:
    replay.put("jobs", replay_.job())
    with pytest.raises(
        StageTimedOut,
        match=r"^target: Job train/llm-train not running .* \(0 of 1 pod\(s\) Running\)$",
    ):
        find_target(_api(replay, tmp_path), NAMESPACE, "Job", JOB, timeout=0.3)


def _gang(replay: Replay) -> None:
    workers = {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 1}}}
    spec = {"replicatedJobs": [workers]}
    replay.put("jobsets", {"metadata": {"name": "gang", "namespace": NAMESPACE}, "spec": spec})
    for rank in (1, 0):
        name = f"ip-10-0-0-{rank}.ec2.internal"
        replay.put("nodes", replay_.karpenter_node(replay, name, f"i-0{rank}"))
        labels = {
            "jobset.sigs.k8s.io/jobset-name": "gang",
            "jobset.sigs.k8s.io/job-global-index": str(rank),
        }
        replay.put(
            "pods",
            replay_.pod(
                replay,
                f"gang-workers-{rank}-x",
                name,
                created=-9,
                running=-8,
                grace=60,
                labels=labels,
            ),
        )


def test_target_of_a_gang_takes_every_distinct_node_with_ranks_all(
    replay: Replay, tmp_path: Path
) -> None:
    _gang(replay)
    target = find_target(
        _api(replay, tmp_path), NAMESPACE, "JobSet", "gang", ranks="all", timeout=5
    )
    assert [(r.pod, r.node) for r in target.nodes] == [
        ("gang-workers-0-x", "ip-10-0-0-0.ec2.internal"),
        ("gang-workers-1-x", "ip-10-0-0-1.ec2.internal"),
    ]
    assert all(r.provider_id.startswith("aws:///us-east-1a/i-0") for r in target.nodes)


def test_target_of_a_gang_takes_rank_zero_alone_with_ranks_one(
    replay: Replay, tmp_path: Path
) -> None:
    _gang(replay)
    target = find_target(
        _api(replay, tmp_path), NAMESPACE, "JobSet", "gang", ranks="one", timeout=5
    )
    assert [r.pod for r in target.nodes] == ["gang-workers-0-x"]
    assert len(target.ranks) == 2


def test_a_jobsets_restarts_counted_against_max_restarts_are_marked(
    replay: Replay, tmp_path: Path
) -> None:
    _gang(replay)

    def restarted(counted: int, at: float) -> Any:
        def edit(obj: dict[str, Any]) -> None:
            obj["status"] = {"restarts": 2, "restartsCountTowardsMax": counted}
            if counted:
                replay_.set_condition(replay, obj, "Completed", "True", at)

        fields = {"f:status": {"f:restarts": {}, "f:restartsCountTowardsMax": {}}}
        return at, lambda r: r.change(
            "jobsets", "gang", edit, at=at, manager="jobset", fields=fields
        )

    timeline = Timeline(origin=replay.epoch)
    api = _api(replay, tmp_path)
    watch = ClusterWatch(api, timeline, NAMESPACE, "JobSet", "gang", window=5, clock=replay.clock)
    watch.start()
    try:
        replay.play(
            [restarted(0, 10), restarted(1, 20)]
        )  # a reclaim's restart is free, a crash's is not
        watch.until(lambda t: watch.outcome == "Completed", RUN_SECONDS, "the JobSet to complete")
    finally:
        watch.stop()
    assert [(e.at, dict(e.detail)) for e in timeline.of(Mark.COUNTED)] == [
        (20, {"failed": 1, "counter": "restartsCountTowardsMax"})
    ]


# --- the replayed paths ---------------------------------------------------------------------


def test_gke_graceful_shutdown_records_the_kubelets_termination_and_a_resume_at_the_final_step(
    replay: Replay, tmp_path: Path
) -> None:
    scenario, timeline, _ = _replayed(replay, tmp_path, "gke")
    old, new = scenario.original, scenario.replacement
    found = _in_order(
        timeline,
        (Mark.NODE_NOTICE, old, {"how": "shutdown (Ready=False)"}),
        (Mark.DISRUPTION_TARGET, old, {"reason": "TerminationByKubelet"}),
        (Mark.SIGTERM, old, {"step": 437}),
        (Mark.CHECKPOINT, old, {"kind": "final", "step": 437}),
        (Mark.POD_ENDED, old, {"phase": "Failed", "exit_code": 143}),
        (Mark.NODE_GONE, old, {}),
        (Mark.POD_SCHEDULED, new, {"pool": "spot-a100", "pending": 55}),
        (Mark.RESUMED, new, {"step": 437}),
        (Mark.DONE, new, {"step": 600}),
    )
    assert [e.at for e in found[:2]] == [1, 1]  # the API server's own times, on the script's scale
    assert "DisruptionTarget" in found[4].detail["conditions"]
    assert found[6].node == "gke-ml-spot-a100-5f1c2d3e-q9p4"
    assert Mark.POD_DELETING not in _marks_of(
        timeline, old
    )  # the kubelet fails it, deletes nothing
    assert len(timeline.of(Mark.NODE_NOTICE)) == 1  # the not-ready taint that follows is no notice
    assert not timeline.of(Mark.COUNTED)


def test_karpenter_drain_records_the_taint_the_eviction_and_its_grace(
    replay: Replay, tmp_path: Path
) -> None:
    scenario, timeline, _ = _replayed(replay, tmp_path, "karpenter")
    old, new = scenario.original, scenario.replacement
    found = _in_order(
        timeline,
        (Mark.NODE_NOTICE, old, {"how": "node deleting"}),
        (Mark.NODE_NOTICE, old, {"how": "taint karpenter.sh/disrupted:NoSchedule"}),
        (Mark.DISRUPTION_TARGET, old, {"reason": "EvictionByEvictionAPI"}),
        (Mark.POD_DELETING, old, {"grace": 60}),
        (Mark.SIGTERM, old, {"step": 437}),
        (Mark.CHECKPOINT, old, {"kind": "final"}),
        (Mark.POD_ENDED, old, {"phase": "Failed", "exit_code": 143}),
        (Mark.NODE_GONE, old, {}),
        (Mark.POD_SCHEDULED, new, {"pool": "gpu-spot", "pending": 33}),
        (Mark.RESUMED, new, {"step": 437}),
        (Mark.DONE, new, {}),
    )
    assert [e.at for e in found[:4]] == [2, 3, 4, 4]  # the deletion request, not deletionTimestamp
    assert not timeline.of(Mark.COUNTED)


def test_karpenter_delete_at_termination_grace_period_has_no_disruption_target_and_is_counted(
    replay: Replay, tmp_path: Path
) -> None:
    scenario, timeline, _ = _replayed(replay, tmp_path, "karpenter-tgp")
    old, new = scenario.original, scenario.replacement
    found = _in_order(
        timeline,
        (Mark.NODE_NOTICE, old, {"how": "taint karpenter.sh/disrupted:NoSchedule"}),
        (Mark.POD_DELETING, old, {"grace": 60}),
        (Mark.SIGTERM, old, {"step": 437}),
        (Mark.POD_ENDED, old, {"exit_code": 143, "conditions": ["PodScheduled", "Initialized"]}),
        (Mark.COUNTED, "", {"failed": 1}),
        (Mark.RESUMED, new, {"step": 437}),
    )
    assert (
        found[1].at == 32
    )  # 90 s of terminationGracePeriod less the pod's 60, after the notice at 2
    assert not timeline.of(Mark.DISRUPTION_TARGET)
    assert found[4].at == 50  # the Job's managedFields time of status.failed


def test_aks_auto_drain_records_the_cordon_the_remediator_taint_and_the_eviction(
    replay: Replay, tmp_path: Path
) -> None:
    scenario, timeline, _ = _replayed(replay, tmp_path, "aks")
    old, new = scenario.original, scenario.replacement
    notices = {e.detail["how"]: e.at for e in timeline.of(Mark.NODE_NOTICE)}
    assert notices == {
        "cordoned (spec.unschedulable)": 2,
        "taint remediator.kubernetes.azure.com/unschedulable:NoSchedule": 2,
    }  # the spot taint the node always had is no notice
    _in_order(
        timeline,
        (Mark.DISRUPTION_TARGET, old, {"reason": "EvictionByEvictionAPI"}),
        (Mark.POD_DELETING, old, {"grace": 25}),
        (Mark.SIGTERM, old, {}),
        (Mark.CHECKPOINT, old, {"kind": "final"}),
        (Mark.POD_ENDED, old, {"exit_code": 143}),
        (Mark.NODE_GONE, old, {}),
        (Mark.POD_SCHEDULED, new, {"pool": "spotgpu", "pending": 66}),
        (Mark.RESUMED, new, {"step": 437}),
        (Mark.DONE, new, {}),
    )


def test_a_vanished_node_leaves_no_sigterm_and_a_pod_gc_end_without_exit_code(
    replay: Replay, tmp_path: Path
) -> None:
    scenario, timeline, _ = _replayed(replay, tmp_path, "vanished")
    old, new = scenario.original, scenario.replacement
    found = _in_order(
        timeline,
        (Mark.NODE_GONE, old, {}),
        (Mark.DISRUPTION_TARGET, old, {"reason": "DeletionByPodGC"}),
        (Mark.POD_ENDED, old, {"phase": "Failed", "exit_code": None}),
        (Mark.POD_CREATED, new, {}),
        (Mark.RESUMED, new, {"step": 400}),
    )
    assert found[1].at == found[2].at == 85
    assert not timeline.of(Mark.NODE_NOTICE) and not timeline.of(Mark.SIGTERM)
    assert Mark.POD_DELETING not in _marks_of(timeline, old)  # the collector's delete came after


def test_lines_logged_before_the_watch_began_are_not_marks(replay: Replay, tmp_path: Path) -> None:
    _, timeline, _ = _replayed(replay, tmp_path, "gke")
    assert [e.detail["step"] for e in timeline.of(Mark.RESUMED)] == [437]  # not the old pod's 0
    assert all(e.at >= 0 for e in timeline.events)


def test_a_410_gone_on_a_watch_is_recovered_by_listing_again(
    replay: Replay, tmp_path: Path
) -> None:
    expire = (3.5, lambda r: r.expire())
    scenario, timeline, watch = _replayed(replay, tmp_path, "karpenter", steps=[expire])
    assert watch.relists >= 3  # pods, the node, the Job
    assert sum(1 for p in replay.requests if "watch=true" in p and "resourceVersion" in p) >= 6
    old = scenario.original
    assert _marks_of(timeline, old).count(Mark.DISRUPTION_TARGET) == 1
    assert _marks_of(timeline, old).count(Mark.POD_ENDED) == 1
    assert len(timeline.of(Mark.NODE_NOTICE)) == 2
    _in_order(timeline, (Mark.DISRUPTION_TARGET, old, {}), (Mark.RESUMED, scenario.replacement, {}))


# --- bounds ---------------------------------------------------------------------------------


def _running_watch(replay: Replay, tmp_path: Path) -> ClusterWatch:
    SCENARIOS["gke"](replay)
    watch = _watch(replay, tmp_path, Timeline(origin=replay.epoch), window=60, idle=60).start()
    deadline = time.monotonic() + 5
    while not any(t.name.startswith("drill-watch-log") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "no log follower started"
        time.sleep(0.01)
    return watch


def test_stop_ends_every_thread_promptly(replay: Replay, tmp_path: Path) -> None:
    watch = _running_watch(replay, tmp_path)
    names = {t.name for t in threading.enumerate() if t.name.startswith("drill-watch-")}
    assert {"drill-watch-pods", "drill-watch-status", "drill-watch-log-llm-train-x7k2p"} <= names
    assert any(n.startswith("drill-watch-node-") for n in names)
    started = time.monotonic()
    watch.stop()
    assert time.monotonic() - started < 1.0  # not the 60 s of a watch window or a log's idle
    assert not [t.name for t in threading.enumerate() if t.name.startswith("drill-watch-")]


def test_until_times_out_naming_what_it_awaited(replay: Replay, tmp_path: Path) -> None:
    watch = _running_watch(replay, tmp_path)
    try:
        with pytest.raises(StageTimedOut, match=r"^reclaim 1: the pod to end: not within 0.2 s$"):
            watch.until(lambda t: bool(t.of(Mark.POD_ENDED)), 0.2, "reclaim 1: the pod to end")
    finally:
        watch.stop()


def test_a_watch_it_may_not_read_fails_the_drill_in_one_line(
    replay: Replay, tmp_path: Path
) -> None:
    SCENARIOS["gke"](replay)
    replay.forbidden.add("jobs")
    watch = _watch(replay, tmp_path, Timeline(origin=replay.epoch))
    failed = r"^watching Job train/llm-train failed: drill-watch-status: list_namespaced_job: 403 "
    with pytest.raises(DrillError, match=failed):
        watch.start()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("drill-watch-")]
