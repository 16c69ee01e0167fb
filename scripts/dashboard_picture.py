"""Draw docs/dashboard.png: the dashboard's panels from a real Prometheus's data.

No Grafana server can run here, so the README's picture is drawn the way a dashboard
would draw it: Debian's ``prometheus`` scrapes two ``spotproof smoke`` rehearsals every
half second (a trainer preempted twice and killed once, then batch workers preempted and
killed), and each panel's own queries (``observability.dashboards.PANELS``, the very
strings both dashboards carry) are asked of it over the run with ``query_range``. The two
Pending panels read kube-state-metrics, which only a cluster has: they are left out and
the caption says so.

    .venv/bin/python scripts/dashboard_picture.py [--out docs/dashboard.png]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spotproof.observability.dashboards import PANELS, Panel
from spotproof.smoke.emulation.object_stores import free_port
from tests.prometheus_server import Prometheus, running_prometheus

REHEARSALS = {
    "trainer": ("--store", "file", "--preemptions", "2", "--hard-kills", "1", "--steps", "200"),
    "batch": ("--batch", "--queue", "sqs", "--table", "none", "--items", "40", "--workers", "2"),
}


def rehearse(prometheus_port_targets: list[int], workdir: Path) -> tuple[float, float]:
    """Both rehearsals, one after the other, each on its own metrics port."""
    started = time.time()
    for (name, arguments), port in zip(REHEARSALS.items(), prometheus_port_targets, strict=True):
        print(f"rehearsal: {name}", flush=True)
        subprocess.run(
            [
                *(sys.executable, "-m", "spotproof.cli", "smoke", *arguments),
                *("--metrics-port", str(port), "--metrics-wait", "30"),
                *("--timeline", str(workdir / f"{name}.png")),
            ],
            check=True,
            cwd=workdir,
            stdout=subprocess.DEVNULL,
        )
    return started, time.time()


def draw(prometheus: Prometheus, panels: list[Panel], start: float, end: float, out: Path) -> None:
    columns = 3
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(15, 3.2 * rows), squeeze=False)
    step = max(1.0, (end - start) / 300)
    for axis, panel in zip(axes.flat, panels, strict=False):
        for query in panel.queries:
            answer = prometheus.query_range(query.expr, start, end, step)
            if not answer.ok:
                raise SystemExit(f"{panel.title}: {query.expr}: {answer.error}")
            for series in answer.result:
                times = [float(t) - start for t, _ in series["values"]]
                values = [float(v) for _, v in series["values"]]
                label = query.legend.format(**series["metric"]) if query.legend else None
                axis.plot(times, values, label=label, linewidth=1.4)
        axis.set_title(panel.title, fontsize=10)
        axis.set_xlabel("seconds into the rehearsals", fontsize=8)
        axis.tick_params(labelsize=8)
        if any(q.legend for q in panel.queries):
            axis.legend(fontsize=7, loc="upper left")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(panels) :]:
        axis.axis("off")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    figure.suptitle(
        "spotproof dashboard panels, drawn from a real Prometheus scraping `spotproof smoke` "
        f"(trainer, then --batch), {stamp}. Not shown: the two Pending panels "
        "(kube-state-metrics, on a cluster only).",
        fontsize=10,
    )
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    args = parser.parse_args()
    ports = [free_port() for _ in REHEARSALS]
    with tempfile.TemporaryDirectory(prefix="spotproof-dashboard-") as scratch:
        workdir = Path(scratch)
        with running_prometheus(
            workdir / "prometheus",
            targets=[f"127.0.0.1:{port}" for port in ports],
            scrape_interval="500ms",
        ) as prometheus:
            start, end = rehearse(ports, workdir)
            time.sleep(1)
            drawn = [p for p in PANELS if "kube_pod" not in " ".join(p.exprs)]
            draw(prometheus, drawn, start, end, args.out.resolve())


if __name__ == "__main__":
    main()
