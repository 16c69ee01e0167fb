"""Shared fixtures: real plans of the real stacks, and throwaway projects for bad input."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotproof.plan import PlanResult
from spotproof.smoke.emulation.object_stores import Bucket, emulated
from tests.checkout import copy_checkout
from tests.support import INSTALLED_SIZES, REPO, plan_of

TIMED_REAL_PROCESSES = frozenset(
    {
        "test_crash_consistency.py",
        "test_smoke_gang.py",
        "test_batch.py",
        "test_storage_deadlines.py",
    }
)
"""Files whose real processes race real deadlines (grace periods, leases, kills aimed
inside uploads): run one after another on one worker, never against each other on a
2-core machine, where two of them together starved a gang's final save past its grace."""


TIMED_GROUP = "timed-real-processes"

LONGEST_FIRST = (
    "test_packaging.py",
    TIMED_GROUP,
    "test_user_rehearsal.py",
    "test_rehearsal.py",
    "test_in_place_restore.py",
)
"""The units that take longest (measured), handed out before the rest: one started last
would keep the whole run waiting for it while the other workers sit idle. The others
follow in xdist's order (most tests first)."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Each file is one unit of work for a worker (as ``--dist loadfile`` makes it, so
    module fixtures and cached runs are built once), except the timed files, which are
    one unit together and so run one after another on one worker; the longest units
    (:data:`LONGEST_FIRST`) are handed out first.

    A scheduler of our own rather than ``xdist_group`` marks: xdist 3.8 groups marked
    tests by rewriting ``item._nodeid``, which pytest 9 no longer reads (``Node.nodeid``
    comes from ``_id``), so the marks spread one file's tests over both workers."""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return TIMED_GROUP if Path(path).name in TIMED_REAL_PROCESSES else path

        def _assign_work_unit(self, node: Any) -> None:
            if not getattr(self, "_longest_first", False):
                self._longest_first = True
                rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
                units = sorted(
                    self.workqueue.items(),
                    key=lambda unit: rank.get(Path(unit[0]).name, len(rank)),
                )
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return FileGroups(config, log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist, a worker hands its measured sizes to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["installed_sizes"] = dict(INSTALLED_SIZES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    INSTALLED_SIZES.update(getattr(node, "workeroutput", {}).get("installed_sizes", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The installed size of every clean environment ``test_packaging`` built."""
    if INSTALLED_SIZES:
        terminalreporter.section("installed sizes (site-packages, over a bare venv)")
        for label, size in INSTALLED_SIZES.items():
            terminalreporter.write_line(f"{size / 2**20:8.1f} MiB  {label}")


@pytest.fixture
def gke_dev() -> PlanResult:
    return plan_of("gke-dev")


@pytest.fixture
def gke_prod() -> PlanResult:
    return plan_of("gke-prod")


@pytest.fixture
def eks_dev() -> PlanResult:
    return plan_of("eks-dev")


@pytest.fixture
def eks_prod() -> PlanResult:
    return plan_of("eks-prod")


@pytest.fixture
def aks_dev() -> PlanResult:
    return plan_of("aks-dev")


@pytest.fixture
def aks_prod() -> PlanResult:
    return plan_of("aks-prod")


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Path]:
    """A copy of this project whose ``stacks/`` holds one stack, with its config given."""

    def make(config: dict[str, Any], stack: str = "gke-test", program: str | None = None) -> Path:
        root = tmp_path / "project"
        (root / "stacks").mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
        (root / "infra").mkdir(exist_ok=True)
        main = program or (REPO / "infra" / "__main__.py").read_text()
        (root / "infra" / "__main__.py").write_text(main)
        (root / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
        return root

    return make


# --- object stores: one real emulator per store for the whole session -------------------

STORES = ("file", "s3", "gcs", "azure")


@pytest.fixture(scope="session")
def emulators() -> Iterator[dict[str, Bucket]]:
    """Started lazily: a test run that needs no emulator starts none."""
    with contextlib.ExitStack() as stack:
        started: dict[str, Bucket] = {}

        class Lazy(dict[str, Bucket]):
            def __missing__(self, store: str) -> Bucket:
                started[store] = stack.enter_context(emulated(store))
                self[store] = started[store]
                return started[store]

        yield Lazy()


@pytest.fixture(params=STORES)
def bucket(
    request: pytest.FixtureRequest, emulators: dict[str, Bucket], monkeypatch: pytest.MonkeyPatch
) -> Bucket:
    """Each store in turn, with this process's environment pointing at its emulator and a
    fresh prefix for the test."""
    shared = emulators[request.param]
    for key, value in shared.env.items():
        monkeypatch.setenv(key, value)
    return Bucket(shared.store, shared.prefix(f"t-{uuid.uuid4().hex[:12]}"), dict(shared.env))


# --- the package as its users get it: one wheel for the whole run ---------------------


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the checkout (files tracked, or new and not ignored) the usual
    way, ``python -m build --wheel`` after ``npm ci``, with no step of ours before it: the
    build bundles Karpenter's schemas itself (``setup.py``), as ``pip wheel .`` and ``pip
    install .`` do; ``test_packaging``'s tests of the aws install check they are there.

    Built once for the run: under pytest-xdist, by the first worker that asks, in the run's
    own temporary folder (the workers' common parent), the others waiting on its lock."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    dist = root / "wheel"
    with open(root / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dist.is_dir():
            source = copy_checkout(Path(tmp_path_factory.mktemp("source")))
            (source / "node_modules").symlink_to(REPO / "node_modules")
            built = Path(tmp_path_factory.mktemp("dist"))
            command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(built)]
            command.append(str(source))
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
            built.rename(dist)  # only a whole build: a failed one leaves nothing to reuse
    [wheel] = dist.glob("spotproof-*.whl")
    return wheel
