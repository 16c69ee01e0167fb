"""A copy of this checkout as git sees it (tracked files, and new ones it does not ignore):
what a build from a clean clone would read, for the tests that build the package."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support import REPO


def copy_checkout(destination: Path) -> Path:
    """Copies the checkout's files into ``destination`` and returns it."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination
