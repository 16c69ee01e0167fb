"""``spotproof status``: what the command does with its arguments (the parser is ``cli``'s).

The stack's outputs come the drill's way (``drill.subject``): ``pulumi stack output --json
--show-secrets --stack NAME``, or ``--outputs FILE`` holding that output; the kubeconfig is
the ``kubeconfig`` output unless ``--kubeconfig`` names one. Exit 0 once the cluster was
read (whatever it shows), 2 with one line on bad input: no stack outputs, a kubeconfig that
does not load, an API server that does not answer or refuses the reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from spotproof.commands import EXIT_BAD_INPUT, EXIT_OK
from spotproof.drill.errors import DrillError
from spotproof.drill.kube_api import connect, server
from spotproof.drill.subject import kubeconfig_from_outputs, outputs_from_file, stack_outputs
from spotproof.status.checkpoints import last_committed
from spotproof.status.cluster import StatusError, server_now
from spotproof.status.report import StatusReport, text, to_json
from spotproof.status.workloads import collect
from spotproof.terminal import printable


def _outputs(args: argparse.Namespace) -> dict[str, Any]:
    if args.outputs:
        return outputs_from_file(args.outputs)
    if args.stack:
        return stack_outputs(args.stack, args.project_dir)
    if args.kubeconfig:
        return {}
    raise StatusError(
        "nothing names the cluster; allowed: --stack NAME, --outputs FILE or --kubeconfig FILE"
    )


def _report(args: argparse.Namespace, scratch: Path) -> StatusReport:
    outputs = _outputs(args)
    kubeconfig = args.kubeconfig or kubeconfig_from_outputs(
        outputs, args.stack or "cluster", scratch
    )
    api = connect(str(kubeconfig), args.context)
    try:
        now = server_now(api)
        url = outputs.get("checkpoint_url")
        workloads = collect(
            api,
            now,
            checkpoints=lambda found: last_committed(found, now),
            fallback_url=url if isinstance(url, str) else None,
        )
        return StatusReport(now, server(api), tuple(workloads), args.stack)
    finally:
        api.close()


def run(args: argparse.Namespace) -> int:
    try:
        with tempfile.TemporaryDirectory(prefix="spotproof-status-") as scratch:
            report = _report(args, Path(scratch))
    except (DrillError, StatusError) as error:  # which may repeat what a cluster said
        print(f"spotproof status: {printable(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.format == "json":
        print(json.dumps(to_json(report), indent=2))
    else:
        print(text(report), end="")
    return EXIT_OK
