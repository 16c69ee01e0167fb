"""``spotproof ci init`` writes the pull-request workflow into the project's repository;
``spotproof ci stacks`` prints the stacks the workflow's plan jobs run over."""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

from spotproof import __version__
from spotproof.ci import workflow
from spotproof.ci.stacks import StackListError, program_virtualenv, project_root, stacks
from spotproof.commands import EXIT_BAD_INPUT, EXIT_OK


def init(project_dir: Path | None, force: bool, to_stdout: bool) -> int:
    try:
        root = project_root((project_dir or Path.cwd()).resolve())
        found = stacks(root)
        virtualenv = program_virtualenv(root)
    except StackListError as error:
        return _bad(f"spotproof ci init: {error}")
    repository = _repository_root(root)
    text = workflow.render(
        _installed_version(), Path(os.path.relpath(root, repository)).as_posix(), virtualenv
    )
    if to_stdout:
        print(text, end="")
        return EXIT_OK
    path = repository / workflow.WORKFLOW_PATH
    if path.exists() and not force:
        return _bad(f"spotproof ci init: {path} exists; allowed: --force to replace it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        return _bad(f"spotproof ci init: cannot write {path}: {error.strerror}")
    planned = ", ".join(f"{s.name} ({s.extra})" for s in found) or "none yet"
    print(f"Wrote {path}: each pull request plans {planned}")
    return EXIT_OK


def list_stacks(project_dir: Path | None) -> int:
    try:
        found = stacks(project_root((project_dir or Path.cwd()).resolve()))
    except StackListError as error:
        return _bad(f"spotproof ci stacks: {error}")
    print(json.dumps([{"stack": s.name, "cloud": s.cloud, "extra": s.extra} for s in found]))
    return EXIT_OK


def _repository_root(root: Path) -> Path:
    """Where ``.github/`` belongs: the git repository around the project, else the project."""
    for folder in [root, *root.parents]:
        if (folder / ".git").exists():
            return folder
    return root


def _installed_version() -> str:
    try:
        return metadata.version("spotproof")
    except metadata.PackageNotFoundError:
        return __version__


def _bad(line: str) -> int:
    print(line, file=sys.stderr)
    return EXIT_BAD_INPUT
