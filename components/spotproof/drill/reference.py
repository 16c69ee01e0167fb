"""The digest a drilled smoke Job must end with: the same trainer, never interrupted.

The smoke trainer (``python -m spotproof.smoke.train``) is deterministic on the CPU: its
digest depends only on ``TOTAL_STEPS``, ``SEED``, ``MODEL_MB`` and the gang's size, not on
the checkpoint interval, the store or the machine's speed. So the drill runs it here, on the
caller's machine, with the Job's own settings and a scratch ``file://`` checkpoint
directory, while the cluster trains; a real run ends with this digest only if every reclaim
lost nothing and resumed bit for bit.

A user's own Job or JobSet has no such reference, and neither has a gang (a local gang run
is ``spotproof smoke --nodes N``): the drill judges everything else and says so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from spotproof.drill.errors import DrillError
from spotproof.runtime import settings

TRAINER_MODULE = "spotproof.smoke.train"
"""Named, not imported: the drill never loads torch itself."""
RUN_SETTINGS = (settings.TOTAL_STEPS, settings.SEED, settings.MODEL_MB)
"""The settings the digest depends on."""
_CALLERS_OWN = {
    s.name
    for s in (
        *RUN_SETTINGS,
        settings.CHECKPOINT_URL,
        settings.CHECKPOINT_INTERVAL,
        settings.STEP_SECONDS,
        settings.TRAIN_THREADS,
        settings.WORLD_SIZE,
        settings.RANK,
        settings.MASTER_ADDR,
        settings.MASTER_PORT,
    )
}
"""Trainer settings the caller's own environment may hold, which must not reach the
reference run."""


MEMORY_PER_STATE = 4
"""The trainer holds its state about this many times over (the model, the optimizer's two
moments, a checkpoint's copy): a reference run needs that much of this machine's memory."""


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def unavailable(env: Mapping[str, str]) -> str | None:
    """Why no reference can be computed for a trainer with ``env``; None when one can."""
    if importlib.util.find_spec("torch") is None:
        return "no reference digest: torch is not installed here (pip install 'spotproof[train]')"
    state_mb = float(env.get(settings.MODEL_MB.name, settings.MODEL_MB.default))
    memory = _memory_bytes()
    if memory is not None and state_mb * MEMORY_PER_STATE * 2**20 > memory:
        return (
            f"no reference digest: a {state_mb:g} MiB model needs more memory than this "
            f"machine's {memory / 2**30:.0f} GiB"
        )
    if settings.WORLD_SIZE.name in env and env[settings.WORLD_SIZE.name] not in ("", "1"):
        return "a gang's reference digest is not computed here (spotproof smoke --nodes N is)"
    if settings.TOTAL_STEPS.name not in env:
        return f"the trainer's environment sets no {settings.TOTAL_STEPS.name}"
    return None


def reference_digest(env: Mapping[str, str], *, timeout: float) -> str:
    """Trains the smoke trainer locally, uninterrupted, with ``env``'s run settings; its
    digest. DrillError (one line) when it cannot run here or does not finish in time."""
    with tempfile.TemporaryDirectory(prefix="spotproof-drill-reference-") as scratch:
        total = env[settings.TOTAL_STEPS.name]
        child_env = {
            **{k: v for k, v in os.environ.items() if k not in _CALLERS_OWN},
            **{s.name: env[s.name] for s in RUN_SETTINGS if s.name in env},
            settings.CHECKPOINT_URL.name: Path(scratch).as_uri(),
            settings.CHECKPOINT_INTERVAL.name: total,
        }
        try:
            done = subprocess.run(
                [sys.executable, "-m", TRAINER_MODULE],
                env=child_env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DrillError(
                f"the local reference run ({total} steps) did not finish in {timeout:g} s; "
                "allowed: a longer --finish-timeout, or --no-reference"
            ) from None
    for line in reversed(done.stdout.splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "done":
            return str(event["digest"])
    said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    raise DrillError(f"the local reference run did not complete: {said}")
