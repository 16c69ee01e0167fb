"""What the benchmarks share: interleaved timing, a real training state, result tables.

Every contender of one row is timed in the same run, round-robin with a rotating start (so
drift on a noisy VM hits all of them alike), after one untimed warm-up round, each run
after an untimed ``sync``; the figure is the median. An
action that returns a number has measured itself (to leave out work that follows the
result it is timed for, such as retention after a commit).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from spotproof.smoke.distributed import Solo
from spotproof.smoke.train import TrainConfig, batch, build

Action = Callable[[int], object]
"""One timed run; gets the round number (0 is the warm-up), e.g. to name a fresh key.
Returns its own duration in seconds, or anything else to be timed whole."""


@dataclass
class Row:
    """One question (e.g. "save 512 MiB to S3") and its contenders' medians."""

    title: str
    limit: list[str]
    """Contenders that stand for the limit (plain I/O of the same bytes); the best counts."""
    peer: list[str]
    """The strongest other tool's contenders; the best counts."""
    seconds: dict[str, float] = field(default_factory=dict)

    def best(self, names: list[str]) -> tuple[str, float]:
        name = min(names, key=lambda n: self.seconds[n])
        return name, self.seconds[name]


def interleaved(contenders: dict[str, Action], repeats: int) -> dict[str, float]:
    """Median seconds of each contender over ``repeats`` rounds, run round-robin. Each
    round starts with a different contender, and each run with the page cache written
    back (``sync``, untimed), so no contender's fsync waits for another's data."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(repeats + 1):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            action = contenders[name]
            os.sync()
            started = time.perf_counter()
            measured = action(round_)
            elapsed = time.perf_counter() - started
            if round_:
                times[name].append(measured if isinstance(measured, float) else elapsed)
    return {name: statistics.median(values) for name, values in times.items()}


def training_state(megabytes: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The smoke trainer's model with ``megabytes`` of model + Adam state, after one step
    (so the optimizer's moments exist)."""
    config = TrainConfig("file:///unused", 1, 1, model_mb=megabytes)
    model, _, optimizer = build(config, Solo())
    inputs, targets = batch(config, 0, model[0].in_features)
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
    return model, optimizer


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    tensors = list(model.state_dict().values())
    for slots in optimizer.state_dict()["state"].values():
        tensors += [t for t in slots.values() if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def report(row: Row, ours: str) -> list[str]:
    """Lines for one row: every contender, then our ratios to the limit and to the peer."""
    lines = [f"{row.title}"]
    for name, seconds in sorted(row.seconds.items(), key=lambda item: item[1]):
        lines.append(f"  {name:<42} {seconds:8.3f} s")
    limit_name, limit = row.best(row.limit)
    peer_name, peer = row.best(row.peer)
    mine = row.seconds[ours]
    lines.append(
        f"  => {ours}: {mine / limit:.2f}x the limit ({limit_name}), "
        f"{mine / peer:.2f}x the peer ({peer_name})"
    )
    return lines


def markdown(rows: list[Row], ours: str) -> list[str]:
    lines = [
        f"| what | {ours} | strongest peer | the limit | vs limit | vs peer |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        limit_name, limit = row.best(row.limit)
        peer_name, peer = row.best(row.peer)
        mine = row.seconds[ours]
        lines.append(
            f"| {row.title} | {mine:.3g} s | {peer_name} {peer:.3g} s | "
            f"{limit_name} {limit:.3g} s | **{mine / limit:.2f}x** | {mine / peer:.2f}x |"
        )
    return lines


def replace_block(path: Path, name: str, lines: list[str]) -> None:
    """Put ``lines`` between ``<!-- name -->`` and ``<!-- /name -->`` in ``path`` (the
    README's tables are regenerated this way, never edited by hand)."""
    text = path.read_text()
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"{path}: no {start} ... {end} block to replace")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text("\n".join([head + start, *lines, end]) + tail)
