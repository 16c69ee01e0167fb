"""The Kubernetes API as a drill reads it: a client from the user's kubeconfig, single
requests that are bounded and fail in one line, and list-then-watch streams that one
``Cancel`` ends at once.

``connect`` reads the user's own kubeconfig as kubectl does, so exec plugins such as
gke-gcloud-auth-plugin, ``aws eks get-token`` and kubelogin work unchanged; the file itself
is read within bounds (``bounded_yaml``: a regular file, its size, nesting and aliases), and
nothing is written back to it. Every single request is bounded as a whole: no retries, a
connect and a read timeout (:data:`REQUEST_SECONDS`), and its answer read within a size and
a time (:func:`json_answer`), so an API server that accepts and never answers is reported
within seconds. ``stream`` lists,
then watches from the last resourceVersion, lists again when that version was compacted
away, and reconnects after a dropped connection. ``drill.target`` and ``drill.watch`` read
the cluster through this module, with the requests ``drill.access`` declares.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes import watch as kube_watch
from kubernetes.client.rest import ApiException
from kubernetes.config import ConfigException, kube_config

from spotproof import bounded_json, bounded_yaml
from spotproof.drill.errors import DrillError, DrillRefused
from spotproof.runtime.messages import first_line, redacted

CONNECT_SECONDS = 10
FATAL_STATUS = frozenset({401, 403, 404})
"""Answers a retry cannot mend: no credentials, no permission, no such resource type."""


def api_time(text: str | None) -> float | None:
    """An API time stamp (RFC 3339: ``metav1.Time`` at whole seconds, a log line's at
    nanoseconds) on the ``time.time()`` scale."""
    return datetime.fromisoformat(text).timestamp() if text else None


def owned_time(obj: Mapping[str, Any], *path: str) -> float | None:
    """The latest ``managedFields`` time of the writers owning ``path`` (``f:spec``,
    ``f:taints``): when the API server saw that field change last."""
    times = []
    for entry in obj.get("metadata", {}).get("managedFields") or []:
        owned: Any = entry.get("fieldsV1") or {}
        for key in path:
            owned = owned.get(key) if isinstance(owned, dict) else None
        if owned is not None and entry.get("time"):
            times.append(api_time(entry["time"]) or 0.0)
    return max(times, default=None)


REQUEST_SECONDS = (5, 10)
"""(connect, read) bound on each single request, which is never retried: a private endpoint
out of reach, a laptop off its VPN or a server that accepts and never answers is told in a
line within 15 s (with urllib3's default three retries of 30 s reads, it took 124 s)."""
ANSWER_SECONDS = 30
"""The most one answer's body may take to arrive, however it trickles."""
KUBECONFIG = bounded_yaml.Limits(bytes=4 * 2**20, documents=1)


def server(api: client.ApiClient) -> str:
    """The API server's URL as it may be printed: without the user-info a kubeconfig may
    carry in it (``https://user:password@host``)."""
    return redacted(str(api.configuration.host))


def json_answer(what: str, response: Any) -> Any:
    """The JSON body of ``response`` (a request made with ``_preload_content=False``), read
    within ``bounded_json.API_ANSWER`` and :data:`ANSWER_SECONDS`; one line naming ``what``
    otherwise."""
    deadline, chunks, size = time.monotonic() + ANSWER_SECONDS, [], 0
    try:
        while chunk := response.read(2**20):
            size += len(chunk)
            if size > bounded_json.API_ANSWER.bytes:
                raise DrillError(f"{what}: an answer larger than {size - len(chunk)} bytes")
            if time.monotonic() > deadline:
                raise DrillError(f"{what}: the answer took longer than {ANSWER_SECONDS} s")
            chunks.append(chunk)
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise DrillError(f"{what}: {first_line(error)}") from None
    finally:
        response.release_conn()
    try:
        return bounded_json.loads(b"".join(chunks), what, bounded_json.API_ANSWER)
    except bounded_json.JsonLimitError as error:
        raise DrillError(
            f"{error}; is the kubeconfig's server the cluster's API server?"[:400]
        ) from None


def server_time(api: client.ApiClient) -> float:
    """The API server's time (its ``Date`` header), which the objects' stamps are on;
    reading it is also the check that the server answers at all. :class:`DrillError` in
    one line when it does not, or answers without a date."""
    try:
        _, _, headers = client.VersionApi(api).get_code_with_http_info(
            _request_timeout=REQUEST_SECONDS
        )
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as error:
        raise DrillError(
            f"the API server at {server(api)} did not answer: {first_line(error)}"
        ) from None
    stamp = headers.get("Date")
    try:
        return parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError):  # missing (None) or not an HTTP date
        raise DrillError(
            f"the API server at {server(api)} answered without a valid Date "
            f"header ({stamp!r}); the server's clock is what ages what it shows"
        ) from None


def answer(what: str, call: Callable[[], Any]) -> Any:
    """``call()``, one API request; its failure is one line naming ``what``."""
    try:
        return call()
    except ApiException as error:
        raise refused(what, error) from None
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise DrillError(f"{what}: {type(error).__name__}: {error}"[:300]) from None


def connect(kubeconfig: str, context: str | None = None) -> client.ApiClient:
    """An API client from a kubeconfig file, as kubectl reads it (exec plugins included;
    relative paths in it from its own folder), with a connection pool wide enough for the
    drill's concurrent streams and no retries. :class:`DrillError` in one line naming the
    file and what is wrong with it."""
    try:
        return _client(kubeconfig, context)
    except bounded_yaml.YamlLimitError as error:  # its message names the file
        raise DrillError(f"--kubeconfig {error}") from None
    except (ConfigException, TypeError, ValueError, OSError) as error:
        raise DrillError(
            f"--kubeconfig {kubeconfig}{f' --context {context}' if context else ''}: "
            f"{first_line(error)}; allowed: a kubeconfig file and one of its contexts"
        ) from None


def _client(kubeconfig: str, context: str | None) -> client.ApiClient:
    path = str(Path(kubeconfig))
    documents, _ = bounded_yaml.load(Path(path), KUBECONFIG)
    found = documents[0] if documents else None
    if not isinstance(found, dict):
        raise ConfigException(f"{path}: no kubeconfig (a mapping of clusters, users, contexts)")
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = 32
    configuration.retries = False  # each request once, within REQUEST_SECONDS
    loader = kube_config.KubeConfigLoader(
        config_dict=kube_config.ConfigNode(path, found, path),
        active_context=context,
        config_base_path=None,  # relative to the file's folder, as kubectl reads them
    )
    loader.load_and_set(configuration)
    return client.ApiClient(configuration=configuration)


class Cancel:
    """One stop for every stream of a drill: :meth:`cancel` sets it and shuts the sockets of
    the streams open now, so a blocked read returns at once instead of at its timeout."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._open: set[Any] = set()
        self._lock = threading.Lock()

    @contextmanager
    def holding(self, stream: Any) -> Iterator[Any]:
        """``stream`` (a Watch, a raw response) is open within: :meth:`cancel` interrupts it."""
        with self._lock:
            self._open.add(stream)
        if self.event.is_set():
            _interrupt(stream)
        try:
            yield stream
        finally:
            with self._lock:
                self._open.discard(stream)

    def cancel(self) -> None:
        self.event.set()
        with self._lock:
            streams = list(self._open)
        for stream in streams:
            _interrupt(stream)


def _interrupt(stream: Any) -> None:
    if isinstance(stream, kube_watch.Watch):
        stream.stop()  # its own socket shutdown finds no socket under urllib3 2: ours below
    # urllib3 2.3+ shuts the socket's read side, so that the blocked reader returns now.
    with suppress(AttributeError, ValueError, RuntimeError, OSError):  # not open any more
        getattr(stream, "_resp", stream).shutdown()


def refused(call: str, error: ApiException) -> DrillRefused:
    why = "not found" if error.status == 404 else f"{error.status} {error.reason}"
    return DrillRefused(f"{call}: {why}")


def stream(
    cancel: Cancel,
    list_fn: Callable[..., Any],
    *args: Any,
    window: int = 300,
    deadline: float | None = None,
    **query: Any,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``("LISTED", list)`` after each list, then ``(type, object)`` per watch event, in the
    API's JSON. Watches from the last resourceVersion seen in ``window``-second windows, lists
    again on 410 Gone (compacted: https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes),
    reconnects after a dropped connection; ends when cancelled or at ``deadline``
    (``time.monotonic()``), refuses to go on after :data:`FATAL_STATUS`."""
    version: str | None = None
    failures = 0
    while not cancel.event.is_set():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        span = window if left is None else max(1, min(window, math.ceil(left)))
        # The server ends a watch at whole seconds; a read timeout ends it at the deadline.
        timeout = (CONNECT_SECONDS, span + 10 if left is None else max(left, 0.01))
        try:
            if version is None:
                response = list_fn(*args, **query, _preload_content=False, _request_timeout=timeout)
                listing = json_answer(list_fn.__name__, response)
                version = listing["metadata"]["resourceVersion"]
                yield "LISTED", listing
            with cancel.holding(kube_watch.Watch()) as watcher:
                for event in watcher.stream(
                    list_fn, *args, **query, resource_version=version, timeout_seconds=span,
                    allow_watch_bookmarks=True, _request_timeout=timeout,
                ):  # fmt: skip
                    raw = event["raw_object"]
                    version = (raw.get("metadata") or {}).get("resourceVersion") or version
                    failures = 0
                    if event["type"] != "BOOKMARK":
                        yield event["type"], raw
                    if cancel.event.is_set() or (deadline and time.monotonic() > deadline):
                        return
        except ApiException as error:
            if error.status == 410:
                version = None  # expired: list again, and the caller reconciles the gap
                continue
            if error.status in FATAL_STATUS:  # one line, not the response's headers and body
                raise refused(list_fn.__name__, error) from None
            failures += 1
        except (urllib3.exceptions.HTTPError, OSError, ValueError, KeyError, TypeError, DrillError):
            failures += 1  # dropped, or an answer that is no list: list again, backing off
        if failures:
            cancel.event.wait(min(0.1 * 2**failures, 5.0))
