"""``spotproof ci init`` writes the pull-request workflow into the project's repository, with
the locks its jobs install from (``ci.lock``) and the spotproof the user chose
(``ci.artifact``); ``spotproof ci stacks`` prints the stacks the workflow's plan jobs run
over."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from spotproof.ci import lock, workflow
from spotproof.ci.artifact import ChoiceError, parse
from spotproof.ci.stacks import StackListError, program_virtualenv, project_root, stacks
from spotproof.commands import EXIT_BAD_INPUT, EXIT_OK


def init(project_dir: Path | None, force: bool, to_stdout: bool, spotproof: str | None) -> int:
    try:
        root = project_root((project_dir or Path.cwd()).resolve())
        found = stacks(root)
        virtualenv = program_virtualenv(root)
    except StackListError as error:
        return _bad(f"spotproof ci init: {error}")
    repository = _repository_root(root)
    try:
        choice = parse(spotproof, repository)
    except ChoiceError as error:
        return _bad(f"spotproof ci init: --spotproof {error}")
    if choice.kind == "git" and any(s.cloud == "eks" for s in found):
        return _bad(
            f"spotproof ci init: --spotproof {choice.given}: a build from a commit carries no "
            "bundled Karpenter schemas, which the EKS stacks' plans need; allowed for EKS: a "
            "release wheel's URL with its sha256, or a wheel built with `make dist`"
        )
    text = workflow.render(choice, Path(os.path.relpath(root, repository)).as_posix(), virtualenv)
    if to_stdout:
        print(text, end="")
        return EXIT_OK
    path = repository / workflow.WORKFLOW_PATH
    if path.exists() and not force:
        return _bad(f"spotproof ci init: {path} exists; allowed: --force to replace it")
    try:
        locks = lock.write(choice, repository, [s.extra for s in found])
    except lock.LockError as error:
        return _bad(f"spotproof ci init: {error}")
    except OSError as error:
        return _bad(f"spotproof ci init: cannot write the locks: {error.strerror}")
    try:
        if choice.wheel_file is not None:
            target = repository / choice.location
            if not target.exists() or not target.samefile(choice.wheel_file):
                shutil.copyfile(choice.wheel_file, target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        return _bad(f"spotproof ci init: cannot write {path}: {error.strerror}")
    planned = ", ".join(f"{s.name} ({s.extra})" for s in found) or "none yet"
    print(f"Wrote {path}: each pull request plans {planned}")
    kept = [p.relative_to(repository).as_posix() for p in locks]
    if choice.wheel_file is not None:
        kept.append(choice.location)
    print(f"Wrote the locks its jobs install from, each file by its sha256: {', '.join(kept)}")
    print("Commit them with the workflow.")
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


def _bad(line: str) -> int:
    print(line, file=sys.stderr)
    return EXIT_BAD_INPUT
