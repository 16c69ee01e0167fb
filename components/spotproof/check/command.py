"""``spotproof check FILE... [--stack NAME] [--format ...]``: read, check, report.

The formats are ``plan``'s: ``text`` (one ``file:line: [rule] message`` per finding),
``json`` (the report on stdout), ``markdown`` (a PR comment or job summary) and ``github``
(an error annotation on each finding's line, and the markdown appended to
``$GITHUB_STEP_SUMMARY`` when it is set).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spotproof.check import CheckInputError, CheckResult, check, load_all
from spotproof.commands import EXIT_BAD_INPUT
from spotproof.extras import not_installed
from spotproof.plan.config.sources import Location
from spotproof.terminal import paint


def run(files: Sequence[Path], stack: str | None, project_dir: Path | None, fmt: str) -> int:
    """Check ``files`` and print the report in ``fmt``; the exit code."""
    from spotproof.fleet import SpecError  # noqa: PLC0415
    from spotproof.plan import PlanInputError, run_plan  # noqa: PLC0415

    try:
        documents = load_all(files)
        planned = run_plan(stack, project_dir) if stack else None
    except (CheckInputError, PlanInputError, SpecError) as error:
        print(f"spotproof check: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as error:  # one the stack's program imports
        print(f"spotproof check: {not_installed(error, 'check')}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not documents:
        print("spotproof check: no Kubernetes objects in the files given", file=sys.stderr)
        return EXIT_BAD_INPUT
    result = check(documents, planned)
    if fmt == "json":
        print(json.dumps(as_json(result), indent=2))
    elif fmt == "markdown":
        print(markdown(result))
    elif fmt == "github":
        _github(result)
    else:
        print(paint(text(result)))
    return result.exit_code


def _against(result: CheckResult) -> str:
    return f"stack {result.stack}" if result.stack else "no stack (schemas and Job rules only)"


def verdict(result: CheckResult) -> str:
    count = f"{result.objects} object(s) in {len(result.files)} file(s), against {_against(result)}"
    if result.unchecked:
        count += f"; not checked (no schema for their kind): {', '.join(result.unchecked)}"
    if not result.findings:
        return f"0 findings: {count}"
    refused = (
        f"; the API server would refuse {result.refused} of the objects (exit 2)"
        if result.refused
        else ""
    )
    return f"{len(result.findings)} finding(s): {count}{refused}"


def text(result: CheckResult) -> str:
    return "\n".join([*(f.text() for f in result.findings), verdict(result)])


def as_json(result: CheckResult) -> dict[str, Any]:
    return {
        "stack": result.stack,
        "files": [str(f) for f in result.files],
        "objects": result.objects,
        "exit_code": result.exit_code,
        "findings": [
            {"file": str(f.path), "line": f.line, "rule": f.policy, "message": f.message}
            for f in result.findings
        ],
    }


def markdown(result: CheckResult) -> str:
    from spotproof.plan.reporting.formats import cell  # noqa: PLC0415

    head = "✅" if not result.findings else "❌"
    lines = [f"### spotproof check: {head} {verdict(result)}", ""]
    if result.findings:
        lines += ["| where | rule | finding |", "| --- | --- | --- |"]
        lines += [
            f"| `{f.path}:{f.line}` | `{f.policy}` | {cell(f.message)} |" for f in result.findings
        ]
    return "\n".join(lines)


def _github(result: CheckResult) -> None:
    from spotproof.plan.reporting.formats import command, github_root  # noqa: PLC0415

    root = github_root()
    for finding in result.findings:
        where = Location(finding.path, finding.line)
        print(
            command(
                "error", finding.message, where, root, title=f"spotproof check: {finding.policy}"
            )
        )
    print(verdict(result))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as stream:
            stream.write(markdown(result) + "\n")
