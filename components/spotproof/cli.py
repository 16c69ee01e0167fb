"""The ``spotproof`` command line: ``spotproof plan`` and ``spotproof smoke``.

Exit codes follow DESIGN.md: 0 when every check passes, 1 when a check fails (a policy,
the scheduling check, or different digests), 2 on bad input, always as one line on stderr
and never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from spotproof.plan import PlanResult
    from spotproof.smoke.harness import SmokeConfig

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2
STORES = ("file", "s3", "gcs", "azure")
DEFAULT_SMOKE_STEPS = 240


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

    smoke = commands.add_parser(
        "smoke",
        help="prove preemption recovery locally against an emulated bucket",
        description="Start the store's emulator, run the trainer once uninterrupted and once "
        "with preemptions and hard kills, and fail unless both end with the same digest.",
    )
    smoke.add_argument("--store", choices=STORES, default="s3", help="bucket to checkpoint into")
    smoke.add_argument("--preemptions", type=_count(0, 20), default=2, help="graceful (SIGTERM)")
    smoke.add_argument("--hard-kills", type=_count(0, 20), default=2, help="SIGKILL, no warning")
    smoke.add_argument(
        "--steps",
        type=_count(20, 100_000),
        default=None,
        help=f"TOTAL_STEPS (default {DEFAULT_SMOKE_STEPS}; with --stack, 6 checkpoint intervals)",
    )
    smoke.add_argument("--interval", type=_count(1, 10_000), default=20, help="CHECKPOINT_INTERVAL")
    smoke.add_argument("--model-mb", type=_count(1, 4096), default=4, help="MODEL_MB")
    smoke.add_argument("--seed", type=_count(0, 2**31), default=0, help="SEED of the trainer")
    smoke.add_argument("--grace", type=_count(1, 600), default=15, help="grace period, seconds")
    smoke.add_argument(
        "--stack",
        help="rehearse this stack's smoke Job and preemption path, taken from its offline plan",
    )
    smoke.add_argument(
        "--project-dir", type=Path, default=None, help="the Pulumi project (default: cwd)"
    )
    smoke.add_argument(
        "--time-scale",
        type=_fraction,
        default=1.0,
        help="with --stack: multiply notice, drain and grace times by this (0.05-1)",
    )
    smoke.add_argument("--json", type=Path, help="write the report as JSON here")
    smoke.add_argument(
        "--timeline", type=Path, help="PNG timeline (default: next to --json, else ./smoke.png)"
    )
    return parser


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.05 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value:g} is out of range; allowed: 0.05..1")
    return value


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; allowed: {low}..{high}")
        return value

    return parse


def _smoke(args: argparse.Namespace) -> int:
    from spotproof.smoke.emulators import EmulatorError  # noqa: PLC0415
    from spotproof.smoke.harness import SmokeConfig, run_smoke  # noqa: PLC0415
    from spotproof.smoke.report import render_timeline, summary, to_json  # noqa: PLC0415

    config = SmokeConfig(
        store=args.store,
        preemptions=args.preemptions,
        hard_kills=args.hard_kills,
        total_steps=args.steps or DEFAULT_SMOKE_STEPS,
        interval=args.interval,
        model_mb=args.model_mb,
        seed=args.seed,
        grace_seconds=args.grace,
    )
    if args.stack:
        try:
            config = _rehearsal(args, config)
        except _BadInput as error:
            print(f"spotproof smoke: {error}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if config.total_steps < 4 * config.interval:
        print(
            f"spotproof smoke: --steps {config.total_steps} leaves no room to interrupt; "
            f"allowed: at least 4 x the checkpoint interval ({4 * config.interval})",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        report = run_smoke(config, progress=lambda line: print(line, flush=True))
    except EmulatorError as error:
        print(f"spotproof smoke: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print()
    print(summary(report))
    timeline = args.timeline or (args.json.with_suffix(".png") if args.json else Path("smoke.png"))
    _write(lambda: render_timeline(report, timeline), timeline)
    print(f"timeline: {timeline}")
    if args.json:
        text = json.dumps(to_json(report), indent=2) + "\n"

        def write_report() -> None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(text)

        _write(write_report, args.json)
    return EXIT_OK if report.passed else EXIT_VIOLATIONS


class _BadInput(Exception):
    """Input the command cannot use; its message is the one line to print."""


def _rehearsal(args: argparse.Namespace, base: SmokeConfig) -> SmokeConfig:
    """The harness configuration for ``--stack``; raises :class:`_BadInput`."""
    from spotproof.plan import PlanInputError, SchemaUnavailable, run_plan  # noqa: PLC0415
    from spotproof.smoke.rehearsal import RehearsalError, rehearsal  # noqa: PLC0415
    from spotproof.spec import SpecError  # noqa: PLC0415

    try:
        result = run_plan(args.stack, args.project_dir)
        rehearsed = rehearsal(result, base, total_steps=args.steps, time_scale=args.time_scale)
    except (PlanInputError, SpecError, SchemaUnavailable, RehearsalError) as error:
        raise _BadInput(str(error)) from None
    print(f"rehearsing stack {args.stack} from its offline plan")
    for line in rehearsed.describe():
        print(f"  {line}")
    for violation in result.violations:
        print(f"  plan: [{violation.policy}] {violation.resource}: {violation.message}")
    return rehearsed.config


def _plan(args: argparse.Namespace) -> int:
    from spotproof.plan import (  # noqa: PLC0415
        PlanInputError,
        SchemaUnavailable,
        manifests,
        run_plan,
        tree,
        workloads,
    )
    from spotproof.spec import SpecError  # noqa: PLC0415

    started = time.monotonic()
    try:
        result = run_plan(args.stack, args.project_dir)
    except (PlanInputError, SpecError, SchemaUnavailable) as error:
        print(f"spotproof plan: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT

    recording = result.recording
    print(f"Previewing stack {args.stack} offline (no cloud calls)\n")
    print(tree.render(recording))
    print(f"\nResources: {len(recording.resources) + 1} to create")

    print("\nScheduling:")
    for workload, pools in workloads.placements(recording, result.nodes).items():
        print(f"  {workload}: fits {', '.join(pools) or 'NO POOL'}")
    print("\nScale-up (would a node be created for it?):")
    for outcome in result.outcomes:
        first, *rest = outcome.scaling()
        print(f"  {outcome.workload.label}: {first}")
        for line in rest:
            print(f"    {line}")
    print("\nPreemption path (reclaim notice to node gone):")
    lines = [
        (outcome.workload.label, line)
        for outcome in result.outcomes
        for line in [*(path.line() for path in outcome.paths), *outcome.bounds]
    ]
    for label, line in lines:
        print(f"  {label} on {line}")
    if not lines:
        print("  no workload runs on reclaimable capacity")

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
    print(
        "\n0 violations: schemas, policies, scheduling, scale-up, preemption paths and "
        f"bucket lifecycles all pass ({elapsed:.1f}s)"
    )
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
        "scale_up": {
            outcome.workload.label: [asdict(verdict) for verdict in outcome.verdicts]
            for outcome in result.outcomes
        },
        "preemption": {
            outcome.workload.label: [
                {**asdict(path), "line": path.line(), "problems": path.problems}
                for path in outcome.paths
            ]
            for outcome in result.outcomes
            if outcome.paths
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "plan":
        return _plan(args)
    if args.command == "smoke":
        return _smoke(args)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
