#!/usr/bin/env python3
"""Writes .github/release-requirements.txt: what the release workflow's build job installs,
every file by its sha256, resolved by pip for the runner as ``spotproof ci init`` resolves
its locks (``spotproof.ci.lock``).

    .venv/bin/python scripts/lock_release_tools.py

It holds the build frontend (``build``), the build backend pyproject.toml's build-system
names (the release builds with ``--no-isolation``, so nothing unhashed is fetched for it),
and the package's own dependencies, which the job's install check needs.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from spotproof.ci import lock

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / ".github" / "release-requirements.txt"
FRONTEND = "build>=1.2"


def requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [FRONTEND, *project["build-system"]["requires"], *project["project"]["dependencies"]]


def main() -> int:
    wanted = requirements()
    try:
        pins = lock.resolve(wanted)
    except lock.LockError as error:
        print(f"lock_release_tools: {error}", file=sys.stderr)
        return 1
    LOCK.write_text(
        "# What the release workflow's build job installs, every file by its sha256:\n"
        "#   python -m pip install --require-hashes -r .github/release-requirements.txt\n"
        f"# For: {', '.join(wanted)} (CPython {lock.RUNNER_PYTHON}, Linux x86_64).\n"
        "# Written by scripts/lock_release_tools.py; run it again to update.\n"
        + "\n".join(pin.line() for pin in pins)
        + "\n"
    )
    print(f"Wrote {LOCK.relative_to(ROOT)}: {len(pins)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
