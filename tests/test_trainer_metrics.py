"""The trainer's metrics, scraped over HTTP from a real trainer process as Prometheus
would: what it counts while training, on a SIGTERM, and when it resumes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spotproof.runtime import exit_codes, metrics
from spotproof.runtime.metrics import names
from spotproof.runtime.settings import ConfigError

pytestmark = pytest.mark.processes

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@dataclass
class Trainer:
    popen: subprocess.Popen[str]
    port: int

    def events(self) -> list[dict]:
        assert self.popen.stdout is not None
        return [json.loads(line) for line in self.popen.stdout.read().splitlines()]

    def wait_for_scrape_to_show(self, name: str, at_least: float, timeout: float = 60) -> Samples:
        deadline = time.monotonic() + timeout
        while True:
            try:
                samples = scrape(self.port)
                if samples.get((name, ()), 0) >= at_least:
                    return samples
            except OSError:
                pass  # not serving yet: torch is still importing
            assert time.monotonic() < deadline, f"{name} never reached {at_least}"
            time.sleep(0.2)


def start_trainer(
    url: str,
    grace: float = 30,
    steps: int = 100_000,
    step_seconds: float = 0.01,
    interval: int = 10,
) -> Trainer:
    port = free_port()
    env = {
        **os.environ,
        "CHECKPOINT_URL": url,
        "CHECKPOINT_INTERVAL": str(interval),
        "TOTAL_STEPS": str(steps),
        "MODEL_MB": "1",
        "STEP_SECONDS": str(step_seconds),
        "GRACE_SECONDS": str(grace),
        "METRICS_PORT": str(port),
    }
    popen = subprocess.Popen(
        [sys.executable, "-m", "spotproof.smoke.train"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return Trainer(popen, port)


@dataclass
class Story:
    """One trainer preempted after three periodic saves, then its replacement."""

    before: Samples
    """Scraped after the third periodic commit."""
    after_signal: Samples
    """The scrape the preempted trainer waited for."""
    exit_code: int
    lingered: bool
    """Whether the preempted trainer was still running, waiting, a second after its
    final save committed."""
    events: list[dict]
    resumed: Samples
    resumed_events: list[dict]


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    url = f"file://{tmp_path_factory.mktemp('metrics')}/run"
    first = start_trainer(url)
    before = first.wait_for_scrape_to_show(names.STEP.name, 35)
    first.popen.send_signal(signal.SIGTERM)
    time.sleep(1.5)  # the final save of a 1 MiB state takes milliseconds
    lingered = first.popen.poll() is None
    after_signal = scrape(first.port)
    exit_code = first.popen.wait(30)
    events = first.events()
    # No periodic save for a long while: its scrape shows what it resumed from.
    second = start_trainer(url, interval=100_000)
    second.wait_for_scrape_to_show(names.STEP.name, 1)
    # Counts made before the first scrape show from a scrape after it (GMP drops a series'
    # first sample: runtime.metrics.recorders.Registry). The trainer releases them once
    # it has sent the first scrape in full, which may be just after this client read it;
    # the bytes are the resume's last count (recorders.TrainerMetrics._on_resumed).
    resumed = second.wait_for_scrape_to_show(names.RESTORE_BYTES.name, 1)
    second.popen.send_signal(signal.SIGTERM)
    second.wait_for_scrape_to_show(names.STOP_SIGNALS.name, 1)
    second.popen.wait(30)
    yield Story(before, after_signal, exit_code, lingered, events, resumed, second.events())


def test_periodic_saves_are_counted_as_the_trainer_commits_them(story: Story) -> None:
    committed = value(story.before, names.SAVES.name, kind="periodic")
    assert committed >= 3
    assert value(story.before, f"{names.SAVE_SECONDS.name}_count", kind="periodic") == committed
    assert value(story.before, f"{names.STALL_SECONDS.name}_count") == committed
    assert value(story.before, names.SAVE_BYTES.name, kind="periodic") > committed * 2**20 * 0.9
    step = value(story.before, names.LAST_COMMITTED_STEP.name)
    assert step % 10 == 0 and step >= 30


def test_a_trainer_reports_its_interval_in_steps_and_in_seconds(story: Story) -> None:
    assert value(story.before, names.INTERVAL_STEPS.name) == 10
    # ten steps of at least 10 ms each
    assert 0.1 <= value(story.before, names.INTERVAL_SECONDS.name) < 10


def test_the_last_commit_time_is_the_wall_clock_of_the_commit(story: Story) -> None:
    assert abs(value(story.before, names.LAST_COMMIT_TIME.name) - time.time()) < 120


def test_a_preempted_trainer_waits_for_one_more_scrape_before_it_leaves(story: Story) -> None:
    assert story.lingered
    assert story.exit_code == exit_codes.PREEMPTED
    assert value(story.after_signal, names.STOP_SIGNALS.name) == 1
    assert value(story.after_signal, names.FINAL_SAVES.name, outcome="committed") == 1
    assert value(story.after_signal, names.FINAL_SAVES.name, outcome="late") == 0
    assert value(story.after_signal, names.STEPS_LOST.name) == 0


def test_the_grace_left_at_the_final_commit_is_observed(story: Story) -> None:
    final = next(e for e in story.events if e["event"] == "final_save")
    assert final["outcome"] == "committed"
    assert value(story.after_signal, f"{names.FINAL_SAVE_GRACE_LEFT.name}_count") == 1
    assert value(story.after_signal, f"{names.FINAL_SAVE_GRACE_LEFT.name}_sum") == pytest.approx(
        final["grace_left"]
    )


def test_a_replacement_counts_a_resume_from_the_final_save(story: Story) -> None:
    final = next(e for e in story.events if e["event"] == "checkpoint" and e["kind"] == "final")
    assert value(story.resumed, names.RESUMES.name, checkpoint="final") == 1
    assert value(story.resumed, names.RESUMES.name, checkpoint="periodic") == 0
    assert value(story.resumed, names.LAST_COMMITTED_STEP.name) == final["step"]
    assert value(story.resumed, names.RESTORE_BYTES.name) == final["bytes"]
    assert value(story.resumed, f"{names.RESTORE_SECONDS.name}_count") == 1


def test_the_replacement_knows_when_the_checkpoint_it_resumed_was_saved(story: Story) -> None:
    resumed = next(e for e in story.resumed_events if e["event"] == "resumed")
    assert value(story.resumed, names.LAST_COMMIT_TIME.name) == resumed["committed_at"]
    assert abs(resumed["committed_at"] - time.time()) < 120


def test_a_preempted_trainer_nobody_scrapes_leaves_within_its_grace(tmp_path: Path) -> None:
    trainer = start_trainer(f"file://{tmp_path}/run", grace=5)
    trainer.wait_for_scrape_to_show(names.STEP.name, 5)
    trainer.popen.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert trainer.popen.wait(30) == exit_codes.PREEMPTED
    # It waited for a scrape until EXIT_MARGIN_SECONDS before the end of its grace, then
    # left on its own, before the kubelet's SIGKILL would have.
    assert 5 - metrics.EXIT_MARGIN_SECONDS - 0.5 < time.monotonic() - signalled < 5


def test_a_port_already_taken_is_a_one_line_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"^METRICS_PORT={port}: cannot serve on it"):
            metrics.served({"METRICS_PORT": str(port)}, names.TRAINER)


def test_no_metrics_port_serves_nothing() -> None:
    assert metrics.served({}, names.TRAINER) is None


def test_a_reclaim_before_the_first_step_after_a_resume_loses_nothing_and_says_so(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}/run"
    first = start_trainer(url)
    first.wait_for_scrape_to_show(names.STEP.name, 15)
    first.popen.send_signal(signal.SIGTERM)
    first.wait_for_scrape_to_show(names.STOP_SIGNALS.name, 1)
    assert first.popen.wait(30) == exit_codes.PREEMPTED
    second = start_trainer(url)
    # Served once the guard is up: the signal lands while the checkpoint is restored.
    second.wait_for_scrape_to_show(names.INTERVAL_STEPS.name, 10)
    second.popen.send_signal(signal.SIGTERM)
    samples = second.wait_for_scrape_to_show(names.STOP_SIGNALS.name, 1)
    while value(samples, names.FINAL_SAVES.name, outcome="committed") == 0:
        samples = second.wait_for_scrape_to_show(names.STOP_SIGNALS.name, 1)
    assert value(samples, names.FINAL_SAVES.name, outcome="refused") == 0
    assert value(samples, names.STEPS_LOST.name) == 0
    assert second.popen.wait(30) == exit_codes.PREEMPTED
