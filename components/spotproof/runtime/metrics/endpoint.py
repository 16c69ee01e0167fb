"""``/metrics`` over HTTP, and a last scrape before the process leaves.

A pod's final counts (its SIGTERM, its final save) exist for a few seconds only: the
process exits once the save is done, and Prometheus scrapes on its own schedule (every 30
to 60 s by default on the managed collectors), so a trainer that leaves at once takes its
most telling numbers with it. :meth:`Endpoint.await_scrape` is how it waits for one more
scrape, bounded by the grace left: the kubelet's SIGKILL ends the wait in any case, and a
node that vanishes with it ends everything. A scrape counts when it began after the wait
did and its response has been written in full: it read everything recorded before.

prometheus-client's own ``start_http_server`` serves the same text format; this server is
ours only because it must tell when a scrape happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spotproof.runtime.metrics.names import METRICS_PATH

SERIAL_WAIT_SECONDS = 1.0
"""How long a scrape waits for the one before it to finish (milliseconds, normally)."""


def _nothing() -> None:
    return None


class Endpoint:
    """Serves ``registry`` at ``/metrics`` on ``port`` (0: a free one) until :meth:`close`.

    ``scraped``: called once a scrape has been served in full, and before a wait for a last
    scrape: the releasing of counts held until the registry's series were first read at
    zero (``recorders.Registry``). A process that leaves before any scrape has read it
    releases them for its last scrape: a plain Prometheus reads them there; Managed Service
    for Prometheus, which drops a series' first sample, cannot."""

    def __init__(
        self, registry: Any, port: int, host: str = "", *, scraped: Callable[[], None] = _nothing
    ) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

        self._released = scraped
        self._scraped = threading.Condition()
        self._serving = threading.Lock()
        self.last_scrape = 0.0
        """``time.monotonic()`` when the last scrape served in full began; 0: never."""
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != METRICS_PATH:
                    self.send_error(404, f"only {METRICS_PATH} is served")
                    return
                # One scrape at a time, from reading the registry to noting it served: a
                # client that has read a scrape in full may ask again before this thread
                # has released what that scrape made visible, and must still see it.
                # Bounded, so that a client that does not read holds no one else up.
                serving = endpoint._serving.acquire(timeout=SERIAL_WAIT_SECONDS)
                try:
                    began = time.monotonic()
                    body = generate_latest(registry)
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                    endpoint._note_scrape(began)
                finally:
                    if serving:
                        endpoint._serving.release()

            def log_message(self, format: str, *args: Any) -> None:
                return  # a scrape every few seconds is no news for the pod's log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True).start()

    def _note_scrape(self, began: float) -> None:
        self._released()
        with self._scraped:
            self.last_scrape = max(self.last_scrape, began)
            self._scraped.notify_all()

    def await_scrape(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a scrape that starts from now; whether one came."""
        self._released()
        since = time.monotonic()
        deadline = since + max(0.0, seconds)
        with self._scraped:
            while self.last_scrape <= since:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._scraped.wait(left)
        return True

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
