"""What ``spotproof``'s start imports, checked by name (issue 46): a wall-clock limit would
fail on a busy machine and let a regression pass on an idle one.

The CLI only parses; each command's module is imported when that command runs, so parsing
a command line imports none of them, nor fsspec (``runtime.storage.opening``), nor
``importlib.metadata`` (read by ``--version`` alone). Planning a stack imports what its
Pulumi program and the checks need, and nothing that only another command (the rehearsal's
emulators, the drill, ``status``, ``check``) or a running trainer's store SDK needs.
docs/performance.md has the figures. Each test starts a fresh interpreter (one plans
``gke-dev`` in it), hence the ``processes`` mark.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO

pytestmark = pytest.mark.processes

CLI_NEVER_IMPORTS = {
    "fsspec": "the stores' driver registry: only opening a store needs it",
    "importlib.metadata": "read by --version alone",
    "pulumi": "the plan command's, imported when it runs",
    "spotproof.plan": "a command's module, imported when that command runs",
    "spotproof.check.command": "a command's module, imported when that command runs",
    "spotproof.runtime.storage.opening": "open_store, and fsspec with it",
    "spotproof.smoke.emulation.object_stores": (
        "the rehearsal's; --store choices come from the registry"
    ),
    "spotproof.smoke.emulation.queues": "the rehearsal's; --queue choices come from the registry",
}
"""Modules the CLI must not import to parse a command line, each with why."""

PLAN_NEVER_IMPORTS = {
    "spotproof.smoke.emulation.object_stores": "smoke's alone",
    "spotproof.smoke.emulation.queues": "smoke's alone",
    "spotproof.smoke.command": "smoke's alone",
    "spotproof.drill": "the drill's alone",
    "spotproof.status": "status' alone",
    "spotproof.check.command": "check's alone",
    "spotproof.ci": "ci's alone",
    "boto3": "an S3 store's or queue's SDK, for a running trainer or worker",
    "botocore": "an S3 store's SDK, for a running trainer",
    "gcsfs": "a GCS store's driver, for a running trainer",
    "adlfs": "an Azure store's driver, for a running trainer",
    "torch": "the trainer's",
    "matplotlib": "the rehearsal's and the drill's timelines",
}
"""Modules the plan command must not import, with the command or process that needs each."""


def _imported_by(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code``."""
    report = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_the_cli_parses_a_plan_without_importing_any_command() -> None:
    imported = _imported_by(
        "from spotproof import cli\ncli._parser().parse_args(['plan', '--stack', 'gke-dev'])"
    )
    assert {name: why for name, why in CLI_NEVER_IMPORTS.items() if name in imported} == {}


def test_planning_a_stack_imports_no_other_commands_modules_nor_any_stores_sdk() -> None:
    imported = _imported_by(
        "import contextlib, io\nfrom spotproof import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert cli.main(['plan', '--stack', 'gke-dev']) == 0"
    )
    assert {name: why for name, why in PLAN_NEVER_IMPORTS.items() if name in imported} == {}
