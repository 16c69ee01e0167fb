"""The smoke-test trainer: ``python -m spotproof.smoke.train``.

The reference model and data, trained through ``spotproof.training`` as any user's trainer
is: a deterministic MLP whose whole state (model, optimizer, RNG, step; the data position
is the step, batches are generated from ``SEED`` and the step) goes into each checkpoint,
so a run interrupted any number of times ends with the same ``digest`` as one that never
was. Alone, or as one rank of a gang (``spotproof.smoke.data_parallel`` says how the model is
split across ranks); everything about checkpoints, reclaims, peers and exit codes is
``training()``'s (``spotproof.runtime.loop``).

Configuration (environment), each variable defined in ``spotproof.runtime.settings`` with
its meaning, default and range: ``training()``'s own (``CHECKPOINT_URL``,
``CHECKPOINT_INTERVAL``, ``GRACE_SECONDS``, ``KEEP_CHECKPOINTS``, ``CHECKPOINT_PART_KB``,
``EMIT_STEPS``, ``PEER_WAIT_SECONDS``, ``RENDEZVOUS_SECONDS``, the gang's ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` and its memory tier's), and the reference
run's: ``TOTAL_STEPS`` (required), ``SEED``, ``MODEL_MB``, ``STEP_SECONDS``,
``TRAIN_THREADS``; ``WORLD_SIZE`` must divide the batch's 16 rows. A variable missing,
malformed, not finite or out of its range stops the trainer before it starts, with exit 2
and one line naming it.

SEED and MODEL_MB define the run: they are its ``identity``, recorded in every checkpoint,
and a trainer pointed at a checkpoint of another run refuses to resume it (exit 2) rather
than continue someone else's weights.

Output: every event ``training()`` emits, one JSON object per line on stdout unless
``SPOTPROOF_EVENTS`` says otherwise (``resumed``, ``saving``, ``checkpoint``,
``preempted``, ``final_save``, ``done``...; ``runtime.events``), and ``training()``'s lines
for people on stderr. Exit codes: ``spotproof.runtime.exit_codes``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

import torch

from spotproof.runtime import exit_codes, group, settings
from spotproof.runtime.loop import training
from spotproof.runtime.messages import redacted
from spotproof.runtime.settings import ConfigError
from spotproof.smoke import BATCH_ROWS
from spotproof.smoke.data_parallel import Alone, DataParallel

DEPTH = 4
BYTES_PER_PARAMETER = 12  # fp32 weight + AdamW's two moments


@dataclass(frozen=True)
class TrainConfig:
    """The reference run: what its model and data are, and how it paces its steps."""

    total_steps: int
    seed: int = settings.SEED.default
    model_mb: float = settings.MODEL_MB.default
    step_seconds: float = settings.STEP_SECONDS.default
    threads: int = settings.TRAIN_THREADS.default

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TrainConfig:
        """The configuration from ``env``; :class:`ConfigError` names the first variable
        that is missing, malformed or out of its range, and the range."""
        config = cls(
            total_steps=settings.TOTAL_STEPS.read(env),
            seed=settings.SEED.read(env),
            model_mb=settings.MODEL_MB.read(env),
            step_seconds=settings.STEP_SECONDS.read(env),
            threads=settings.TRAIN_THREADS.read(env),
        )
        # Read by the storage layer itself (runtime.storage.deadlines); only checked here.
        settings.STORAGE_STARTUP_SECONDS.read(env)
        parallel(env)
        return config

    def identity(self) -> dict[str, float | int]:
        """What makes two runs the same run: the weights and the data follow from these,
        so a checkpoint written under other values must never be resumed."""
        return {"seed": self.seed, "model_mb": self.model_mb}


def parallel(env: Mapping[str, str]) -> Alone:
    """How this process splits the model: alone, or its rank of a gang whose size divides
    the batch."""
    size = settings.WORLD_SIZE.within(BATCH_ROWS).read(env)
    if BATCH_ROWS % size:
        raise ConfigError(f"WORLD_SIZE={size}: must divide the batch of {BATCH_ROWS} rows")
    rank, size = group.gang_from(env, most=BATCH_ROWS)
    return DataParallel(rank, size) if size > 1 else Alone()


def build(
    config: TrainConfig, split: Alone
) -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Optimizer]:
    """An MLP sized so that weights plus AdamW state take about ``MODEL_MB``, the part of
    it this rank owns, and the optimizer of that part."""
    torch.manual_seed(config.seed)
    parameters = config.model_mb * 2**20 / BYTES_PER_PARAMETER
    width = max(8, int(math.sqrt(parameters / DEPTH)))
    layers: list[torch.nn.Module] = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Dropout(0.1)]
    model = torch.nn.Sequential(*layers)
    split.seed_dropout(config.seed)
    owned = split.owned(model)
    return model, owned, torch.optim.AdamW(owned.parameters(), lr=1e-3)


def batch(config: TrainConfig, step: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch ``step`` of an endless synthetic data set: the data position *is* the step."""
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    inputs = torch.randn(BATCH_ROWS, width, generator=generator)
    return inputs, inputs.roll(1, dims=1)


def train(config: TrainConfig, env: Mapping[str, str]) -> int:
    """Train the reference run through ``training()``; 0 when it completed. Every other
    way out is ``training()``'s own exit (``runtime.leaving``)."""
    torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True)
    split = parallel(env)
    model, owned, optimizer = build(config, split)
    width = model[0].in_features
    loss_fn = torch.nn.MSELoss()
    with training(owned, optimizer, identity=config.identity()) as run:
        if run.resumed_from is not None:
            split.share_parameters(model)  # every replica whole again, from each owner
        for step in run.steps(config.total_steps):
            inputs, targets = batch(config, step, width)
            model.zero_grad(set_to_none=True)
            loss_fn(model(split.rows(inputs)), split.rows(targets)).backward()
            split.average_gradients(model)
            optimizer.step()
            split.share_parameters(model)
            if config.step_seconds:
                run.wait(config.step_seconds)
    return exit_codes.COMPLETED


def main() -> int:
    # The JSON events go to stdout unless a harness gives a place of its own.
    os.environ.setdefault(settings.SPOTPROOF_EVENTS.name, "stdout")
    try:
        config = TrainConfig.from_env(os.environ)
    except ConfigError as error:
        print(f"spotproof.smoke.train: {redacted(str(error))}", file=sys.stderr)
        return exit_codes.BAD_CONFIG
    try:
        return train(config, os.environ)
    except SystemExit as leaving:  # training()'s own exit, with its code
        return leaving.code if isinstance(leaving.code, int) else exit_codes.COMPLETED


def _leave(code: int) -> NoReturn:
    """Exit with ``code``, without interpreter teardown for a preempted trainer (tearing
    down torch took seconds on a busy node: killed, 137, after a clean final save).
    Everything it wrote is flushed or committed by now."""
    if code == exit_codes.PREEMPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _leave(main())
