"""The ``spotproof`` command line: the parser of every command, and nothing more.

Each command lives with what it commands: ``plan.command``, ``check.command``,
``smoke.command``, ``drill.command``, ``ci.command``; this module parses the arguments
(one-line errors on bad input, exit 2) and hands them over. Exit codes are ``spotproof.commands``'.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from spotproof.catalog import Cloud
from spotproof.commands import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    REPORT_FORMATS,
    InstalledVersion,
    count_in,
    fraction,
    one_of,
)
from spotproof.runtime.batch.queue_backends import NAMED as QUEUES
from spotproof.runtime.storage.backends import NAMED as STORES
from spotproof.smoke import DEFAULT_STEPS, GANG_SIZES


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
    parser.add_argument("--version", action=InstalledVersion)
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
        choices=REPORT_FORMATS,
        default="text",
        help="text (terminal), json (the report on stdout), markdown (PR comment or job "
        "summary), github (annotations on the stack files' lines, and the markdown appended "
        "to $GITHUB_STEP_SUMMARY when set)",
    )
    plan.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)
    plan.add_argument(
        "--allow-skipped",
        action="store_true",
        help="pass although a check could not run (Karpenter's schemas without Node.js)",
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
    check.add_argument("--format", choices=REPORT_FORMATS, default="text", help="as for plan")
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
        "credentials exist: actions pinned by commit, every install verified by hash.",
    )
    init.add_argument(
        "--spotproof", help="a wheel's URL#sha256=..., a wheel file, or git+https://...@COMMIT"
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

    _smoke(commands)
    _drill(commands)
    _status(commands)
    return parser


def _smoke(commands: argparse._SubParsersAction) -> None:
    smoke = commands.add_parser(
        "smoke",
        help="prove preemption recovery locally against an emulated bucket",
        description="Start the store's emulator, run the trainer once uninterrupted and once "
        "with preemptions and hard kills, and fail unless both end with the same digest.",
    )
    smoke.add_argument(
        "--store",
        choices=tuple(STORES),
        default=None,
        help="bucket to checkpoint into (default s3; with --stack, the emulator of the "
        "store its Job writes to)",
    )
    smoke.add_argument("--preemptions", type=count_in(0, 20), default=2, help="graceful (SIGTERM)")
    smoke.add_argument("--hard-kills", type=count_in(0, 20), default=2, help="SIGKILL, no warning")
    smoke.add_argument(
        "--command",
        dest="user_command",
        metavar="COMMAND",
        help='rehearse your own trainer: the command that runs it ("python train.py")',
    )
    smoke.add_argument(
        "--steps",
        type=count_in(20, 100_000),
        default=None,
        help=f"TOTAL_STEPS (default {DEFAULT_STEPS}; with --stack, 6 checkpoint intervals; with "
        "--tiers, room for each interruption: 3 intervals and a step)",
    )
    smoke.add_argument(
        "--interval", type=count_in(1, 10_000), help="CHECKPOINT_INTERVAL (20; --command: 10)"
    )
    smoke.add_argument("--model-mb", type=count_in(1, 4096), default=4, help="MODEL_MB")
    smoke.add_argument("--seed", type=count_in(0, 2**31), default=0, help="SEED of the trainer")
    smoke.add_argument("--grace", type=count_in(1, 600), default=15, help="grace period, seconds")
    smoke.add_argument(
        "--nodes",
        type=one_of(GANG_SIZES),
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
        "--tiers",
        action="store_true",
        help="with --nodes: each pod a torchrun elastic agent whose rank is replaced alone "
        "(TrainingJob's recovery=replace-rank), its worker the reference trainer or your "
        "--command, periodic saves held in each pod's memory and replicated to a peer "
        "(persisted to the bucket every 3rd); plays one node lost, one reclaimed, one with "
        "the holder of its replica (4 nodes or more), then the leader's",
    )
    smoke.add_argument(
        "--batch",
        action="store_true",
        help="queue-fed batch workers instead of the trainer: every item must end with "
        "exactly one result, equal to a plain loop's, through preemptions and kills",
    )
    smoke.add_argument(
        "--queue",
        choices=tuple(QUEUES),
        default="sqs",
        help="with --batch: moto's SQS, the Cloud SDK's Pub/Sub emulator or Azurite's queues",
    )
    smoke.add_argument(
        "--table",
        choices=("sqlite", "postgres", "none"),
        default="sqlite",
        help="with --batch: also UPSERT results into a SQLite file or a local PostgreSQL",
    )
    smoke.add_argument("--items", type=count_in(8, 10_000), default=40, help="with --batch")
    smoke.add_argument("--workers", type=count_in(2, 16), default=3, help="with --batch")
    smoke.add_argument(
        "--stack",
        help="rehearse this stack's smoke Job and preemption path, taken from its offline plan",
    )
    _project_dir(smoke)
    smoke.add_argument(
        "--time-scale",
        type=fraction,
        default=1.0,
        help="with --stack: multiply notice, drain and grace times by this (0.05-1)",
    )
    smoke.add_argument(
        "--metrics-port",
        type=count_in(1, 65_535),
        help="serve the rehearsal's trainer (or, with --batch, worker) metrics at /metrics "
        "on this port, as its pods would (not with --nodes); after the run, wait up to "
        "--metrics-wait seconds for one more scrape",
    )
    smoke.add_argument(
        "--metrics-wait",
        type=count_in(0, 600),
        default=30,
        help="with --metrics-port: seconds to wait for a last scrape (default 30)",
    )
    smoke.add_argument("--json", type=Path, help="write the report as JSON here")
    smoke.add_argument(
        "--timeline", type=Path, help="PNG timeline (default: next to --json, else ./smoke.png)"
    )


def _drill(commands: argparse._SubParsersAction) -> None:
    drill = commands.add_parser(
        "drill",
        help="reclaim a real spot node under a running trainer and judge the recovery",
        description="Ask the cloud to reclaim the spot node a workload's pod runs on (GCE "
        "simulateMaintenanceEvent, AWS FIS spot interruption, Azure simulateEviction), watch "
        "the cluster, judge the recovery and compare it with the plan's preemption path.",
    )
    drill.add_argument("--stack", help="a deployed stack: its plan, outputs and kubeconfig")
    _project_dir(drill)
    which = drill.add_mutually_exclusive_group()
    which.add_argument("--job", help="a Job to drill (default: the stack's smoke Job)")
    which.add_argument("--jobset", help="a JobSet to drill")
    drill.add_argument("--namespace", default="default", help="without --stack (default: default)")
    drill.add_argument("--cloud", choices=[c.value for c in Cloud], help="without --stack")
    drill.add_argument("--kubeconfig", type=Path, help="default: the stack's kubeconfig output")
    drill.add_argument("--context", help="the kubeconfig context (default: its current one)")
    drill.add_argument(
        "--outputs",
        type=Path,
        help="the stack's outputs as `pulumi stack output --json --show-secrets` writes them "
        "(default with --stack: asked of the pulumi CLI)",
    )
    drill.add_argument("--cluster", help="the cluster's name (default: the cluster_name output)")
    drill.add_argument(
        "--count", type=count_in(1, 10), default=1, help="reclaims, one after another"
    )
    drill.add_argument(
        "--ranks",
        choices=("one", "all"),
        default="one",
        help="for a gang: reclaim one rank's node (default) or every node at once",
    )
    drill.add_argument(
        "--yes",
        action="store_true",
        help="drill a protected stack, or a --kubeconfig cluster not marked disposable",
    )
    for stage, default, what in (
        ("target", 900, "a pod of the workload running on a spot node"),
        ("signal", 600, "the reclaimed pod to end"),
        ("resume", 1800, "the replacement to resume"),
        ("finish", 3600, "the run to complete after the last reclaim (0: do not wait)"),
    ):
        drill.add_argument(
            f"--{stage}-timeout",
            type=count_in(0 if stage == "finish" else 10, 86_400),
            default=default,
            help=f"seconds to wait for {what} (default {default})",
        )
    drill.add_argument(
        "--no-reference", action="store_true", help="do not train the reference run locally"
    )
    drill.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    drill.add_argument("--json", type=Path, help="write the JSON report here as well")
    drill.add_argument("--timeline", type=Path, help="PNG timeline (default: next to --json)")


def _status(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser(
        "status",
        help="show what a deployed stack's workloads are doing on spot",
        description="Read a deployed stack's cluster and checkpoint store: each workload's "
        "pods, the node, pool and capacity each runs on, how long Pending ones have waited "
        "and why, reclaims seen, and the last committed checkpoint and its age. Changes "
        "nothing.",
    )
    status.add_argument("--stack", help="a deployed stack: its outputs and kubeconfig")
    _project_dir(status)
    status.add_argument("--kubeconfig", type=Path, help="default: the stack's kubeconfig output")
    status.add_argument("--context", help="the kubeconfig context (default: its current one)")
    status.add_argument(
        "--outputs",
        type=Path,
        help="the stack's outputs as `pulumi stack output --json --show-secrets` writes them "
        "(default with --stack: asked of the pulumi CLI)",
    )
    status.add_argument("--format", choices=("text", "json"), default="text")


def _project_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project-dir", type=Path, default=None, help="the Pulumi project (default: cwd)"
    )


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
        from spotproof.plan.command import run  # noqa: PLC0415

        return run(args)
    if args.command == "check":
        from spotproof.check.command import run  # noqa: PLC0415

        return run(args.files, args.stack, args.project_dir, args.format)
    if args.command == "smoke":
        from spotproof.smoke.command import run as run_smoke  # noqa: PLC0415

        return run_smoke(args)
    if args.command == "ci":
        from spotproof.ci import command as ci  # noqa: PLC0415

        if args.ci_command == "init":
            return ci.init(args.project_dir, args.force, args.stdout, args.spotproof)
        return ci.list_stacks(args.project_dir)
    if args.command == "drill":
        from spotproof.drill.command import run as run_drill  # noqa: PLC0415

        return run_drill(args)
    if args.command == "status":
        from spotproof.status.command import run as run_status  # noqa: PLC0415

        return run_status(args)
    if args.command == "policy-pack":
        print(Path(__file__).with_name("policy") / "pack")
        return EXIT_OK
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
