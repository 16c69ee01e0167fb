"""What the benchmarks share: interleaved timing, a real training state, result tables.

Every contender of one row is timed in the same run, round-robin with a rotating start (so
drift on a noisy VM hits all of them alike), after one untimed warm-up round, each run
after an untimed ``sync`` and an untimed ``before`` (evicting or priming the files it will
read: ``medium``); the figure is the median. An action that returns a number has measured
itself (to leave out work that follows the result it is timed for, such as retention after
a commit).

Each row names its medium and cache state in its title, and carries the targets it is held
to (issue 31's): every report says each target, the figure it is met or missed by, and
against which contender of the same run.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from spotproof.runtime.checkpointer import torch_state
from spotproof.runtime.checkpointer.checkpoint import CheckpointStore
from spotproof.smoke.data_parallel import Alone
from spotproof.smoke.train import TrainConfig, batch, build

Action = Callable[[int], object]
"""One timed run; gets the round number (0 is the warm-up), e.g. to name a fresh key.
Returns its own duration in seconds, or anything else to be timed whole."""
Before = Callable[[str, int], object]
"""Untimed preparation of one contender's run (its name, the round): the cache state."""

LIMIT, PEER = "the limit", "the peer"


@dataclass(frozen=True)
class Target:
    """``ours <= ratio x against``; ``against`` is :data:`LIMIT`, :data:`PEER` (the best
    of the row's contenders of each) or one contender's name."""

    ratio: float
    against: str

    def describe(self) -> str:
        return f"<= {self.ratio:.2f}x {self.against}"


@dataclass
class Row:
    """One question (e.g. "save 512 MiB, S3 emulator") and its contenders' medians."""

    title: str
    limit: list[str]
    """Contenders that stand for the limit (plain I/O of the same bytes); the best counts."""
    peer: list[str]
    """The strongest other tool's contenders; the best counts."""
    seconds: dict[str, float] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)

    def best(self, names: list[str]) -> tuple[str, float]:
        name = min(names, key=lambda n: self.seconds[n])
        return name, self.seconds[name]

    def reference(self, against: str) -> tuple[str, float]:
        if against == LIMIT:
            return self.best(self.limit)
        if against == PEER:
            return self.best(self.peer)
        return against, self.seconds[against]

    def verdicts(self, ours: str) -> list[tuple[Target, str, float, bool]]:
        """(target, the contender it was held against, our ratio to it, met)."""
        found = []
        for target in self.targets:
            name, seconds = self.reference(target.against)
            ratio = self.seconds[ours] / seconds
            found.append((target, name, ratio, ratio <= target.ratio))
        return found


def verdict_text(target: Target, name: str, ratio: float, met: bool) -> str:
    against = name if target.against in (LIMIT, PEER) else target.against
    outcome = "met" if met else f"MISSED by {ratio - target.ratio:.2f}x"
    return f"target <= {target.ratio:.2f}x {against}: {ratio:.2f}x, {outcome}"


def interleaved(
    contenders: dict[str, Action], repeats: int, before: Before | None = None
) -> dict[str, float]:
    """Median seconds of each contender over ``repeats`` rounds, run round-robin. Each
    round starts with a different contender, and each run with the page cache written
    back (``sync``, untimed), so no contender's fsync waits for another's data, then
    ``before`` (untimed) sets the cache state its reads start from."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(repeats + 1):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            action = contenders[name]
            os.sync()
            if before is not None:
                before(name, round_)
            started = time.perf_counter()
            measured = action(round_)
            elapsed = time.perf_counter() - started
            if round_:
                times[name].append(measured if isinstance(measured, float) else elapsed)
    return {name: statistics.median(values) for name, values in times.items()}


def training_state(megabytes: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The smoke trainer's model with ``megabytes`` of model + Adam state, after one step
    (so the optimizer's moments exist)."""
    config = TrainConfig(total_steps=1, model_mb=megabytes)
    model, _, optimizer = build(config, Alone())
    inputs, targets = batch(config, 0, model[0].in_features)
    torch.nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
    return model, optimizer


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    tensors = list(model.state_dict().values())
    for slots in optimizer.state_dict()["state"].values():
        tensors += [t for t in slots.values() if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def restore_route() -> tuple[str, Callable[..., Any]]:
    """The trainer's restore (``training()``'s): the newest checkpoint that
    verifies, taken through ``load_latest``'s ``restore`` hook, straight into the model's
    tensors where the runtime has ``in_place`` (issue 31, item 3), else by
    ``torch_state.restore`` from the blobs. Returns its name and a function of (store,
    model, optimizer, load_latest's other arguments) giving the restored step."""
    try:
        from spotproof.runtime.checkpointer import in_place  # noqa: PLC0415
        from spotproof.runtime.checkpointer.checkpoint import ReadsInPlace  # noqa: PLC0415
    except ImportError:
        in_place = None  # type: ignore[assignment]

    def restore(checkpoints: CheckpointStore, model: Any, optimizer: Any, **load: Any) -> int:
        if in_place is not None:
            take = ReadsInPlace(lambda c: in_place.restore(model, optimizer, c))
        else:
            take = lambda c: torch_state.restore(model, optimizer, c.blobs)  # noqa: E731
        taken = checkpoints.load_latest(restore=take, **load)
        assert taken is not None, f"no checkpoint restored from {checkpoints.store.url}"
        return taken.step

    name = "in_place.restore (into the model)" if in_place else "torch_state.restore (blobs)"
    return name, restore


RESTORE_ROUTE, restore_latest = restore_route()
"""The one place the benchmarks call spotproof's restore, so what they time is what the
trainer does."""


def report(row: Row, ours: str) -> list[str]:
    """Lines for one row: every contender, our ratios to the limit and to the peer, and
    each target with whether it is met."""
    lines = [f"{row.title}"]
    width = max(len(name) for name in row.seconds)
    for name, seconds in sorted(row.seconds.items(), key=lambda item: item[1]):
        role = "limit" if name in row.limit else "peer" if name in row.peer else ""
        lines.append(f"  {name:<{width}} {seconds:8.3f} s  {role}".rstrip())
    limit_name, limit = row.best(row.limit)
    peer_name, peer = row.best(row.peer)
    mine = row.seconds[ours]
    lines.append(
        f"  => {ours}: {mine / limit:.2f}x the limit ({limit_name}), "
        f"{mine / peer:.2f}x the strongest peer ({peer_name})"
    )
    lines += [f"  => {verdict_text(*verdict)}" for verdict in row.verdicts(ours)]
    return lines


def markdown(rows: list[Row], ours: str) -> list[str]:
    lines = [
        f"| what | {ours} | strongest peer | the limit | vs limit | vs peer | target |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        limit_name, limit = row.best(row.limit)
        peer_name, peer = row.best(row.peer)
        mine = row.seconds[ours]
        verdicts = (verdict_text(*v).removeprefix("target ") for v in row.verdicts(ours))
        targets = "; ".join(verdicts) or "none"
        lines.append(
            f"| {row.title} | {mine:.3g} s | {peer_name} {peer:.3g} s | "
            f"{limit_name} {limit:.3g} s | **{mine / limit:.2f}x** | {mine / peer:.2f}x | "
            f"{targets} |"
        )
    return lines


def check_block(path: Path | None, name: str) -> None:
    """Stop before a long run whose table would have nowhere to go."""
    if path is None:
        return
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    text = path.read_text() if path.is_file() else ""
    if start not in text or end not in text:
        raise SystemExit(f"--readme {path}: no {start} ... {end} block to replace")


def replace_block(path: Path, name: str, lines: list[str]) -> None:
    """Put ``lines`` between ``<!-- name -->`` and ``<!-- /name -->`` in ``path`` (the
    README's tables are regenerated this way, never edited by hand)."""
    check_block(path, name)
    text = path.read_text()
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text("\n".join([head + start, *lines, end]) + tail)
