"""Goodput under one preemption trace: spotproof vs periodic-only vs restart from scratch.

    python benchmarks/goodput.py [--steps 600] [--interval 50] [--trace 6,14,22,30] [--dir DIR]
    python benchmarks/goodput.py --quick
    python benchmarks/goodput.py --model [--intervals 2,8,50] [--seconds 15]

The same trainer, the same seconds-since-start at which the node is reclaimed, three ways
to recover:

- ``spotproof``: SIGTERM, final checkpoint inside the grace period, resume where it stopped;
- ``periodic-only``: the node vanishes (SIGKILL): resume from the last periodic checkpoint;
- ``from scratch``: no checkpoints at all: every restart begins at step 0.

Goodput is the share of computed steps that were not thrown away, and the wall time to
finish is compared with an uninterrupted run (the limit). Restarts pay the real cost of a
new process (interpreter, torch import, restore), as a rescheduled pod would. Every policy
checkpoints to the same directory on a disk-backed file system (``medium``), printed.

``--model`` checks the goodput model (``spotproof.plan.simulation.goodput``) instead: one
trace of the same reclaims per checkpoint interval (``goodput_trace``, beside this script),
its goodput measured and predicted from its own measured costs, and the interval the model
recommends.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass

from goodput_trace import TraceConfig, run_traces
from medium import medium as open_medium

from spotproof.smoke.processes.trainer_process import TrainerProcess


@dataclass
class Outcome:
    policy: str
    seconds: float
    computed: int
    interruptions: int


def run(policy: str, args: argparse.Namespace, trace: list[float], root: str) -> Outcome:
    origin = time.monotonic()
    env = {
        "CHECKPOINT_INTERVAL": str(args.interval if policy != "from scratch" else 10**9),
        "TOTAL_STEPS": str(args.steps),
        "MODEL_MB": str(args.model_mb),
        "STEP_SECONDS": str(args.step_seconds),
        "EMIT_STEPS": "1",
    }
    pending, computed, attempt = list(trace), 0, 0
    while True:
        url = f"file://{root}/{policy.replace(' ', '-')}" + (
            f"-{attempt}" if policy == "from scratch" else ""
        )
        process = TrainerProcess({**env, "CHECKPOINT_URL": url}, origin, index=attempt)
        resumed = process.wait_for(lambda e: e["event"] == "resumed")
        start_step = int(resumed["step"]) if resumed else 0
        deadline = pending.pop(0) if pending else None
        remaining = None if deadline is None else max(0.0, deadline - (time.monotonic() - origin))
        code = process.finish(timeout=remaining)
        if code is None:
            process.send(signal.SIGTERM if policy == "spotproof" else signal.SIGKILL)
            process.finish()
            computed += process.last_step - start_step
            attempt += 1
            continue
        if code or process.last_step < args.steps:
            raise SystemExit(
                f"goodput: the {policy} trainer (attempt {attempt}) exited with code {code} "
                f"at step {process.last_step} of {args.steps}"
            )
        computed += process.last_step - start_step
        return Outcome(policy, time.monotonic() - origin, computed, attempt)


def check_model(args: argparse.Namespace) -> int:
    intervals = [int(i) for i in args.intervals.split(",")]
    configs = [
        TraceConfig(i, seconds=args.seconds, step_seconds=args.step_seconds, model_mb=args.model_mb)
        for i in intervals
    ]
    traces = run_traces(configs)
    reclaims = ", ".join(configs[0].reclaims)
    print(f"goodput model vs measurement, {args.seconds:g} s per interval, reclaims: {reclaims}")
    print(
        f"  {'interval':>8} {'seconds':>8} {'per hour':>9} {'graceful':>9} {'measured':>9} "
        f"{'predicted':>10} {'model best':>11}"
    )
    for trace in traces:
        best = trace.best_interval_seconds
        print(
            f"  {trace.config.interval:8d} {trace.interval_seconds:8.3f} "
            f"{trace.rate.per_hour:9.0f} {trace.rate.graceful_share:9.0%} "
            f"{trace.measured_goodput:9.1%} {trace.predicted_goodput:10.1%} "
            f"{best:9.3f} s ({best / trace.step_seconds:.0f} steps)"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--interval", type=int, default=50)
    parser.add_argument("--model-mb", type=float, default=8)
    parser.add_argument("--step-seconds", type=float, default=0.02)
    parser.add_argument("--trace", default="6,14,22,30", help="seconds since start of each reclaim")
    parser.add_argument("--model", action="store_true", help="check the goodput model instead")
    parser.add_argument("--intervals", default="2,8,50", help="with --model: steps between saves")
    parser.add_argument("--seconds", type=float, default=15, help="with --model: of training")
    parser.add_argument("--dir", help="where checkpoints go (default: a disk, see medium)")
    parser.add_argument("--quick", action="store_true", help="200 steps, reclaims at 3 and 6 s")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.interval, args.trace = 200, 25, "3,6"
        args.intervals, args.seconds = "8,50", 5
    if args.model:
        return check_model(args)
    trace = [float(t) for t in args.trace.split(",")]
    with open_medium(args.dir, prefix="spotproof-goodput-") as where:
        limit = run("uninterrupted", args, [], str(where.path))
        outcomes = [
            run(policy, args, trace, str(where.path))
            for policy in ("spotproof", "periodic-only", "from scratch")
        ]
    print(
        f"goodput, {args.steps} steps, checkpoint every {args.interval}, reclaims at "
        f"{args.trace} s, checkpoints on {where.describe()}"
    )
    print(f"  {'policy':<14} {'wall s':>7} {'vs limit':>9} {'steps run':>10} {'goodput':>8}")
    print(f"  {'uninterrupted':<14} {limit.seconds:7.1f} {1:9.2f} {limit.computed:10d} {1:8.0%}")
    for outcome in outcomes:
        print(
            f"  {outcome.policy:<14} {outcome.seconds:7.1f} {outcome.seconds / limit.seconds:9.2f} "
            f"{outcome.computed:10d} {args.steps / outcome.computed:8.0%}"
        )
    ours, peers = outcomes[0], outcomes[1:]
    peer = max(peers, key=lambda o: (args.steps / o.computed, -o.seconds))
    print(
        f"  => spotproof: {ours.seconds / limit.seconds:.2f}x the limit's wall time "
        f"(uninterrupted), {ours.seconds / peer.seconds:.2f}x the strongest peer's ({peer.policy}"
        f", goodput {args.steps / peer.computed:.0%}); issue 31 sets no goodput target"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
