"""The smoke test: a deterministic trainer, and a harness that preempts it on purpose."""

from spotproof.runtime import settings

BATCH_ROWS = 16
"""Rows of every step's batch; each rank of a gang takes ``WORLD_SIZE``-th of them. Here,
free of torch, so that the CLI can check ``--nodes`` against it."""
MAX_STEPS = settings.MAX_STEPS
"""The most steps (and the longest checkpoint interval) the trainer accepts; the spec
refuses a ``smokeTest`` that asks for more."""
