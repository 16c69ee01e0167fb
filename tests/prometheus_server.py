"""A real Prometheus for tests: Debian's ``prometheus`` binary on a free loopback port.

``promtool`` checks rule files but cannot check a bare query, and a query's meaning (does it
return series for what was scraped?) needs a server anyway. :func:`running_prometheus`
starts one with an empty TSDB in a temporary folder, scraping the given static targets (or
nothing), waits until ``/-/ready`` answers 200, and stops it on leaving. Queries go through
the HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/): a query that
does not parse is answered 400 with ``errorType`` ``bad_data``, which :class:`Answer` keeps
rather than raising, so a test can assert on it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spotproof.smoke.emulation.object_stores import free_port

PROMETHEUS = "prometheus"
"""Debian's package installs it as /usr/bin/prometheus (2.42 in bookworm)."""
READY_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0


class PrometheusError(RuntimeError):
    pass


@dataclass(frozen=True)
class Answer:
    """One API response: the HTTP status and the JSON body, whatever they say."""

    http_status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.http_status == 200 and self.body.get("status") == "success"

    @property
    def error_type(self) -> str:
        return str(self.body.get("errorType", ""))

    @property
    def error(self) -> str:
        return str(self.body.get("error", ""))

    @property
    def result(self) -> list[dict[str, Any]]:
        """The series (or samples) of a successful query; raises with the server's own
        error otherwise."""
        if not self.ok:
            raise PrometheusError(f"query failed ({self.http_status}): {self.error}")
        result: list[dict[str, Any]] = self.body["data"]["result"]
        return result


class Prometheus:
    """A started server: its address and the API calls tests make."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def query(self, expr: str, at: float | None = None) -> Answer:
        """An instant query (``/api/v1/query``), at ``at`` (Unix seconds) or now."""
        form = {"query": expr} | ({"time": f"{at}"} if at is not None else {})
        return self._post("/api/v1/query", form)

    def query_range(self, expr: str, start: float, end: float, step: float) -> Answer:
        """A range query (``/api/v1/query_range``) from ``start`` to ``end``, every ``step``
        seconds."""
        form = {"query": expr, "start": f"{start}", "end": f"{end}", "step": f"{step}"}
        return self._post("/api/v1/query_range", form)

    def active_targets(self) -> list[dict[str, Any]]:
        """The scrape targets and their health (``up``, ``down``, ``unknown``)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active") as response:
            targets: list[dict[str, Any]] = json.load(response)["data"]["activeTargets"]
        return targets

    def _post(self, path: str, form: dict[str, str]) -> Answer:
        data = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method="POST")
        try:
            with urllib.request.urlopen(request) as response:
                return Answer(response.status, json.load(response))
        except urllib.error.HTTPError as error:
            # 400 (bad_data), 422 (execution), 503 (timeout): the body says which.
            return Answer(error.code, json.load(error))


def config(targets: Sequence[str] = (), scrape_interval: str = "1s") -> dict[str, Any]:
    """A configuration scraping ``targets`` (``host:port``) under one job, or nothing."""
    scrape_configs = (
        [{"job_name": "spotproof", "static_configs": [{"targets": list(targets)}]}]
        if targets
        else []
    )
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": scrape_configs,
    }


@contextmanager
def running_prometheus(
    workdir: Path, targets: Sequence[str] = (), scrape_interval: str = "1s"
) -> Iterator[Prometheus]:
    """A Prometheus started in ``workdir`` (its config, TSDB and log), stopped on leaving."""
    binary = shutil.which(PROMETHEUS)
    if binary is None:
        raise PrometheusError(
            "the prometheus binary is not on PATH: install Debian's package "
            "(apt-get install prometheus)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config(targets, scrape_interval)))
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as log_stream:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log_stream,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: Prometheus, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise PrometheusError(
                f"prometheus exited with code {server.process.returncode} while starting:\n"
                f"{_tail(server.log)}"
            )
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise PrometheusError(f"prometheus not ready after {timeout:.0f} s:\n{_tail(server.log)}")


def _tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
