"""A fake Kubernetes API server on loopback that replays documented reclaim sequences.

It serves what ``drill.target`` and ``drill.watch`` ask of a real API server through the
real ``kubernetes`` client: lists and ``?watch=true`` streams (newline-delimited JSON events
in a chunked response, from a ``resourceVersion``; an ``ERROR`` event with code 410 for a
version compacted away), single objects, and pod logs (``follow``, ``timestamps``,
``sinceSeconds``) of pods, nodes, Jobs and JobSets, and SelfSubjectAccessReviews. A
script changes the objects at scripted times, compressed (``scale`` real seconds per
scripted second). Objects carry the scripted times at whole seconds, as ``metav1.Time``
does, log lines at nanoseconds; ``Replay.epoch`` is scripted time 0 on the ``time.time()``
scale and ``Replay.clock`` the scripted time now, so a timeline reads in the script's
seconds.

``SCENARIOS`` are the reclaim paths, each scripted after the sources its docstring cites.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

SCALE = 0.01
"""Real seconds per scripted second."""
NAMESPACE = "train"
JOB = "llm-train"
CONTAINER = "trainer"
KINDS = {
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "jobs": ("batch/v1", "Job"),
    "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    # What ``spotproof status`` reads besides (``put`` them; the scripts do not change them).
    "deployments": ("apps/v1", "Deployment"),
    "workloads": ("kueue.x-k8s.io/v1beta2", "Workload"),
}
PATH = re.compile(
    r"^/(?:api/v1|apis/[^/]+/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[a-z]+)"
    r"(?:/(?P<name>[^/]+))?(?P<log>/log)?$"
)
Step = tuple[float, Callable[["Replay"], None]]
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.5",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2026-09-10T00:00:00Z",
    "goVersion": "go1.24.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}
"""``GET /version`` as an API server answers it (every field: the client validates them)."""


class Replay:
    """The API server's objects, their history of changes, and the pods' logs."""

    def __init__(self, scale: float = SCALE) -> None:
        self.scale = scale
        self.epoch = float(int(time.time()))
        """Scripted time 0, at a whole second so that whole scripted seconds stamp exactly."""
        self._t0: float | None = None
        self._changed = threading.Condition()
        self.version = 1000
        self.oldest = 0
        """Versions below it are compacted away: a watch from one is answered 410."""
        self.expiries = 0
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self.logs: dict[tuple[str, str], list[tuple[float, str]]] = {}
        self.log_end: dict[tuple[str, str], str] = {}
        self.requests: list[str] = []
        self.forbidden: set[str] = set()
        """Resources this caller may not read (403, as RBAC answers)."""
        self.denied: set[tuple[str, str]] = set()
        """``(verb, resource[/subresource])`` a SelfSubjectAccessReview answers not allowed
        (as does every verb on a resource in ``forbidden``)."""
        self.reviews: list[dict[str, Any]] = []
        """The ``spec.resourceAttributes`` of each SelfSubjectAccessReview, in order."""
        self.closing = threading.Event()
        self.finished = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        serve = lambda: self._server.serve_forever(poll_interval=0.05)  # noqa: E731
        self._threads = [threading.Thread(target=serve, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server, as a user's would be (plain HTTP, a token)."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "replay", "cluster": {"server": self.url}}],
                    "users": [{"name": "replay", "user": {"token": "replay"}}],
                    "contexts": [
                        {"name": "replay", "context": {"cluster": "replay", "user": "replay"}}
                    ],
                    "current-context": "replay",
                }
            )
        )
        return path

    def close(self) -> None:
        self.closing.set()
        with self._changed:
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()

    # --- time -----------------------------------------------------------------------------

    def clock(self) -> float:
        """Scripted time now, on the ``time.time()`` scale (frozen at 0 until ``play``)."""
        if self._t0 is None:
            return self.epoch
        return self.epoch + (time.monotonic() - self._t0) / self.scale

    def stamp(self, t: float) -> str:
        return datetime.fromtimestamp(self.epoch + int(t // 1), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def play(self, steps: list[Step]) -> None:
        """Runs ``steps`` (scripted time, change) in a thread, each at its time."""
        self._t0 = time.monotonic()

        def run() -> None:
            for at, step in sorted(steps, key=lambda s: s[0]):
                if self.closing.wait(max(0.0, self._t0 + at * self.scale - time.monotonic())):
                    return
                step(self)
            self.finished.set()

        self._threads.append(threading.Thread(target=run, daemon=True, name="replay-script"))
        self._threads[-1].start()

    # --- changes ----------------------------------------------------------------------------

    def put(self, resource: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key = (resource, meta.get("namespace", ""), meta["name"])
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self._record(resource, kind, key, obj)

    def change(
        self,
        resource: str,
        name: str,
        edit: Callable[[dict[str, Any]], None],
        *,
        at: float,
        manager: str = "",
        fields: dict[str, Any] | None = None,
    ) -> None:
        """Applies ``edit`` to a copy of the object; ``manager`` owning ``fields`` wrote it
        (its ``managedFields`` entry gets the time, as the API server stamps it)."""
        key = (resource, "" if resource == "nodes" else NAMESPACE, name)
        obj = copy.deepcopy(self.objects[key])
        edit(obj)
        if manager:
            entries = obj["metadata"].setdefault("managedFields", [])
            entry = next((e for e in entries if e["manager"] == manager), None)
            if entry is None:
                entry = {"manager": manager, "operation": "Update", "fieldsType": "FieldsV1"}
                entry["apiVersion"], entry["fieldsV1"] = KINDS[resource][0], {}
                entries.append(entry)
            _merge(entry["fieldsV1"], fields or {})
            entry["time"] = self.stamp(at)
        self._record(resource, "MODIFIED", key, obj)

    def delete(self, resource: str, name: str) -> None:
        key = (resource, "" if resource == "nodes" else NAMESPACE, name)
        self._record(resource, "DELETED", key, copy.deepcopy(self.objects[key]))

    def log(self, pod: str, at: float, record: dict[str, Any]) -> None:
        with self._changed:
            self.logs.setdefault((NAMESPACE, pod), []).append((at, json.dumps(record)))
            self._changed.notify_all()

    def end_log(self, pod: str, how: str = "closed") -> None:
        """The container exited (``closed``), or its node vanished (``broken``: streams are
        cut, and new requests fail as the API server's proxy to a gone kubelet does)."""
        with self._changed:
            self.log_end[(NAMESPACE, pod)] = how
            self._changed.notify_all()

    def expire(self) -> None:
        """Compacts every version seen so far: each open watch gets a 410 ``ERROR`` event,
        and a watch from any older version too, until the client lists again."""
        with self._changed:
            self.version += 1
            self.oldest = self.version
            self.expiries += 1
            self._changed.notify_all()

    def _record(self, resource: str, kind: str, key: tuple[str, str, str], obj: dict) -> None:
        with self._changed:
            self.version += 1
            api_version, kind_name = KINDS[resource]
            obj.update(apiVersion=api_version, kind=kind_name)
            obj["metadata"]["resourceVersion"] = str(self.version)
            if kind == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            self.history.append((self.version, resource, kind, copy.deepcopy(obj)))
            self._changed.notify_all()

    # --- serving ------------------------------------------------------------------------------

    def matching(self, resource: str, ns: str | None, query: dict[str, str]) -> Callable:
        labels = dict(p.split("=", 1) for p in query.get("labelSelector", "").split(",") if p)
        fields = dict(p.split("=", 1) for p in query.get("fieldSelector", "").split(",") if p)

        def match(obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            return (
                (ns is None or meta.get("namespace", "") == ns)
                and all((meta.get("labels") or {}).get(k) == v for k, v in labels.items())
                and fields.get("metadata.name", meta["name"]) == meta["name"]
            )

        return match

    def listing(self, resource: str, match: Callable) -> dict[str, Any]:
        with self._changed:
            items = [o for (r, _, _), o in self.objects.items() if r == resource and match(o)]
            api_version, kind = KINDS[resource]
            return {
                "apiVersion": api_version,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(self.version)},
                "items": copy.deepcopy(items),
            }


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        _merge(into.setdefault(key, {}), value)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(replay: Replay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def date_time_string(self, timestamp: float | None = None) -> str:
            # The Date header every response carries, on the script's clock: the drill
            # reads the API server's time from it.
            return formatdate(replay.clock() if timestamp is None else timestamp, usegmt=True)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            replay.requests.append(self.path)
            if url.path.rstrip("/") == "/version":
                self._json(200, VERSION)
                return
            found = PATH.match(url.path)
            if found is None or found["resource"] not in KINDS:
                self._json(404, _status(404, "NotFound", f"no route {url.path}"))
                return
            resource, ns, name = found["resource"], found["ns"], found["name"]
            if resource in replay.forbidden:
                message = (
                    f'{resource} is forbidden: User "replay" cannot list resource "{resource}"'
                )
                self._json(403, _status(403, "Forbidden", message))
                return
            if found["log"]:
                self._log(ns, name, query)
            elif name:
                obj = replay.objects.get((resource, ns or "", name))
                if obj is None:
                    self._json(404, _status(404, "NotFound", f'{resource} "{name}" not found'))
                else:
                    self._json(200, obj)
            elif query.get("watch") == "true":
                self._watch(resource, replay.matching(resource, ns, query), query)
            else:
                self._json(200, replay.listing(resource, replay.matching(resource, ns, query)))

        def do_POST(self) -> None:
            """SelfSubjectAccessReview only: the review, with ``status.allowed`` (RBAC gives
            no reason for a denial: kubernetes.io, self-subject-access-review-v1)."""
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if urlparse(self.path).path != REVIEWS:
                self._json(404, _status(404, "NotFound", f"no route {self.path}"))
                return
            attributes = body["spec"]["resourceAttributes"]
            replay.reviews.append(attributes)
            resource = "/".join(
                filter(None, (attributes["resource"], attributes.get("subresource")))
            )
            allowed = (attributes["verb"], resource) not in replay.denied and (
                attributes["resource"] not in replay.forbidden
            )
            self._json(201, {**body, "status": {"allowed": allowed}})

        def _json(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _begin(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _watch(self, resource: str, match: Callable, query: dict[str, str]) -> None:
            deadline = time.monotonic() + float(query.get("timeoutSeconds", 1800))
            since = query.get("resourceVersion")
            self._begin()
            try:
                if since and int(since) < replay.oldest:
                    self._expired(since)
                    return
                with replay._changed:
                    position, expiries = int(since or replay.version), replay.expiries
                while not replay.closing.is_set() and time.monotonic() < deadline:
                    with replay._changed:
                        if replay.version == position and replay.expiries == expiries:
                            replay._changed.wait(min(0.5, deadline - time.monotonic()))
                        events = [
                            {"type": kind, "object": obj}
                            for version, r, kind, obj in replay.history
                            if version > position and r == resource and match(obj)
                        ]
                        position, expired = replay.version, replay.expiries != expiries
                    for event in events:
                        self._chunk(json.dumps(event).encode() + b"\n")
                    if expired:
                        self._expired(str(position))
                        return
                self._chunk(b"")
            except OSError:
                pass  # the client went away (a drill's stop shuts its sockets)

        def _expired(self, since: str) -> None:
            status = _status(410, "Expired", f"too old resource version: {since}")
            self._chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
            self._chunk(b"")

        def _log(self, ns: str, name: str, query: dict[str, str]) -> None:
            key = (ns, name)
            if ("pods", ns, name) not in replay.objects:
                self._json(404, _status(404, "NotFound", f'pods "{name}" not found'))
                return
            if replay.log_end.get(key) == "broken":
                message = f"Get https://10.0.0.9:10250/containerLogs/{ns}/{name}: i/o timeout"
                self._json(500, _status(500, "InternalError", message))
                return
            if key not in replay.logs:
                message = f'container "{CONTAINER}" in pod "{name}" is waiting to start'
                self._json(400, _status(400, "BadRequest", message))
                return
            cutoff = replay.clock() - replay.epoch - float(query.get("sinceSeconds", "inf"))
            follow, stamps = query.get("follow") == "true", query.get("timestamps") == "true"
            self._begin()
            sent = 0
            try:
                while not replay.closing.is_set():
                    with replay._changed:
                        lines, end = replay.logs[key][sent:], replay.log_end.get(key)
                        if not lines and not end and follow:
                            replay._changed.wait(0.5)
                            continue
                    sent += len(lines)
                    for at, text in lines:
                        if at >= cutoff:
                            prefix = f"{_nano(replay.epoch + at)} " if stamps else ""
                            self._chunk(f"{prefix}{text}\n".encode())
                    if end == "broken":  # the kubelet's connection is gone: cut, no last chunk
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if end or not follow:
                        break
                self._chunk(b"")
            except OSError:
                pass

    return Handler


def _nano(t: float) -> str:
    whole = int(t)
    when = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{when}.{round((t - whole) * 1e9):09d}Z"


# --- objects, as the API server returns them ---------------------------------------------------


def node(replay: Replay, name: str, labels: dict[str, str], provider_id: str, **extra: Any) -> dict:
    """A Ready node registered an hour before the script starts."""
    obj = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"kubernetes.io/hostname": name, **labels},
            "creationTimestamp": replay.stamp(extra.pop("created", -3600)),
            **({"finalizers": extra.pop("finalizers")} if "finalizers" in extra else {}),
        },
        "spec": {"providerID": provider_id, "taints": extra.pop("taints", [])},
        "status": {
            "conditions": [_condition(replay, "Ready", "True", -3600, reason="KubeletReady")]
        },
    }
    return obj


def _condition(
    replay: Replay, kind: str, status: str, at: float, *, reason: str = "", message: str = ""
) -> dict[str, Any]:
    found = {"type": kind, "status": status, "lastTransitionTime": replay.stamp(at)}
    found.update({"reason": reason} if reason else {})
    found.update({"message": message} if message else {})
    return found


def set_condition(replay: Replay, obj: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    condition = _condition(replay, *args, **kwargs)
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c["type"] != condition["type"]] + [condition]


def pod(
    replay: Replay,
    name: str,
    node_name: str | None,
    *,
    created: float,
    running: float | None,
    grace: int,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod of the Job ``llm-train``: Pending (scheduled or not), or Running since ``running``."""
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": replay.stamp(created),
            "labels": labels
            or {"batch.kubernetes.io/job-name": JOB, "job-name": JOB, "controller-uid": "c1"},
            "finalizers": ["batch.kubernetes.io/job-tracking"],
        },
        "spec": {
            "containers": [
                {
                    "name": CONTAINER,
                    "image": "ghcr.io/example/trainer:1",
                    "env": [
                        {"name": "CHECKPOINT_URL", "value": "gs://ckpt/llm-train"},
                        {"name": "GRACE_SECONDS", "value": str(grace)},
                        {
                            "name": "HF_TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}},
                        },
                    ],
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
        },
        "status": {"phase": "Pending", "conditions": []},
    }
    if node_name is None:
        why = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."
        set_condition(
            replay, obj, "PodScheduled", "False", created, reason="Unschedulable", message=why
        )
    else:
        schedule(replay, obj, node_name, created)
    if running is not None:
        run(replay, obj, running)
    return obj


def schedule(replay: Replay, obj: dict[str, Any], node_name: str, at: float) -> None:
    obj["spec"]["nodeName"] = node_name
    set_condition(replay, obj, "PodScheduled", "True", at)


def _container(state: dict[str, Any], *, ready: bool) -> list[dict[str, Any]]:
    image = "ghcr.io/example/trainer:1"
    return [
        {
            "name": CONTAINER,
            "image": image,
            "imageID": f"{image}@sha256:0",
            "ready": ready,
            "restartCount": 0,
            "started": ready,
            "state": state,
        }
    ]


def run(replay: Replay, obj: dict[str, Any], at: float) -> None:
    obj["status"]["phase"] = "Running"
    obj["status"]["startTime"] = replay.stamp(at - 2)
    state = {"running": {"startedAt": replay.stamp(at)}}
    obj["status"]["containerStatuses"] = _container(state, ready=True)
    for kind in ("Initialized", "ContainersReady", "Ready"):
        set_condition(replay, obj, kind, "True", at)


def finish(replay: Replay, obj: dict[str, Any], at: float, code: int, **status: str) -> None:
    """The container exited ``code`` at ``at``: the pod Failed, or Succeeded on 0."""
    started = obj["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    terminated = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started,
        "finishedAt": replay.stamp(at),
    }
    obj["status"]["containerStatuses"] = _container({"terminated": terminated}, ready=False)
    obj["status"].update(phase="Succeeded" if code == 0 else "Failed", **status)
    for kind in ("ContainersReady", "Ready"):
        set_condition(
            replay, obj, kind, "False", at, reason="PodCompleted" if code == 0 else "PodFailed"
        )


def job(name: str = JOB, parallelism: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": "c1"},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {"spec": {"containers": [{"name": CONTAINER}], "restartPolicy": "Never"}},
        },
        "status": {"active": parallelism, "failed": 0, "succeeded": 0},
    }


def job_done(at: float) -> Step:
    def complete(r: Replay) -> None:
        def edit(obj: dict[str, Any]) -> None:
            obj["status"].update(active=0, succeeded=1, completionTime=r.stamp(at))
            set_condition(r, obj, "SuccessCriteriaMet", "True", at)
            set_condition(r, obj, "Complete", "True", at)

        r.change("jobs", JOB, edit, at=at)

    return at, complete


# --- the scripted paths ------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    original: str
    """The pod running on the reclaimed node when the script starts."""
    replacement: str
    reclaimed: str
    """The node reclaimed."""
    steps: list[Step] = field(default_factory=list)


def _pod_edit(name: str, at: float, edit: Callable[[Replay, dict[str, Any]], None]) -> Step:
    return at, lambda r: r.change("pods", name, lambda obj: edit(r, obj), at=at)


def _node_edit(
    name: str,
    at: float,
    edit: Callable[[Replay, dict[str, Any]], None],
    manager: str = "",
    **f: Any,
) -> Step:
    return at, lambda r: r.change(
        "nodes", name, lambda o: edit(r, o), at=at, manager=manager, fields=f
    )


def _log(name: str, at: float, **record: Any) -> Step:
    return at, lambda r: r.log(name, at, record)


def disrupted(name: str, at: float, reason: str, message: str) -> Step:
    """The ``DisruptionTarget`` condition, as the kubelet, the Eviction API or PodGC add it."""
    return _pod_edit(
        name,
        at,
        lambda r, o: set_condition(
            r, o, "DisruptionTarget", "True", at, reason=reason, message=message
        ),
    )


def deleting(name: str, at: float, grace: int) -> Step:
    """A graceful DELETE at ``at``: ``deletionTimestamp`` is when the grace runs out."""

    def edit(r: Replay, obj: dict[str, Any]) -> None:
        obj["metadata"].update(
            deletionTimestamp=r.stamp(at + grace), deletionGracePeriodSeconds=grace
        )

    return _pod_edit(name, at, edit)


def tainted(name: str, at: float, manager: str, key: str, effect: str = "NoSchedule") -> Step:
    def edit(r: Replay, obj: dict[str, Any]) -> None:
        obj["spec"]["taints"] = [*obj["spec"].get("taints", []), {"key": key, "effect": effect}]

    return _node_edit(name, at, edit, manager, **{"f:spec": {"f:taints": {}}})


def _setup(replay: Replay, reclaimed: dict[str, Any], original: str, grace: int) -> None:
    """The reclaimed node, the Job and its pod, running for 15 minutes, its log so far."""
    replay.put("nodes", reclaimed)
    replay.put("jobs", job())
    name = reclaimed["metadata"]["name"]
    replay.put("pods", pod(replay, original, name, created=-902, running=-900, grace=grace))
    replay.log(original, -899.5, {"event": "resumed", "step": 0, "writer": "w-1", "rank": 0})
    periodic = {"event": "checkpoint", "step": 400, "seconds": 8.2, "kind": "periodic"}
    replay.log(original, -120.4, periodic)


def _signalled(name: str, at: float, ended: float, *, grace_left: float) -> list[Step]:
    """The trainer's SIGTERM at ``at`` and its final save, committed just before it exits at
    ``ended`` (``smoke.train``'s ``preempted`` and ``checkpoint`` lines)."""
    since = round(ended - 0.6 - at, 1)
    final = {"step": 437, "seconds": since - 0.2, "kind": "final", "since_signal": since}
    return [
        _log(name, at, event="preempted", step=437, signal="SIGTERM", grace_left=grace_left),
        _log(name, ended - 0.6, event="checkpoint", **final),
        (ended - 0.5, lambda r: r.end_log(name)),
    ]


def _replacement(
    name: str, new_node: dict[str, Any], times: tuple[float, float, float, float], *,
    resumed_step: int = 437, grace: int,
) -> list[Step]:  # fmt: skip
    """The Job's new pod, created and Pending until a new node of the same pool is added and
    Ready, scheduled, running (``times``); its trainer resumes from ``resumed_step`` and
    completes the run at step 600."""
    created, added, scheduled, running = times
    node_name = new_node["metadata"]["name"]

    def add(r: Replay) -> None:
        meta = {**new_node["metadata"], "creationTimestamp": r.stamp(added)}
        r.put("nodes", {**new_node, "metadata": meta})

    def ready(r: Replay, obj: dict[str, Any]) -> None:
        set_condition(r, obj, "Ready", "True", added + 4, reason="KubeletReady")

    def pending(r: Replay) -> None:
        r.put("pods", pod(r, name, None, created=created, running=None, grace=grace))

    return [
        (created, pending),
        (added, add),
        _node_edit(node_name, added + 4, ready),
        _pod_edit(name, scheduled, lambda r, o: schedule(r, o, node_name, scheduled)),
        _pod_edit(name, running, lambda r, o: run(r, o, running)),
        _log(name, running + 5.5, event="resumed", step=resumed_step, writer="w-2", rank=0),
        _log(name, running + 20.5, event="checkpoint", step=600, seconds=7.9, kind="final"),
        _log(name, running + 20.6, event="done", step=600, digest="sha256:9f2c"),
        (running + 20.7, lambda r: r.end_log(name)),
        _pod_edit(name, running + 21, lambda r, o: finish(r, o, running + 21, 0)),
        job_done(running + 22),
    ]


DISRUPTED, UNREACHABLE = "karpenter.sh/disrupted", "node.kubernetes.io/unreachable"
GKE_SPOT = {"cloud.google.com/gke-spot": "true", "cloud.google.com/gke-nodepool": "spot-a100"}
KARPENTER_SPOT = {"karpenter.sh/capacity-type": "spot", "karpenter.sh/nodepool": "gpu-spot"}
AKS_SPOT = {
    "kubernetes.azure.com/scalesetpriority": "spot",
    "kubernetes.azure.com/agentpool": "spotgpu",
}
AKS_VMSS = "azure:///subscriptions/0000/resourceGroups/mc_ml/providers/Microsoft.Compute/virtualMachineScaleSets/aks-spotgpu-38611414-vmss/virtualMachines/"
SHUTDOWN = "Pod was terminated in response to imminent node shutdown."


def gke_node(replay: Replay, name: str) -> dict[str, Any]:
    return node(replay, name, GKE_SPOT, f"gce://ml-proj/us-central1-a/{name}")


def aks_node(replay: Replay, name: str) -> dict[str, Any]:
    spot = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
    return node(replay, name, AKS_SPOT, AKS_VMSS + name[-1], taints=[spot])


def karpenter_node(replay: Replay, name: str, instance: str) -> dict[str, Any]:
    node_labels = {**KARPENTER_SPOT, "node.kubernetes.io/instance-type": "g5.xlarge"}
    provider = f"aws:///us-east-1a/{instance}"
    return node(replay, name, node_labels, provider, finalizers=["karpenter.sh/termination"])


def gke(replay: Replay) -> Scenario:
    """GKE spot: the kubelet's graceful node shutdown. GKE docs, "Spot VMs" (termination and
    graceful shutdown: a 30 s notice, 15 s of it for pods by default); the kubelet sets the
    node ``Ready`` False "node is shutting down", adds ``DisruptionTarget``
    ``TerminationByKubelet`` while the pod still runs and fails it, reason ``Terminated``,
    once its containers stopped (https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/,
    https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions);
    the node lifecycle controller's ``not-ready`` taint follows; the node goes with its VM."""
    old, new, reclaimed = "llm-train-x7k2p", "llm-train-q9f4d", "gke-ml-spot-a100-5f1c2d3e-x7k2"
    _setup(replay, gke_node(replay, reclaimed), old, grace=25)
    shutting = {"reason": "KubeletNotReady", "message": "node is shutting down"}
    failed = {"reason": "Terminated", "message": SHUTDOWN}
    steps = [
        _node_edit(reclaimed, 1, lambda r, o: set_condition(r, o, "Ready", "False", 1, **shutting)),
        disrupted(old, 1, "TerminationByKubelet", SHUTDOWN),
        *_signalled(old, 1.2, 12, grace_left=14.8),
        _pod_edit(old, 12, lambda r, o: finish(r, o, 12, 143, **failed)),
        tainted(reclaimed, 14, "kube-controller-manager", "node.kubernetes.io/not-ready"),
        (31, lambda r: r.delete("nodes", reclaimed)),
        *_replacement(new, gke_node(replay, f"{reclaimed[:-4]}q9p4"), (13, 60, 68, 75), grace=25),
    ]
    return Scenario("gke", old, new, reclaimed, steps)


def karpenter(replay: Replay, *, blocked: bool = False) -> Scenario:
    """EKS spot through Karpenter. The interruption message makes Karpenter delete the node
    behind its ``karpenter.sh/termination`` finalizer, taint it ``karpenter.sh/disrupted``
    and evict its pods through the Eviction API, which adds ``EvictionByEvictionAPI``, the
    deletion's ``deletionTimestamp`` its time plus the grace (kubernetes-sigs/karpenter@v1.14.1
    ``pkg/controllers/node/termination/controller.go``, ``terminator/eviction.go``).

    ``blocked``: a PodDisruptionBudget allows no eviction; at the NodePool's
    ``terminationGracePeriod`` (90 s) less the pod's grace (60 s) Karpenter deletes the pod
    (``terminator.go`` ``DeleteExpiringPods``: a plain DELETE, no ``DisruptionTarget``), the
    Job counts the failure, and the node goes when the period ends."""
    old, new, reclaimed = "llm-train-4hz8w", "llm-train-m2v6c", "ip-10-0-12-34.ec2.internal"
    _setup(replay, karpenter_node(replay, reclaimed, "i-0123456789abcdef0"), old, grace=60)

    def node_deleted(r: Replay, obj: dict[str, Any]) -> None:
        obj["metadata"].update(deletionTimestamp=r.stamp(2), deletionGracePeriodSeconds=0)

    new_node = karpenter_node(replay, "ip-10-0-45-67.ec2.internal", "i-0fedcba9876543210")
    steps = [_node_edit(reclaimed, 2, node_deleted), tainted(reclaimed, 3, "karpenter", DISRUPTED)]
    if blocked:  # evictions answered 429 until the delete at 2 + 90 - 60
        steps += [
            deleting(old, 32, 60),
            *_signalled(old, 32.4, 49, grace_left=59.6),
            _pod_edit(old, 49, lambda r, o: finish(r, o, 49, 143)),
            counted(50),
            (51, lambda r: r.delete("pods", old)),
            (92, lambda r: r.delete("nodes", reclaimed)),
            *_replacement(new, new_node, (50, 60, 66, 70), grace=60),
        ]
    else:
        steps += [
            disrupted(old, 4, "EvictionByEvictionAPI", "Eviction API: evicting"),
            deleting(old, 4, 60),
            *_signalled(old, 4.3, 20, grace_left=59.7),
            _pod_edit(old, 20, lambda r, o: finish(r, o, 20, 143)),
            (22, lambda r: r.delete("pods", old)),
            (45, lambda r: r.delete("nodes", reclaimed)),
            *_replacement(new, new_node, (21, 48, 54, 60), grace=60),
        ]
    return Scenario("karpenter-tgp" if blocked else "karpenter", old, new, reclaimed, steps)


def counted(at: float) -> Step:
    """The Job controller counts the failed pod: its ``podFailurePolicy`` ignores only pods
    with ``DisruptionTarget``."""

    def edit(obj: dict[str, Any]) -> None:
        obj["status"]["failed"] = 1

    fields = {"f:status": {"f:failed": {}, "f:active": {}}}
    manager = "kube-controller-manager"
    return at, lambda r: r.change("jobs", JOB, edit, at=at, manager=manager, fields=fields)


def aks(replay: Replay) -> Scenario:
    """AKS node auto-drain on a spot VM's ``Preempt`` scheduled event (30 s notice): cordon,
    the ``remediator.kubernetes.azure.com/unschedulable`` taint, a drain through the Eviction
    API (MicrosoftDocs/azure-aks-docs ``articles/aks/node-auto-drain.md``; the spot pool's own
    ``kubernetes.azure.com/scalesetpriority=spot`` taint: ``articles/aks/spot-node-pool.md``)."""
    old, new, reclaimed = "llm-train-b5n3t", "llm-train-r8k1s", "aks-spotgpu-38611414-vmss000002"
    _setup(replay, aks_node(replay, reclaimed), old, grace=25)

    def cordon(r: Replay, obj: dict[str, Any]) -> None:
        obj["spec"]["unschedulable"] = True
        obj["spec"]["taints"] += [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "remediator.kubernetes.azure.com/unschedulable", "effect": "NoSchedule"},
        ]

    fields = {"f:spec": {"f:unschedulable": {}, "f:taints": {}}}
    steps = [
        _node_edit(reclaimed, 2, cordon, "node-auto-drain", **fields),
        disrupted(old, 3, "EvictionByEvictionAPI", "Eviction API: evicting"),
        deleting(old, 3, 25),
        *_signalled(old, 3.3, 15, grace_left=24.7),
        _pod_edit(old, 15, lambda r, o: finish(r, o, 15, 143)),
        (17, lambda r: r.delete("pods", old)),
        (40, lambda r: r.delete("nodes", reclaimed)),
        *_replacement(new, aks_node(replay, f"{reclaimed[:-1]}3"), (16, 75, 82, 88), grace=25),
    ]
    return Scenario("aks", old, new, reclaimed, steps)


def vanished(replay: Replay) -> Scenario:
    """A spot node gone with no notice: the log stops, the node controller marks the node
    ``Unknown`` after its grace and the node is deleted with its VM; 40 s later the pod garbage
    collector fails the pod with ``DeletionByPodGC`` and no exit code, and force-deletes it
    (kubernetes/kubernetes ``pkg/controller/podgc/gc_controller.go``: ``gcOrphaned``,
    ``quarantineTime``). The replacement resumes from the last periodic checkpoint."""
    old, new, reclaimed = "llm-train-c3w9z", "llm-train-h6j2u", "gke-ml-spot-a100-5f1c2d3e-v4n7"
    _setup(replay, gke_node(replay, reclaimed), old, grace=25)
    lost = {"reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}
    gc = {"reason": "DeletionByPodGC", "message": "PodGC: node no longer exists"}
    replacement = gke_node(replay, f"{reclaimed[:-4]}k8m1")

    def collected(r: Replay, obj: dict[str, Any]) -> None:
        obj["status"]["phase"] = "Failed"  # the containers' status stays as last reported
        set_condition(r, obj, "DisruptionTarget", "True", 85, **gc)

    steps = [
        (1, lambda r: r.end_log(old, "broken")),
        _node_edit(reclaimed, 41, lambda r, o: set_condition(r, o, "Ready", "Unknown", 41, **lost)),
        tainted(reclaimed, 41, "kube-controller-manager", UNREACHABLE, "NoExecute"),
        (45, lambda r: r.delete("nodes", reclaimed)),
        _pod_edit(old, 85, collected),
        deleting(old, 85.05, 0),
        (85.1, lambda r: r.delete("pods", old)),
        *_replacement(new, replacement, (86, 100, 106, 110), grace=25, resumed_step=400),
    ]
    return Scenario("vanished", old, new, reclaimed, steps)


SCENARIOS: dict[str, Callable[[Replay], Scenario]] = {
    "gke": gke,
    "karpenter": karpenter,
    "karpenter-tgp": lambda replay: karpenter(replay, blocked=True),
    "aks": aks,
    "vanished": vanished,
}
