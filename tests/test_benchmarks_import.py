"""Every benchmark imports against the package as it stands: a benchmark is run by hand,
rarely, so a module of the package moved or renamed would otherwise break it unnoticed
until the next person needs its numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_every_benchmark_module_imports() -> None:
    modules = sorted(path.stem for path in BENCHMARKS.glob("*.py"))
    assert modules, BENCHMARKS
    script = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
