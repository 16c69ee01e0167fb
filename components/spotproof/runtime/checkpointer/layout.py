"""Where a checkpoint's objects live under a store's prefix: the one module that names keys.

::

    manifests/<S>.json                   the commit of step S (``manifest``): its existence
                                         is the commit, written create-only and last
    steps/<S>/<W>/<blob>.<part>          writer W's payload of step S, part by part
    steps/<S>/<W>/shard.json             a gang rank's record of its own parts (``gang``)

``<S>`` is the step as twelve (up to eighteen) zero-padded ASCII digits, so names sort as
steps do; ``<W>`` is a writer id, private to one process, so two writers never touch each
other's payload; ``<part>`` is five digits. Anything else under ``manifests/`` or
``steps/`` is none of ours and is never read as a checkpoint. ``spotproof plan`` replays
this layout against a bucket's lifecycle rules (``plan.simulation.lifecycle``).
"""

from __future__ import annotations

import re

MANIFESTS = "manifests"
"""The folder of commit objects, one per committed step."""
STEPS = "steps"
"""The folder of payloads, one sub-folder per step and writer."""

STEP_NAME = re.compile(r"[0-9]{12,18}")
"""A step as :func:`manifest_key` and :func:`step_prefix` spell it (ASCII digits, zero
padded); any other name under ``manifests/`` or ``steps/`` is none of ours."""


def manifest_key(step: int) -> str:
    """The commit object of ``step``."""
    return f"{MANIFESTS}/{step:012d}.json"


def step_prefix(step: int) -> str:
    """Where every writer's payload of ``step`` lives."""
    return f"{STEPS}/{step:012d}"


def writer_prefix(step: int, writer: str) -> str:
    """Where one writer's payload of ``step`` lives: its own, so it is made durable and
    deleted as one."""
    return f"{step_prefix(step)}/{writer}"


def shard_key(step: int, writer: str) -> str:
    """Where a gang's rank records the parts of its shard, for the committing rank to
    collect; under the writer's prefix, so it goes with the payload."""
    return f"{writer_prefix(step, writer)}/shard.json"


def part_key(step: int, writer: str, blob: str, index: int) -> str:
    """Where part ``index`` of ``blob`` goes: under the writer's own prefix of the step, so
    two writers never touch each other's payload."""
    return f"{writer_prefix(step, writer)}/{blob}.{index:05d}"


def committed_step(manifest_name: str) -> int | None:
    """The step a name listed under ``manifests/`` commits, or None when it is not one of
    ours."""
    stem = manifest_name.rsplit("/", 1)[-1].removesuffix(".json")
    if stem == manifest_name.rsplit("/", 1)[-1] or not STEP_NAME.fullmatch(stem):
        return None
    return int(stem)


def payload_step(folder_name: str) -> int | None:
    """The step a folder listed under ``steps/`` holds, or None when it is not one of ours."""
    leaf = folder_name.rstrip("/").rsplit("/", 1)[-1]
    return int(leaf) if STEP_NAME.fullmatch(leaf) else None
