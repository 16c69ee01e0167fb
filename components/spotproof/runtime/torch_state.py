"""Training state as checkpoint bytes, for PyTorch loops.

:func:`snapshot` copies everything resume needs to CPU memory at a step boundary (model
and optimizer state, RNG states, the step itself), so training can go on while the copy
is serialized and uploaded. :func:`restore` puts it back bit for bit.
"""

from __future__ import annotations

import io
import random
from typing import Any

import torch


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_to_cpu(v) for v in value)
    return value


def snapshot(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, **extra: Any
) -> dict[str, Any]:
    """A CPU copy of the whole training state, safe to serialize in another thread."""
    state = {
        "step": step,
        "model": _to_cpu(model.state_dict()),
        "optimizer": _to_cpu(optimizer.state_dict()),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "extra": _to_cpu(extra),
    }
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def to_bytes(state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def restore(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, data: bytes
) -> dict[str, Any]:
    """Load state saved by :func:`snapshot`; returns it (``step``, ``extra``) for the loop."""
    # weights_only: a checkpoint is data; loading one must never run code from the bucket.
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state
