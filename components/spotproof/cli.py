"""The ``spotproof`` command line: ``spotproof plan``, ``spotproof check``, ``spotproof smoke``
and ``spotproof policy-pack``.

Exit codes, which CI systems rely on: 0 when every check passes, 1 when a check fails (a policy,
the scheduling check, or different digests), 2 on bad input, always as one line on stderr
and never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from spotproof.extras import not_installed
from spotproof.smoke import BATCH_ROWS
from spotproof.terminal import paint

if TYPE_CHECKING:
    from spotproof.plan import StackConfig
    from spotproof.plan.config.sources import Location

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2
STORES = ("file", "s3", "gcs", "azure")
MAX_NODES = 8
"""The largest gang ``spotproof smoke --nodes`` starts on one machine."""
GANG_SIZES = tuple(n for n in range(1, MAX_NODES + 1) if BATCH_ROWS % n == 0)
"""What ``--nodes`` may be: up to ``MAX_NODES`` ranks that split the trainer's batch
evenly (1, 2, 4 or 8)."""
DEFAULT_SMOKE_STEPS = 240
FORMATS = ("text", "json", "markdown", "github")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints usage plus the error on several lines; one line is the contract.
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: {message} (see --help)\n")


DESCRIPTION = (
    "Make spot and preemptible GPU capacity safe on GKE, EKS and AKS: plan a stack's "
    "Pulumi program offline and check it, check your own manifests against it, rehearse "
    "a preemption locally, and set up CI."
)
EPILOG = (
    "Exit codes: 0 when every check passes, 1 when one fails, 2 on bad input (one line on "
    "stderr). Colour only on a terminal, never with NO_COLOR set."
)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="spotproof", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"spotproof {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = commands.add_parser(
        "plan",
        help="run a stack's Pulumi program offline and check it",
        description="Run the stack's Pulumi program offline under mocks, print the resource "
        "tree, and check schemas, policies and scheduling. No cloud credentials needed.",
    )
    which = plan.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--stack", help="stack name (gke-dev), or a stack file's path (../infra/Pulumi.prod.yaml)"
    )
    which.add_argument(
        "--all", action="store_true", help="plan every stack of the project, in one process"
    )
    plan.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (terminal), json (the report on stdout), markdown (PR comment or job "
        "summary), github (annotations on the stack files' lines, and the markdown appended "
        "to $GITHUB_STEP_SUMMARY when set)",
    )
    plan.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 1) when a check was skipped, e.g. Karpenter's schemas without Node.js",
    )
    plan.add_argument(
        "--out",
        type=Path,
        help="write every Kubernetes object as YAML here (with --all: a folder per stack)",
    )
    plan.add_argument(
        "--json",
        type=Path,
        help="write the JSON report to this file (with --all: a folder of <stack>.json)",
    )
    _project_dir(plan)

    check = commands.add_parser(
        "check",
        help="lint Kubernetes manifests against a planned stack",
        description="Check Kubernetes manifests (multi-document YAML), however they are "
        "deployed, against a stack planned offline: schemas, the Job rules, where they fit, "
        "what scales up for them, their preemption path, gangs, queues and the pitfalls. "
        "Each finding is reported at its file and line.",
    )
    check.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="manifest files, folders (every *.yaml, *.yml and *.json under them) or - "
        "for standard input",
    )
    check.add_argument(
        "--stack",
        help="the stack to check against: a name (gke-dev), or a stack file's path "
        "(../infra/Pulumi.prod.yaml), whose project is then found from the file",
    )
    check.add_argument("--format", choices=FORMATS, default="text", help="as for plan")
    _project_dir(check)

    ci = commands.add_parser(
        "ci",
        help="write the pull-request workflow into your repository",
        description="Continuous integration for a Pulumi project that uses spotproof.",
    )
    ci_commands = ci.add_subparsers(dest="ci_command", required=True, parser_class=_Parser)
    init = ci_commands.add_parser(
        "init",
        help="write .github/workflows/spotproof.yml",
        description="Write the GitHub Actions workflow that plans every stack on each pull "
        "request (one job per stack, with only its cloud's extra) and previews it where "
        "credentials exist, pinned to this spotproof version and to actions by commit.",
    )
    init.add_argument("--force", action="store_true", help="replace an existing workflow")
    init.add_argument("--stdout", action="store_true", help="print it instead of writing it")
    _project_dir(init)
    ci_stacks = ci_commands.add_parser(
        "stacks",
        help="print the project's stacks as JSON (the workflow's plan matrix)",
        description="Print [{stack, cloud, extra}] for every stack file of the project, "
        "read from the files alone.",
    )
    _project_dir(ci_stacks)

    commands.add_parser(
        "policy-pack",
        help="print the folder of the installed CrossGuard pack",
        description="Print the folder of the CrossGuard policy pack installed with spotproof, "
        'for `pulumi preview --policy-pack "$(spotproof policy-pack)"`.',
    )

    smoke = commands.add_parser(
        "smoke",
        help="prove preemption recovery locally against an emulated bucket",
        description="Start the store's emulator, run the trainer once uninterrupted and once "
        "with preemptions and hard kills, and fail unless both end with the same digest.",
    )
    smoke.add_argument(
        "--store",
        choices=STORES,
        default=None,
        help="bucket to checkpoint into (default s3; with --stack, the emulator of the "
        "store its Job writes to)",
    )
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
        "--nodes",
        type=_one_of(GANG_SIZES),
        default=1,
        help=f"ranks of a gang over torch.distributed (gloo), one of "
        f"{', '.join(map(str, GANG_SIZES))}; 2 or more plays one rank preempted, one rank "
        "killed and every rank preempted, restarting the gang each time",
    )
    smoke.add_argument(
        "--launcher",
        choices=("torchrun", "none"),
        default="torchrun",
        help="with --nodes: start each rank as TrainingJob's pods do, through the launch "
        "script and torchrun (default), or the trainer alone (Launcher.NONE)",
    )
    smoke.add_argument(
        "--batch",
        action="store_true",
        help="queue-fed batch workers instead of the trainer: every item must end with "
        "exactly one result, equal to a plain loop's, through preemptions and kills",
    )
    smoke.add_argument(
        "--queue",
        choices=("sqs", "pubsub", "azure"),
        default="sqs",
        help="with --batch: moto's SQS, the Cloud SDK's Pub/Sub emulator or Azurite's queues",
    )
    smoke.add_argument(
        "--table",
        choices=("sqlite", "postgres", "none"),
        default="sqlite",
        help="with --batch: also UPSERT results into a SQLite file or a local PostgreSQL",
    )
    smoke.add_argument("--items", type=_count(8, 10_000), default=40, help="with --batch")
    smoke.add_argument("--workers", type=_count(2, 16), default=3, help="with --batch")
    smoke.add_argument(
        "--stack",
        help="rehearse this stack's smoke Job and preemption path, taken from its offline plan",
    )
    _project_dir(smoke)
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


def _version() -> str:
    try:
        return metadata.version("spotproof")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.05 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{value:g} is out of range; allowed: 0.05..1")
    return value


def _project_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project-dir", type=Path, default=None, help="the Pulumi project (default: cwd)"
    )


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _one_of(allowed: tuple[int, ...]) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _whole(text)
        if value not in allowed:
            raise argparse.ArgumentTypeError(
                f"{value} is not allowed; allowed: {', '.join(map(str, allowed))}"
            )
        return value

    return parse


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _whole(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; allowed: {low}..{high}")
        return value

    return parse


def _plan(args: argparse.Namespace) -> int:
    from spotproof.plan import PlanInputError, find_project  # noqa: PLC0415

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
        from spotproof.plan.reporting.formats import markdown_summary  # noqa: PLC0415

        summary = markdown_summary([(p.stack, p.code, p.markdown) for p in planned])
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
    from spotproof.fleet import SpecError  # noqa: PLC0415
    from spotproof.plan import PlanInputError, load, plan  # noqa: PLC0415
    from spotproof.plan.recording import manifests  # noqa: PLC0415
    from spotproof.plan.reporting import formats  # noqa: PLC0415

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
    code = result.exit_code or (EXIT_VIOLATIONS if args.strict and result.skipped else EXIT_OK)
    return _Planned(stack, code, document, formats.markdown(result))


def _error_location(error: Exception, config: StackConfig | None) -> Location | None:
    """Where a bad input was written: the key a spec error names, the line a file error
    names, else nothing (an error with no file, such as an unknown stack)."""
    from spotproof.fleet import SpecError  # noqa: PLC0415

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
    from spotproof.plan.reporting.formats import redact  # noqa: PLC0415

    return redact(value)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except ModuleNotFoundError as error:
        from spotproof.extras import missing_extra  # noqa: PLC0415

        line = missing_extra(error, args.command)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return EXIT_BAD_INPUT


def _run(args: argparse.Namespace) -> int:
    if args.command == "plan":
        return _plan(args)
    if args.command == "check":
        from spotproof.check.command import run  # noqa: PLC0415

        return run(args.files, args.stack, args.project_dir, args.format)
    if args.command == "smoke":
        from spotproof.smoke.command import run as run_smoke  # noqa: PLC0415

        return run_smoke(args)
    if args.command == "ci":
        from spotproof.ci import command as ci  # noqa: PLC0415

        if args.ci_command == "init":
            return ci.init(args.project_dir, args.force, args.stdout)
        return ci.list_stacks(args.project_dir)
    if args.command == "policy-pack":
        print(Path(__file__).with_name("policy") / "pack")
        return EXIT_OK
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
