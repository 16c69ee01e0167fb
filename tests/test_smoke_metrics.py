"""A real Prometheus scrapes a ``spotproof smoke`` rehearsal: the counters it stores match
the rehearsal's own report, and every dashboard panel about the trainer or the batch
workers draws from them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spotproof.observability.dashboards import PANELS, Panel
from spotproof.runtime.metrics import names
from spotproof.smoke.emulation.object_stores import free_port
from tests.prometheus_server import Prometheus, running_prometheus

pytestmark = pytest.mark.processes

SCRAPE = "500ms"


@dataclass
class Scraped:
    prometheus: Prometheus
    report: dict
    started: float
    ended: float

    def total(self, expr: str) -> float:
        """The last value of ``expr`` Prometheus scraped. An instant query after the run
        finds nothing: once the target is gone, Prometheus marks its series stale."""
        answer = self.prometheus.query(f"last_over_time(({expr})[10m:500ms])")
        assert answer.ok, answer.error
        assert len(answer.result) == 1, (expr, answer.result)
        return float(answer.result[0]["value"][1])


def _scraped_rehearsal(workdir: Path, *arguments: str) -> Iterator[Scraped]:
    """``spotproof smoke ARGUMENTS`` serving its metrics to a real Prometheus that
    scrapes it every half second, and the report it wrote."""
    port = free_port()
    with running_prometheus(
        workdir / "prometheus", targets=[f"127.0.0.1:{port}"], scrape_interval=SCRAPE
    ) as prometheus:
        started = time.time()
        run = subprocess.run(
            [
                *(sys.executable, "-m", "spotproof.cli", "smoke", *arguments),
                *("--metrics-port", str(port), "--metrics-wait", "30"),
                *("--json", str(workdir / "report.json")),
            ],
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
            cwd=workdir,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        ended = time.time()
        time.sleep(1)  # the last scrape is appended to the head block as it is answered
        report = json.loads((workdir / "report.json").read_text())
        yield Scraped(prometheus, report, started, ended)


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    yield from _scraped_rehearsal(
        tmp_path_factory.mktemp("scraped"),
        *("--store", "file", "--preemptions", "2", "--hard-kills", "1"),
        *("--steps", "160", "--interval", "20", "--grace", "15"),
    )


@pytest.fixture(scope="module")
def batch_scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    yield from _scraped_rehearsal(
        tmp_path_factory.mktemp("batch"),
        *("--batch", "--queue", "sqs", "--table", "none", "--items", "24"),
        *("--workers", "2", "--preemptions", "1", "--hard-kills", "1"),
    )


def test_prometheus_counts_every_sigterm_the_rehearsal_sent(scraped: Scraped) -> None:
    sent = [i for i in scraped.report["interruptions"] if i["kind"] == "preemption"]
    assert scraped.total(names.STOP_SIGNALS.name) == len(sent) == 2


def test_prometheus_counts_every_final_save_the_rehearsal_saw_commit(scraped: Scraped) -> None:
    committed = [i for i in scraped.report["interruptions"] if i["final_save_seconds"] is not None]
    expr = f'{names.FINAL_SAVES.name}{{outcome="committed"}}'
    assert scraped.total(expr) == len(committed)
    assert scraped.total(f'sum({names.FINAL_SAVES.name}{{outcome!="committed"}})') == 0


def test_prometheus_counts_the_steps_lost_the_rehearsal_measured(scraped: Scraped) -> None:
    lost = sum(i["steps_lost"] for i in scraped.report["interruptions"])
    assert scraped.total(names.STEPS_LOST.name) == lost


def test_prometheus_counts_a_resume_for_every_replacement_that_found_a_checkpoint(
    scraped: Scraped,
) -> None:
    resumed = [i for i in scraped.report["interruptions"] if i["resumed_from"]]
    assert scraped.total(f"sum({names.RESUMES.name})") == len(resumed)


def test_the_newest_committed_step_is_where_training_ended(scraped: Scraped) -> None:
    assert scraped.total(names.LAST_COMMITTED_STEP.name) == scraped.report["config"]["total_steps"]


TRAINER_SERIES = {family.name for family in names.TRAINER}


def _reads(panel: Panel) -> set[str]:
    """The metric families a panel's queries read."""
    return {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for expr in panel.exprs
        for name in re.findall(r"\b[a-z_]+_[a-z_]+\b(?=[{\[ )]|$)", expr)
        if name.startswith(("spotproof_", "kube_"))
    }


TRAINER_PANELS = [panel for panel in PANELS if _reads(panel) and _reads(panel) <= TRAINER_SERIES]


def test_the_trainer_panels_are_the_dashboards_first_six() -> None:
    assert [panel.title for panel in TRAINER_PANELS] == [panel.title for panel in PANELS[:6]]


@pytest.mark.parametrize("panel", TRAINER_PANELS, ids=lambda panel: panel.title)
def test_every_trainer_panel_draws_series_from_the_rehearsal(
    scraped: Scraped, panel: Panel
) -> None:
    for expr in panel.exprs:
        answer = scraped.prometheus.query_range(expr, scraped.started, scraped.ended, 1)
        assert answer.ok, (expr, answer.error)
        assert answer.result, f"{panel.title}: {expr} drew nothing over the rehearsal"


def test_prometheus_counts_every_result_the_batch_rehearsal_stored(batch_scraped: Scraped) -> None:
    totals = batch_scraped.report["totals"]
    assert batch_scraped.total(f"sum({names.ITEMS_DONE.name})") == totals["done"]
    assert batch_scraped.total(f"sum({names.ITEMS_ALREADY_DONE.name})") == totals["already_done"]
    assert batch_scraped.total(f"sum({names.ITEMS_DUPLICATE.name})") == totals["computed_twice"]


def test_prometheus_counts_every_item_the_batch_rehearsal_handed_back(
    batch_scraped: Scraped,
) -> None:
    handed_back = batch_scraped.report["totals"]["handed_back"]
    assert batch_scraped.total(f"sum({names.ITEMS_HANDED_BACK.name})") == handed_back


BATCH_SERIES = {family.name for family in names.BATCH}
BATCH_PANELS = [panel for panel in PANELS if _reads(panel) and _reads(panel) <= BATCH_SERIES]


def test_the_batch_panels_are_the_dashboards_last_three() -> None:
    assert [panel.title for panel in BATCH_PANELS] == [panel.title for panel in PANELS[-3:]]


@pytest.mark.parametrize("panel", BATCH_PANELS, ids=lambda panel: panel.title)
def test_every_batch_panel_draws_series_from_the_batch_rehearsal(
    batch_scraped: Scraped, panel: Panel
) -> None:
    for expr in panel.exprs:
        answer = batch_scraped.prometheus.query_range(
            expr, batch_scraped.started, batch_scraped.ended, 1
        )
        assert answer.ok, (expr, answer.error)
        assert answer.result, f"{panel.title}: {expr} drew nothing over the rehearsal"
