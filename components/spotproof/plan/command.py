"""``spotproof plan --stack NAME | --all [--format ...]``: plan, write, report.

What the command does with its arguments (the parser is ``cli``'s): plan each stack
(``spotproof.plan``), write its Kubernetes objects and JSON report where asked, and print
the report in the chosen format (``plan.reporting.formats``). The exit status is the worst
stack's (``spotproof.commands``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotproof.commands import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from spotproof.extras import not_installed
from spotproof.fleet import SpecError
from spotproof.plan.config.project import PlanInputError, find_project
from spotproof.plan.config.sources import Location
from spotproof.plan.config.stack import StackConfig
from spotproof.plan.recording import manifests
from spotproof.plan.reporting import formats
from spotproof.plan.run import load, plan
from spotproof.terminal import paint


def run(args: argparse.Namespace) -> int:
    """Plan the stack (or every stack with ``--all``) and report; the exit status."""
    if args.all:
        try:
            project = find_project((args.project_dir or Path.cwd()).resolve())
        except PlanInputError as error:
            print(f"spotproof plan: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
        stacks = project.stacks()
        if not stacks:
            print(f"spotproof plan: no stack files in {project.stack_dir}", file=sys.stderr)
            return EXIT_BAD_INPUT
    else:
        stacks = [args.stack]
    planned = [_plan_stack(stack, args, several=args.all) for stack in stacks]
    if args.format == "json":
        reports = {outcome.stack: outcome.report for outcome in planned}
        document = reports if args.all else planned[0].report
        print(json.dumps(document, indent=2, default=_redact))
    if args.format in ("markdown", "github"):
        summary = formats.markdown_summary([(p.stack, p.code, p.markdown) for p in planned])
        if args.format == "markdown":
            print(summary)
        elif os.environ.get("GITHUB_STEP_SUMMARY"):
            summary_path = Path(os.environ["GITHUB_STEP_SUMMARY"])
            _write(lambda: _append(summary_path, summary + "\n"), summary_path)
    return max(outcome.code for outcome in planned)


@dataclass
class _Planned:
    """One stack's plan as the CLI reports it."""

    stack: str
    code: int
    report: dict[str, Any]
    """The JSON report; ``{"stack", "error"}`` when the input was bad."""
    markdown: str


def _plan_stack(stack: str, args: argparse.Namespace, several: bool) -> _Planned:
    started = time.monotonic()
    fmt = args.format
    config = None
    try:
        project, config = load(stack, args.project_dir)
        for note in config.notes:
            print(f"spotproof plan: note: {note}", file=sys.stderr)
        result = plan(project, config)
    except (PlanInputError, SpecError, ModuleNotFoundError) as error:
        prefix = f"spotproof plan: {stack}: " if several else "spotproof plan: "
        if isinstance(error, ModuleNotFoundError):
            error = PlanInputError(not_installed(error, "plan"))
        print(f"{prefix}{error}", file=sys.stderr)
        if fmt == "github":
            where = _error_location(error, config)
            if where:
                print(
                    formats.command(
                        "error",
                        str(error),
                        where,
                        formats.github_root(),
                        title=f"spotproof plan {stack}: bad input",
                    )
                )
        if fmt == "text" and several:
            print(f"\n{stack}: bad input (exit {EXIT_BAD_INPUT})\n")
        return _Planned(
            stack,
            EXIT_BAD_INPUT,
            {"stack": stack, "error": str(error)},
            formats.markdown_bad_input(stack, str(error)),
        )

    out = args.out / stack if several and args.out else args.out
    json_path = args.json / f"{stack}.json" if several and args.json else args.json
    document = formats.as_json(result)
    if out:
        written = _write(lambda: manifests.write(result.recording, out), out)
        if fmt == "text":
            print(f"Wrote {len(written)} Kubernetes manifests to {out}")
    if json_path:
        text = json.dumps(document, indent=2, default=_redact) + "\n"

        def write_json() -> None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(text)

        _write(write_json, json_path)
    elapsed = time.monotonic() - started
    if fmt == "text":
        print(formats.text(result))
        print(paint(f"\n{formats.verdict(result)} ({elapsed:.1f}s)\n"))
    elif fmt == "github":
        for line in formats.annotations(result, config.sources, formats.github_root()):
            print(line)
        for reason in result.skipped:
            print(f"::warning title=spotproof plan {stack}: check skipped::skipped: {reason}")
        print(f"{stack}: {formats.verdict(result).splitlines()[0]} ({elapsed:.1f}s)")
    # A check that could not run has not passed: it fails the plan unless the user says it
    # may be skipped (``--strict``, which asked for this before it was the default, still
    # parses, for workflows written with it).
    skipped_fails = result.skipped and not args.allow_skipped
    code = result.exit_code or (EXIT_FAILED if skipped_fails else EXIT_OK)
    return _Planned(stack, code, document, formats.markdown(result))


def _error_location(error: Exception, config: StackConfig | None) -> Location | None:
    """Where a bad input was written: the key a spec error names, the line a file error
    names, else nothing (an error with no file, such as an unknown stack)."""
    if isinstance(error, SpecError) and config is not None:
        return config.sources.locate(error.key)
    return getattr(error, "location", None)


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as stream:
        stream.write(text)


def _write(action: Any, path: Path) -> Any:
    try:
        return action()
    except OSError as error:
        print(f"spotproof plan: cannot write {path}: {error.strerror}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


def _redact(value: Any) -> str:
    return formats.redact(value)
