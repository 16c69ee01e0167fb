"""The cluster's side of a drill, written into a ``timeline.Timeline`` as it happens.

``ClusterWatch`` lists, then watches (``kube_api.stream``) the workload's pods, each node one
runs on, and the Job's (JobSet's) status, each in a thread, and follows each trainer's log.
A mark takes the API server's time where there is one (``lastTransitionTime``, ``finishedAt``,
``deletionTimestamp``, a taint writer's ``managedFields`` time), the kubelet's for a log line
(``timestamps=True``), and this machine's only where there is none (a node's deletion).

What the paths show (each replayed by ``tests/kube_replay.py``):
- notice: Karpenter deletes the node behind its finalizer and taints it
  ``karpenter.sh/disrupted:NoSchedule`` (kubernetes-sigs/karpenter@v1.14.1
  ``pkg/apis/v1/taints.go``, ``pkg/controllers/node/termination/controller.go``); AKS node
  auto-drain cordons, and may taint ``remediator.kubernetes.azure.com/unschedulable``
  (MicrosoftDocs/azure-aks-docs ``articles/aks/node-auto-drain.md``); graceful node shutdown
  (GKE spot) sets ``Ready`` False "node is shutting down"
  (https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/); the GCP and AWS
  node termination handlers taint too;
- ``DisruptionTarget``: https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions;
  ``DeletionByPodGC`` (kubernetes/kubernetes ``pkg/controller/podgc/gc_controller.go``) fails
  a pod with no exit code; Karpenter's delete at ``terminationGracePeriod`` adds none
  (``terminator.go`` ``DeleteExpiringPods``); ``deletionTimestamp`` is the request's time plus
  ``deletionGracePeriodSeconds`` (ObjectMeta: "the time at which this resource will be deleted").
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from spotproof.catalog import jobset as jobset_facts
from spotproof.drill import access, kube_api, log_events
from spotproof.drill import target as kube
from spotproof.drill.errors import DrillError, StageTimedOut
from spotproof.drill.timeline import Mark, Timeline
from spotproof.runtime.messages import first_line

FINISHED = {"Job": ("Complete", "Failed"), jobset_facts.KIND: ("Completed", "Failed")}
COUNTER = {"Job": "failed", jobset_facts.KIND: "restartsCountTowardsMax"}
"""Counted against ``backoffLimit`` (not what ``podFailurePolicy`` ignores), ``maxRestarts``."""


@dataclass
class _Pod:
    original: bool  # running when the watch began: its log before then is not this drill's
    obj: dict[str, Any]
    node: str = ""
    marked: set[Mark] = field(default_factory=set)
    last_line: float = 0.0
    container: str = ""
    log: str = ""  # "following" while its log is read, "read" after
    ending: bool = False  # ended: POD_ENDED waits for its log to be read to the end (_end)
    speaks_json: bool = False  # its log has JSON events: read from those alone (log_events)


class ClusterWatch:
    """Watches one workload from :meth:`start` to :meth:`stop` (call it in a ``finally``:
    Ctrl-C then leaves no thread behind); :meth:`until` waits, bounded, for the timeline."""

    def __init__(
        self,
        api: client.ApiClient,
        timeline: Timeline,
        namespace: str,
        kind: str,
        name: str,
        *,
        container: str | None = None,
        window: int = 300,
        idle: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api, self.timeline = api, timeline
        self.namespace, self.kind, self.name = namespace, kind, name
        self.container, self.window, self.idle, self.clock = container, window, idle, clock
        self.outcome: str | None = None  # Complete (a JobSet's Completed) or Failed
        self.relists = 0  # lists after a stream's first one: each follows a 410 Gone
        self._pods: dict[str, _Pod] = {}
        self._nodes: dict[str, str] = {}  # watched now, each with the workload's pod on it
        self._pools: dict[str, str] = {}
        self._threads: list[tuple[threading.Thread, threading.Event]] = []
        self._lock = threading.Condition()
        self._cancel = kube_api.Cancel()
        self._failure = ""
        self._started = 0.0
        self._workload, self._selector = f"{kind} {namespace}/{name}", kube.selector(kind, name)

    def start(self, ready_seconds: float = 60.0) -> ClusterWatch:
        """Starts the watches; returns once each has listed what is there now (the baseline
        a notice is told from), so that a reclaim requested next is seen whole."""
        self._started = self.clock()
        self._spawn("pods", self._watch_pods)
        self._spawn("status", self._watch_status)
        deadline = time.monotonic() + ready_seconds
        while waiting := [ready for _, ready in list(self._threads) if not ready.is_set()]:
            if not waiting[0].wait(max(0.0, deadline - time.monotonic())):
                self.stop()
                raise StageTimedOut(f"watch: no listing of {self._workload} in {ready_seconds:g} s")
        if self._failure:
            self.stop()
        self._raise_failure()
        return self

    def stop(self, seconds: float = 5.0) -> None:
        """Ends every stream and thread; sockets are shut, so none waits out a timeout."""
        deadline = time.monotonic() + seconds
        while (
            alive := [t for t, _ in list(self._threads) if t.is_alive()]
        ) and time.monotonic() < deadline:
            self._cancel.cancel()  # each round: a stream may have opened since the last
            with self._lock:
                self._lock.notify_all()  # and a log follower waiting to read again
            alive[0].join(0.05)

    def until(self, predicate: Callable[[Timeline], bool], timeout: float, stage: str) -> None:
        """Waits until ``predicate(timeline)`` holds: StageTimedOut naming ``stage`` (what was
        awaited) after ``timeout`` seconds, DrillError when a watch cannot go on."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self.timeline):
                self._raise_failure()
                if (left := deadline - time.monotonic()) <= 0:
                    raise StageTimedOut(f"{stage}: not within {timeout:g} s")
                self._lock.wait(left)

    def _raise_failure(self) -> None:
        if self._failure:
            raise DrillError(f"watching {self._workload} failed: {self._failure}")

    def _spawn(self, name: str, run: Callable[..., None], *args: Any) -> None:
        if self._cancel.event.is_set():
            return
        ready = threading.Event()
        thread = threading.Thread(
            target=self._guard, args=(run, ready, *args), name=f"drill-watch-{name}", daemon=True
        )
        with self._lock:
            self._threads.append((thread, ready))
        thread.start()

    def _guard(self, run: Callable[..., None], ready: threading.Event, *args: Any) -> None:
        try:
            run(ready, *args)
        except Exception as error:  # the drill cannot see on: until() says why
            if not self._cancel.event.is_set():
                why = str(error) if isinstance(error, DrillError) else first_line(error)
                with self._lock:
                    self._failure = f"{threading.current_thread().name}: {why}"
                    self._lock.notify_all()
        finally:
            ready.set()

    def _mark(self, at: float | None, mark: Mark, pod: _Pod | str = "", **detail: Any) -> None:
        """Records ``mark`` at ``at`` (None: now), once per pod; the caller holds the lock."""
        node = detail.pop("node", "")
        if isinstance(pod, _Pod):
            if mark in pod.marked:
                return
            pod.marked.add(mark)
            pod, node = pod.obj["metadata"]["name"], node or pod.node
        self.timeline.add(self.clock() if at is None else at, mark, pod=pod, node=node, **detail)
        self._lock.notify_all()

    def _written(self, at: float | None) -> float:
        """A ``managedFields`` time within this drill (not an owner's older write), else now."""
        now = self.clock()
        return now if at is None or not self._started - 1 <= at <= now else at

    def _events(self, list_fn: Callable[..., Any], *args: Any, **query: Any) -> Iterator[Any]:
        """``stream``'s events; with a field selector naming one object, that object's, and a
        listing without it reads as its deletion (``ABSENT``: never seen)."""
        first, seen = True, False
        for kind, obj in kube_api.stream(self._cancel, list_fn, *args, window=self.window, **query):
            self.relists += kind == "LISTED" and not first
            first, items = False, (obj.get("items") or []) if kind == "LISTED" else [obj]
            if "field_selector" not in query:
                yield kind, obj
            elif items:
                seen = True
                yield kind, items[0]
            else:
                yield "DELETED" if seen else "ABSENT", {}

    def _watch_pods(self, ready: threading.Event) -> None:
        pods = access.PODS.bind(self.api)
        for kind, obj in self._events(pods, self.namespace, label_selector=self._selector):
            listed = (obj.get("items") or []) if kind == "LISTED" else [obj]
            for pod in listed:  # a pod's node pool, read outside the lock
                node = (pod.get("spec") or {}).get("nodeName")
                if node and node not in self._pools:
                    with suppress(ApiException, urllib3.exceptions.HTTPError, OSError, ValueError):
                        found = access.read_node(self.api, node)["metadata"].get("labels")
                        self._pools[node] = kube.pool_of(found or {})
            with self._lock:
                for pod in listed:
                    self._pod(kind, pod, original=not ready.is_set())
                if kind == "LISTED":  # after a 410: what went in the gap went
                    names = {p["metadata"]["name"] for p in listed}
                    for gone in set(self._pods) - names:
                        self._pod("DELETED", self._pods[gone].obj, original=False)
            ready.set()

    def _pod(self, kind: str, pod: dict[str, Any], *, original: bool) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        state = self._pods.get(meta["name"])
        if state is None:
            state = self._pods[meta["name"]] = _Pod(original, pod)
            if not original:
                self._mark(
                    kube_api.api_time(meta.get("creationTimestamp")), Mark.POD_CREATED, state
                )
            elif status.get("phase") in ("Failed", "Succeeded"):  # an earlier attempt's: not ours
                state.marked, state.log, state.ending = set(Mark), "read", True
        state.obj, ended = pod, state.ending
        if spec.get("nodeName") and not ended:
            state.node = spec["nodeName"]
            if state.node not in self._nodes:
                self._spawn(f"node-{state.node}", self._watch_node, state.node)
            self._nodes[state.node] = meta["name"]
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        scheduled = conditions.get("PodScheduled", {})
        if not state.original and state.node and scheduled.get("status") == "True":
            at = kube_api.api_time(scheduled.get("lastTransitionTime"))
            created = kube_api.api_time(meta.get("creationTimestamp"))
            pending = None if at is None or created is None else round(at - created, 3)
            pool = self._pools.get(state.node, "")
            self._mark(at, Mark.POD_SCHEDULED, state, pool=pool, pending=pending)
        disruption = conditions.get("DisruptionTarget", {})
        if disruption.get("status") == "True":
            at = kube_api.api_time(disruption.get("lastTransitionTime"))
            self._mark(at, Mark.DISRUPTION_TARGET, state, reason=disruption.get("reason"))
        deleting = kube_api.api_time(meta.get("deletionTimestamp"))
        if deleting is not None and not ended:  # a deletion after the end changes nothing
            grace = meta.get("deletionGracePeriodSeconds") or 0
            self._mark(deleting - grace, Mark.POD_DELETING, state, grace=grace)
        state.container = self.container or spec["containers"][0]["name"]
        if not state.log and {"running", "terminated"} & set(self._trainer(state)):
            state.log = "following"
            self._spawn(f"log-{meta['name']}", self._follow_log, state)
        if not ended and (status.get("phase") in ("Failed", "Succeeded") or kind == "DELETED"):
            state.ending = True
            self._lock.notify_all()  # a log follower waiting to reconnect ends instead
            if state.log != "following":
                self._end(state)

    @staticmethod
    def _trainer(state: _Pod) -> dict[str, Any]:
        """The state of the trainer container (``running``, ``terminated``...)."""
        statuses = (state.obj.get("status") or {}).get("containerStatuses") or []
        found = [s.get("state") or {} for s in statuses if s.get("name") == state.container]
        return found[0] if found else {}

    def _end(self, state: _Pod) -> None:
        """``POD_ENDED``, once the pod's log is read: ``finishedAt`` is at whole seconds, and
        can fall before the last line the container wrote."""
        status = state.obj.get("status") or {}
        conditions = status.get("conditions") or []
        terminated = self._trainer(state).get("terminated") or {}
        # Where the node vanished no container end was reported: the condition the garbage
        # collector wrote is the end (a pod deleted unseen, while running, ends when seen).
        stamps = [kube_api.api_time(c.get("lastTransitionTime")) or 0.0 for c in conditions]
        failed = status.get("phase") in ("Failed", "Succeeded") and max(stamps, default=0.0)
        at = kube_api.api_time(terminated.get("finishedAt")) or failed or self.clock()
        true = [c["type"] for c in conditions if c.get("status") == "True"]
        at, code = max(at, state.last_line), terminated.get("exitCode")
        self._mark(
            at, Mark.POD_ENDED, state, phase=status.get("phase"), exit_code=code, conditions=true
        )

    def _watch_node(self, ready: threading.Event, node: str) -> None:
        baseline: dict[str, float | None] | None = None
        nodes = access.NODES.bind(self.api)
        for kind, obj in self._events(nodes, field_selector=f"metadata.name={node}"):
            ready.set()
            if kind == "ABSENT":
                break  # gone before it was watched: not this drill's to record
            with self._lock:
                if kind == "DELETED":
                    self._mark(None, Mark.NODE_GONE, self._nodes.get(node, ""), node=node)
                    break
                notices = kube.reclaim_notices(obj)
                if baseline is None:
                    baseline = notices
                    self._pools[node] = kube.pool_of(obj["metadata"].get("labels") or {})
                for how in notices.keys() - baseline.keys():
                    baseline[how], pod = notices[how], self._nodes.get(node, "")
                    at = self._written(notices[how])
                    self._mark(at, Mark.NODE_NOTICE, pod, node=node, how=how)
        with self._lock:
            self._nodes.pop(node, None)  # a new node of the same name gets a watch of its own

    def _watch_status(self, ready: threading.Event) -> None:
        query = {"field_selector": f"metadata.name={self.name}"}
        events = self._events(access.WORKLOADS[self.kind].bind(self.api), self.namespace, **query)
        counter, counted = COUNTER[self.kind], None
        for _, obj in events:
            ready.set()
            status = obj.get("status") or {}
            value = int(status.get(counter) or 0)
            with self._lock:
                if counted is not None and value > counted:
                    at = self._written(kube_api.owned_time(obj, "f:status", f"f:{counter}"))
                    self._mark(at, Mark.COUNTED, failed=value, counter=counter)
                counted = value if counted is None else max(counted, value)
                for condition in status.get("conditions") or []:
                    if condition["type"] in FINISHED[self.kind] and condition["status"] == "True":
                        self.outcome = condition["type"]
                        self._lock.notify_all()

    def _follow_log(self, ready: threading.Event, state: _Pod) -> None:
        """Reads the trainer's log until its pod ended and the log was read to its end, from
        the last line on again after ``idle`` seconds of silence or a dropped stream."""
        ready.set()
        seen: set[str] = set()  # the lines at the latest time stamp, which a reconnect repeats
        failures = 0
        try:
            while not self._cancel.event.is_set():
                start = state.last_line or (self._started if state.original else 0.0)
                since = max(1, math.ceil(self.clock() - start) + 1) if start else None
                try:
                    response = access.POD_LOG.bind(self.api)(
                        state.obj["metadata"]["name"], self.namespace, container=state.container,
                        follow=True, timestamps=True, since_seconds=since, _preload_content=False,
                        _request_timeout=(10, self.idle),
                    )  # fmt: skip
                except ApiException as error:
                    if error.status in (401, 403):  # (a 404: the pod is gone, its end follows)
                        raise kube_api.refused("read_namespaced_pod_log", error) from None
                    response = None  # a container not started yet, a node gone
                except (urllib3.exceptions.HTTPError, OSError):
                    response = None
                read = response is not None and self._read(state, response, seen)
                failures = 0 if response is not None else failures + 1
                with self._lock:
                    if state.ending and (read or failures >= 3):  # else its last lines first
                        return
                    if not state.ending:
                        self._lock.wait(min(0.1 * 2**failures, self.idle))
        finally:
            with self._lock:
                state.log = "read"
                if state.ending:
                    self._end(state)

    def _read(self, state: _Pod, response: Any, seen: set[str]) -> bool:
        """True when the stream ended (the container did), False when it broke off."""
        try:
            with self._cancel.holding(response):
                for line in iter_resp_lines(response):
                    self._line(state, line, seen)
            return True
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            return False  # silent past ``idle``, or dropped: read on from the last line
        finally:
            response.release_conn()

    def _line(self, state: _Pod, line: str, seen: set[str]) -> None:
        stamp, _, text = line.partition(" ")
        try:
            at = kube_api.api_time(stamp) or self.clock()
        except ValueError:
            return
        found = log_events.read(text, json_only=state.speaks_json)
        if found is None:
            return
        if at < state.last_line or (at == state.last_line and line in seen):
            return
        if at > state.last_line:
            seen.clear()
        seen.add(line)
        state.last_line = at
        state.speaks_json |= found.from_json
        if state.original and at < self._started:
            return
        with self._lock:
            pod = state.obj["metadata"]["name"]
            self.timeline.add(at, found.mark, pod=pod, node=state.node, **found.detail)
            self._lock.notify_all()
