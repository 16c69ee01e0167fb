"""What a training state is, as one digest per part: how a rehearsal names what a resumed
run lost.

A run interrupted any number of times must end where an uninterrupted one does, bit for
bit. When it does not, the commonest cause is a piece of state the trainer never handed to
the checkpoint (a scheduler, a data loader's position, an RNG), and one digest of the
whole state says only *that* they differ. :func:`state_digests` gives one sha256 per part
of what a checkpoint holds (``model``, ``optimizer``, ``rng`` and every other object by
the name it was given), so comparing two runs names the part. :func:`combined` is the
one digest of them all.

Tensors are hashed as their bytes (moved to the CPU, made contiguous), with their dtype
and shape; everything else as its ``repr``. Dictionaries are walked in key order, so two
equal states give equal digests whatever order their dictionaries were built in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch

from spotproof.runtime.checkpointer.torch_state import byte_view


def state_digests(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    others: Mapping[str, Any],
) -> dict[str, str]:
    """sha256 of each part of the state a checkpoint holds, by part: ``model``,
    ``optimizer``, ``rng`` (torch's generator, and CUDA's where present), and each of
    ``others`` (name -> its ``state_dict()``).

    Python's own generator is saved and restored with the rest, but left out of the
    digest: the interpreter seeds it from the OS at every start, so two fresh runs would
    differ even where nothing draws from it."""
    rng: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    parts = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": rng,
        **others,
    }
    return {name: _digest(value) for name, value in parts.items()}


def combined(step: int, digests: Mapping[str, str]) -> str:
    """One digest of the step and every part's digest, in the parts' name order."""
    hasher = hashlib.sha256(f"step={step}".encode())
    for name in sorted(digests):
        hasher.update(f"{name}={digests[name]}".encode())
    return hasher.hexdigest()


def differing(ours: Mapping[str, str], theirs: Mapping[str, str]) -> list[str]:
    """The parts whose digests differ, or that one side lacks, in name order."""
    return sorted(name for name in set(ours) | set(theirs) if ours.get(name) != theirs.get(name))


def _digest(value: Any) -> str:
    hasher = hashlib.sha256()

    def feed(prefix: str, item: Any) -> None:
        if isinstance(item, torch.Tensor):
            tensor = item.detach().cpu().contiguous()
            hasher.update(f"{prefix}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            hasher.update(byte_view(tensor))
        elif isinstance(item, Mapping):
            for key in sorted(item, key=str):
                feed(f"{prefix}/{key}", item[key])
        elif isinstance(item, list | tuple):
            for index, element in enumerate(item):
                feed(f"{prefix}/{index}", element)
        else:
            hasher.update(f"{prefix}={item!r}".encode())

    feed("", value)
    return hasher.hexdigest()
