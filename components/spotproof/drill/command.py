"""``spotproof drill``: what the command does with its arguments (the parser is ``cli``'s).

Exit codes as every command's (``spotproof.commands``): 0 when every reclaim recovered as
predicted, 1 when one did not (or a stage timed out after the first reclaim), 2 when the
drill declined before reclaiming anything (bad input, a protected stack, a node that is
not spot or not this cluster's, a missing grant), 130 on Ctrl-C, after cleaning up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotproof import clouds
from spotproof.catalog import Cloud
from spotproof.commands import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, written
from spotproof.drill.errors import DrillError, StageTimedOut
from spotproof.drill.grants import grant_from_outputs
from spotproof.drill.instances import RECLAIM_LAYER
from spotproof.drill.report import DrillReport, markdown, render_timeline, summary, to_json
from spotproof.drill.runner import DrillOptions, run_drill
from spotproof.drill.subject import (
    Subject,
    disposable,
    kubeconfig_from_outputs,
    outputs_from_file,
    stack_outputs,
    subject_from_plan,
)
from spotproof.drill.timeline import Timeline
from spotproof.runtime.messages import redacted
from spotproof.terminal import printable

EXIT_INTERRUPTED = 130
"""128 + SIGINT, as a shell reports a command stopped by Ctrl-C."""


class _BadInput(Exception):
    """Its message is the one line to print; exit 2."""


def _subject(args: argparse.Namespace) -> tuple[Subject, dict[str, Any], str]:
    """The workload to drill, the stack's outputs, and the cluster's name."""
    kind, name = ("JobSet", args.jobset) if args.jobset else ("Job", args.job)
    if args.stack:
        from spotproof.fleet import SpecError  # noqa: PLC0415 - the plan's imports are heavy
        from spotproof.plan import PlanInputError, run_plan  # noqa: PLC0415

        try:
            result = run_plan(args.stack, args.project_dir)
        except (PlanInputError, SpecError) as error:
            raise _BadInput(str(error)) from None
        subject = subject_from_plan(result, kind if name else None, name)
        outputs = (
            outputs_from_file(args.outputs)
            if args.outputs
            else stack_outputs(args.stack, args.project_dir)
        )
    else:
        missing = [
            flag
            for flag, value in (
                ("--cloud", args.cloud),
                ("--kubeconfig", args.kubeconfig),
                ("--outputs", args.outputs),
                ("--job or --jobset", name),
            )
            if not value
        ]
        if missing:
            raise _BadInput(
                f"without --stack, {', '.join(missing)} must be given; allowed: --stack NAME, "
                "or --cloud, --kubeconfig, --outputs and --job/--jobset for a cluster you have"
            )
        outputs = outputs_from_file(args.outputs)
        protected = not disposable(outputs, f"--outputs {args.outputs}")
        subject = Subject(Cloud(args.cloud), kind, args.namespace, name, protected=protected)
    cluster = args.cluster or outputs.get("cluster_name")
    if not cluster:
        raise _BadInput("the cluster's name is unknown; allowed: --cluster NAME")
    return subject, outputs, str(cluster)


SKEW_SECONDS = 2.0
"""A clock further than this from the API server's is corrected (its Date header has
whole seconds): the timeline puts this machine's reclaim request among the API server's and
the kubelet's timestamps."""


def _cluster(kubeconfig: Path, context: str | None) -> tuple[Any, Callable[[], float]]:
    """A client of the cluster, and a clock on its API server's time."""
    from spotproof.drill.kube_api import connect, server_time  # noqa: PLC0415

    api = connect(str(kubeconfig), context)
    offset = server_time(api) - time.time()
    if abs(offset) <= SKEW_SECONDS:
        return api, time.time
    print(f"  this machine's clock is {offset:+.0f} s off the API server's: corrected", flush=True)
    return api, lambda: time.time() + offset


def _store_watch(url: str, timeline: Timeline) -> Any:
    """A watch of the trainer's checkpoints, if this machine can read its store; opened to
    read, so a ``file://`` URL creates nothing here."""
    from spotproof.drill.store_watch import StoreWatch  # noqa: PLC0415
    from spotproof.runtime.checkpointer.checkpoint import CheckpointStore  # noqa: PLC0415
    from spotproof.runtime.storage import StorageError, open_store  # noqa: PLC0415

    try:
        store = CheckpointStore(url, store=open_store(url, create=False))
        return StoreWatch(store, timeline).start()
    except (StorageError, ImportError) as error:
        print(printable(f"  not watching {redacted(url)}: {redacted(str(error))}"), flush=True)
        return None


def run(args: argparse.Namespace) -> int:
    options = DrillOptions(
        count=args.count,
        ranks=args.ranks,
        yes=args.yes,
        target_seconds=args.target_timeout,
        signal_seconds=args.signal_timeout,
        resume_seconds=args.resume_timeout,
        finish_seconds=args.finish_timeout,
        reference=not args.no_reference,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="spotproof-drill-") as scratch:
            subject, outputs, cluster = _subject(args)
            where = f"stack {subject.stack}" if subject.stack else f"--outputs {args.outputs}"
            grant = grant_from_outputs(subject.cloud, outputs, where)
            kubeconfig = args.kubeconfig or kubeconfig_from_outputs(
                outputs, subject.stack or "cluster", Path(scratch)
            )
            api, clock = _cluster(Path(kubeconfig), args.context)
            reclaimer = clouds.module(RECLAIM_LAYER, subject.cloud).DRILL.reclaimer(grant, cluster)
            report = run_drill(
                subject,
                api,
                reclaimer,
                options,
                store_watch=_store_watch,
                progress=lambda line: print(printable(line), flush=True),  # cluster's words
                clock=clock,
            )
    except KeyboardInterrupt:
        print(
            "spotproof drill: interrupted; the drill's own setup was undone and nothing is left "
            "to clean up (a reclaim the cloud already accepted runs its course)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except StageTimedOut as error:
        print(f"spotproof drill: {printable(str(error))}", file=sys.stderr)
        return EXIT_FAILED
    except (DrillError, _BadInput) as error:
        print(f"spotproof drill: {printable(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _report(report, args)


def _report(report: DrillReport, args: argparse.Namespace) -> int:
    if args.format == "json":
        print(json.dumps(to_json(report), indent=2))
    elif args.format == "markdown":
        print(printable(markdown(report), lines=True), end="")
    else:
        print()
        print(printable(summary(report), lines=True))
    if args.json:
        text = json.dumps(to_json(report), indent=2) + "\n"
        written("drill", args.json, lambda: args.json.write_text(text))
    timeline = args.timeline or (args.json.with_suffix(".png") if args.json else None)
    if timeline is not None:
        written("drill", timeline, lambda: render_timeline(report, timeline))
        print(f"timeline: {timeline}", file=sys.stderr if args.format != "text" else sys.stdout)
    return EXIT_OK if report.passed else EXIT_FAILED
