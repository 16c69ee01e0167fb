"""``spotproof smoke``: what the command does with its arguments (the parser is ``cli``'s).

A local preemption run of the trainer against a store emulator, alone or as a gang; with
``--stack``, a rehearsal of that stack's preemption path from its offline plan; with
``--command``, the same rehearsal of the user's own trainer (``smoke.user.rehearsal``); with
``--batch``, the batch workers' run against a queue emulator. Exit codes as every command's
(``spotproof.commands``): 0 passed, 1 failed, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import TypeVar

from spotproof.commands import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, written
from spotproof.fleet import SpecError
from spotproof.plan import PlanInputError, run_plan
from spotproof.runtime import metrics
from spotproof.runtime.launcher import Launcher
from spotproof.runtime.settings import ConfigError
from spotproof.smoke import DEFAULT_STEPS
from spotproof.smoke.emulation.object_stores import EmulatorError
from spotproof.smoke.reports.records import SmokeConfig, SmokeReport
from spotproof.smoke.reports.rendered import render_timeline, summary, to_json
from spotproof.smoke.runs.batch import BatchConfig, run_batch_smoke
from spotproof.smoke.runs.gang import run_gang_smoke
from spotproof.smoke.runs.solo import run_smoke
from spotproof.smoke.runs.stack import RehearsalError, command_rehearsal, rehearsal
from spotproof.smoke.runs.tiered import run_tiered_smoke, steps_needed, too_short
from spotproof.smoke.user.command import DEFAULT_INTERVAL, CommandError, UserCommand
from spotproof.smoke.user.rehearsal import rehearse_command
from spotproof.terminal import paint

T = TypeVar("T")


def _needs(module: str) -> None:
    """Raise here, where ``cli`` turns it into the one line naming the extra, for a module
    only a child process would import: there it would end as a traceback in the child."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def run(args: argparse.Namespace) -> int:
    """The whole command: a local preemption run (alone, rehearsing a stack, a gang) or,
    with ``--batch``, the batch workers' run."""
    if args.batch:
        return _batch(args)
    if args.user_command is not None:
        return _user_command(args)
    _needs("torch")  # the reference trainer, which the rehearsal starts as processes
    config = SmokeConfig(
        store=args.store or "s3",
        preemptions=args.preemptions,
        hard_kills=args.hard_kills,
        total_steps=args.steps or default_steps(args),
        interval=args.interval or SmokeConfig.interval,
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
    refused = _tiers_refused(args) or (
        args.tiers and too_short(args.nodes, config.interval, config.total_steps)
    )
    if refused:
        print(f"spotproof smoke: {refused}", file=sys.stderr)
        return EXIT_BAD_INPUT
    progress = lambda line: print(line, flush=True)  # noqa: E731
    try:
        served = _served_metrics(args, metrics.names.TRAINER)
    except _BadInput as error:
        print(f"spotproof smoke: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args.nodes > 1:
            if config.job is not None:
                # The gang harness restarts the whole gang as the JobSet's failure policy
                # does; the stack's one-pod Job policy does not apply to it.
                progress(f"gang of {args.nodes}: restarts as a JobSet's failure policy gives")
                config = dataclasses.replace(config, job=None)
            if args.tiers:
                report = run_tiered_smoke(config, args.nodes, progress=progress)
            else:
                report = run_gang_smoke(
                    config, args.nodes, progress=progress, started_by=Launcher(args.launcher)
                )
        else:
            report = run_smoke(config, progress=progress, metrics=served and served.registry)
    except EmulatorError as error:
        print(f"spotproof smoke: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _last_scrape(served, args.metrics_wait)
    return _told(args, report)


def default_steps(args: argparse.Namespace) -> int:
    """``--steps`` when not given: :data:`DEFAULT_STEPS`, or room for every interruption of
    a ``--tiers`` gang of that size."""
    if not args.tiers:
        return DEFAULT_STEPS
    return max(DEFAULT_STEPS, steps_needed(args.nodes, args.interval or SmokeConfig.interval))


def _tiers_refused(args: argparse.Namespace) -> str | None:
    """Why ``--tiers`` cannot go with the other arguments, or None."""
    if not args.tiers:
        return None
    if args.nodes < 2:
        return "--tiers: replicas are held by a gang's peers; allowed: with --nodes 2 or more"
    if args.launcher != Launcher.TORCHRUN:
        return (
            "--tiers: ranks are replaced one at a time under torchrun's elastic agent; "
            "allowed: --launcher torchrun (the default)"
        )
    return None


def _told(args: argparse.Namespace, report: SmokeReport) -> int:
    """The report, its timeline and its JSON where asked; the exit code it gives."""
    print()
    print(paint(summary(report)))
    timeline = args.timeline or (args.json.with_suffix(".png") if args.json else Path("smoke.png"))
    written("smoke", timeline, lambda: render_timeline(report, timeline))
    print(f"timeline: {timeline}")
    if args.json:
        text = json.dumps(to_json(report), indent=2) + "\n"

        def write_report() -> None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(text)

        written("smoke", args.json, write_report)
    return EXIT_OK if report.passed else EXIT_FAILED


def _user_command(args: argparse.Namespace) -> int:
    """``--command``: rehearse the user's own trainer (``smoke.user.rehearsal``)."""
    progress = lambda line: print(line, flush=True)  # noqa: E731
    try:
        for flag, given, why in (
            ("--steps", args.steps, "your script decides how many steps it trains"),
            ("--metrics-port", args.metrics_port, "your trainer serves its own metrics"),
        ):
            if given:
                raise _BadInput(f"{flag}: {why}; allowed: --command without {flag}")
        refused = _tiers_refused(args)
        if refused:
            raise _BadInput(refused)
        command = UserCommand.parse(args.user_command)
        config = SmokeConfig(
            store=args.store or "s3",
            preemptions=args.preemptions,
            hard_kills=args.hard_kills,
            interval=args.interval or DEFAULT_INTERVAL,
            grace_seconds=args.grace,
            job=None,
        )
        if args.stack:
            config = _rehearsal(args, config, of_command=True)
        report = rehearse_command(
            config,
            command,
            nodes=args.nodes,
            started_by=Launcher(args.launcher),
            tiers=args.tiers,
            progress=progress,
        )
    except (_BadInput, CommandError, EmulatorError) as error:
        print(f"spotproof smoke: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _told(args, report)


def _batch(args: argparse.Namespace) -> int:
    if args.user_command is not None:
        print(
            "spotproof smoke: --batch runs the reference batch workers; allowed: --batch or "
            "--command",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if args.stack or args.nodes > 1:
        print(
            "spotproof smoke: --batch runs alone; allowed: no --stack or --nodes", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    config = BatchConfig(
        queue=args.queue,
        items=args.items,
        workers=args.workers,
        preemptions=args.preemptions,
        hard_kills=args.hard_kills,
        seed=args.seed,
        table=args.table,
    )
    try:
        served = _served_metrics(args, metrics.names.BATCH)
        report = run_batch_smoke(
            config,
            progress=lambda line: print(line, flush=True),
            metrics=served and served.registry,
        )
    except (EmulatorError, _BadInput) as error:
        print(f"spotproof smoke: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _last_scrape(served, args.metrics_wait)
    print(report.summary())
    if args.json:
        text = json.dumps(report.as_json(), indent=2) + "\n"
        written("smoke", args.json, lambda: args.json.write_text(text))
    return EXIT_OK if report.passed else EXIT_FAILED


class _BadInput(Exception):
    """Input the command cannot use; its message is the one line to print."""


def _served_metrics(
    args: argparse.Namespace, families: tuple[metrics.names.Family, ...]
) -> metrics.Served | None:
    """The rehearsal's trainer or worker metrics served on ``--metrics-port``; raises
    :class:`_BadInput`."""
    if args.metrics_port is None:
        return None
    if args.nodes > 1:
        raise _BadInput(
            "--metrics-port: a single trainer's rehearsal or --batch; allowed: no --nodes"
        )
    try:
        served = metrics.served({"METRICS_PORT": str(args.metrics_port)}, families)
    except ConfigError as error:
        raise _BadInput(str(error).replace("METRICS_PORT=", "--metrics-port ")) from None
    print(f"metrics: http://localhost:{served.endpoint.port}/metrics")
    return served


def _last_scrape(served: metrics.Served | None, seconds: int) -> None:
    """After the rehearsal: the final counts are scraped before the endpoint goes."""
    if served is not None:
        print(f"metrics: waiting up to {seconds} s for a last scrape", flush=True)
        served.endpoint.await_scrape(seconds)
        served.endpoint.close()


def _rehearsal(
    args: argparse.Namespace, base: SmokeConfig, *, of_command: bool = False
) -> SmokeConfig:
    """The harness configuration for ``--stack`` (the smoke Job's, or for ``--command`` the
    path of the stack's training workloads); raises :class:`_BadInput`."""
    try:
        result = run_plan(args.stack, args.project_dir)
        if of_command:
            rehearsed = command_rehearsal(
                result, base, time_scale=args.time_scale, store=args.store
            )
        else:
            rehearsed = rehearsal(
                result, base, total_steps=args.steps, time_scale=args.time_scale, store=args.store
            )
    except (PlanInputError, SpecError, RehearsalError) as error:
        raise _BadInput(str(error)) from None
    print(f"rehearsing stack {args.stack} from its offline plan")
    for line in rehearsed.describe():
        print(f"  {line}")
    for violation in result.violations:
        print(f"  plan: [{violation.policy}] {violation.resource}: {violation.message}")
    return rehearsed.config
