"""The ``spotproof`` command line: ``spotproof plan``.

Exit codes follow DESIGN.md: 0 when every check passes, 1 when a policy or scheduling
check fails, 2 on bad input, always as one line on stderr and never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from spotproof.plan import PlanResult

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints usage plus the error on several lines; one line is the contract.
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="spotproof", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = commands.add_parser(
        "plan",
        help="run a stack's Pulumi program offline and check it",
        description="Run the stack's Pulumi program offline under mocks, print the resource "
        "tree, and check schemas, policies and scheduling. No cloud credentials needed.",
    )
    plan.add_argument("--stack", required=True, help="stack name, e.g. gke-dev")
    plan.add_argument("--out", type=Path, help="write every Kubernetes object as YAML here")
    plan.add_argument("--json", type=Path, help="write resources and violations as JSON here")
    plan.add_argument(
        "--project-dir", type=Path, default=None, help="the Pulumi project (default: cwd)"
    )
    return parser


def _plan(args: argparse.Namespace) -> int:
    from spotproof.plan import PlanInputError, manifests, run_plan, tree, workloads  # noqa: PLC0415
    from spotproof.spec import SpecError  # noqa: PLC0415

    started = time.monotonic()
    try:
        result = run_plan(args.stack, args.project_dir)
    except (PlanInputError, SpecError) as error:
        print(f"spotproof plan: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT

    recording = result.recording
    print(f"Previewing stack {args.stack} offline (no cloud calls)\n")
    print(tree.render(recording))
    print(f"\nResources: {len(recording.resources) + 1} to create")

    print("\nScheduling:")
    for workload, pools in workloads.placements(recording, result.nodes).items():
        print(f"  {workload}: fits {', '.join(pools) or 'NO POOL'}")

    if args.out:
        written = _write(lambda: manifests.write(recording, args.out), args.out)
        print(f"\nWrote {len(written)} Kubernetes manifests to {args.out}")
    if args.json:
        report = json.dumps(_report(result), indent=2, default=_redact) + "\n"
        _write(lambda: args.json.write_text(report), args.json)

    elapsed = time.monotonic() - started
    if result.violations:
        print(f"\n{len(result.violations)} violation(s):")
        for violation in result.violations:
            print(f"  [{violation.policy}] {violation.resource}: {violation.message}")
        print(f"\nplan failed in {elapsed:.1f}s")
        return EXIT_VIOLATIONS
    print(f"\n0 violations: schemas, policies and scheduling all pass ({elapsed:.1f}s)")
    return EXIT_OK


def _write(action: Any, path: Path) -> Any:
    try:
        return action()
    except OSError as error:
        print(f"spotproof plan: cannot write {path}: {error.strerror}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


def _redact(value: Any) -> str:
    from spotproof.plan.recorder import Secret  # noqa: PLC0415

    if isinstance(value, Secret):
        return "[secret]"
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _report(result: PlanResult) -> dict[str, Any]:
    """``parent`` is the parent's name (the stack's for top-level resources); names repeat
    across types, so ``urn`` and ``parent_urn`` identify resources exactly."""
    from spotproof.plan import workloads  # noqa: PLC0415

    recording = result.recording
    names = {r.urn: r.name for r in recording.resources}
    stack_name = f"{recording.project}-{recording.stack}"
    return {
        "stack": result.spec.stack,
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "parent": names.get(r.parent or "", stack_name),
                "inputs": r.inputs,
                "urn": r.urn,
                "parent_urn": r.parent,
            }
            for r in recording.resources
        ],
        "violations": [asdict(v) for v in result.violations],
        "scheduling": workloads.placements(recording, result.nodes),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "plan":
        return _plan(args)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
