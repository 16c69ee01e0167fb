"""Training state as checkpoint blobs, for PyTorch loops, with one copy and no pickling of
tensor data.

At a step boundary :meth:`StateBuffer.capture` copies every tensor of the training state
(model, optimizer, RNG states) into one flat CPU buffer that is allocated once and reused
(pinned when CUDA is present, so the device-to-host copy is a DMA that needs no staging).
The checkpoint is two blobs: ``tensors``, a view of that buffer uploaded as it is, and
``skeleton``, the small structure around it (param groups, step, Python RNG state) with
each tensor replaced by its offset, dtype and shape. :func:`restore` rebuilds the tensors
as views of the downloaded buffer and loads them.

:meth:`StateBuffer.prepare` allocates and touches the buffer ahead of the first save (once
the optimizer has state, i.e. after the first step or a restore): otherwise the first
capture pays for allocating and faulting in memory the size of the whole state, and a
first capture may well be the final one, inside the preemption notice.

The buffer is only written while no upload reads it: ``AsyncCheckpointer`` calls capture
after the previous save has finished.
"""

from __future__ import annotations

import ctypes
import io
import random
from collections.abc import Mapping
from typing import Any

import torch

TENSOR_KEY = "__spotproof_tensor__"


class StateBuffer:
    """One reusable flat buffer for the whole training state."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    @property
    def ready(self) -> bool:
        """Whether the buffer has been allocated (by :meth:`prepare` or a capture)."""
        return self._buffer is not None

    def _flat(self, nbytes: int) -> torch.Tensor:
        if self._buffer is None or self._buffer.numel() != nbytes:
            pin = torch.cuda.is_available()
            self._buffer = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
        return self._buffer

    def prepare(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, **extra: Any
    ) -> int:
        """Allocate (and touch) the buffer that :meth:`capture` will fill; returns its size.
        Call it once the optimizer has state: after the first step, or after a restore."""
        _, tensors = _flatten(_state(model, optimizer, 0, extra))
        flat = self._flat(sum(t.numel() * t.element_size() for t in tensors))
        flat.zero_()  # fault every page in now, not during the first save
        return flat.numel()

    def capture(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, **extra: Any
    ) -> dict[str, bytes | memoryview]:
        skeleton, tensors = _flatten(_state(model, optimizer, step, extra))
        sizes = [t.numel() * t.element_size() for t in tensors]
        flat = self._flat(sum(sizes))
        layout, offset = [], 0
        for tensor, size in zip(tensors, sizes, strict=True):
            source = tensor.contiguous().reshape(-1).view(torch.uint8)
            flat[offset : offset + size].copy_(source, non_blocking=True)
            layout.append(
                (offset, size, str(tensor.dtype).removeprefix("torch."), list(tensor.shape))
            )
            offset += size
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        header = io.BytesIO()
        torch.save({"skeleton": skeleton, "layout": layout}, header)
        return {"skeleton": header.getvalue(), "tensors": byte_view(flat)}


def _state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, extra: dict[str, Any]
) -> dict[str, Any]:
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "extra": extra,
    }
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def _flatten(state: Any) -> tuple[Any, list[torch.Tensor]]:
    """The state with every tensor replaced by its index, and the tensors in that order."""
    tensors: list[torch.Tensor] = []

    def strip(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            tensors.append(value.detach())
            return {TENSOR_KEY: len(tensors) - 1}
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(strip(v) for v in value)
        return value

    return strip(state), tensors


def byte_view(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor as a flat ``memoryview``, without a copy.

    Built with ctypes rather than ``Tensor.numpy()``: torch does not depend on NumPy, and a
    trainer image should not need it. The view keeps ``tensor`` alive, so the memory stays
    valid for as long as an upload still reads it.
    """
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError(f"byte_view needs a contiguous CPU tensor, got {tensor.device}")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(b"")
    array = (ctypes.c_ubyte * nbytes).from_address(tensor.data_ptr())
    array.owner = tensor  # type: ignore[attr-defined]
    return memoryview(array).cast("B")


def restore(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, blobs: Mapping[str, Any]
) -> dict[str, Any]:
    """Load state captured by :meth:`StateBuffer.capture`; returns it (``step``, ``extra``)."""
    # weights_only: a checkpoint is data; loading one must never run code from the bucket.
    header = torch.load(io.BytesIO(bytes(blobs["skeleton"])), weights_only=True)
    data = blobs["tensors"]
    flat = (
        torch.frombuffer(data, dtype=torch.uint8)
        if len(data)
        else torch.empty(0, dtype=torch.uint8)
    )
    tensors = [
        flat[offset : offset + size].view(getattr(torch, dtype)).reshape(shape)
        for offset, size, dtype, shape in header["layout"]
    ]

    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {TENSOR_KEY}:
                return tensors[value[TENSOR_KEY]]
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(fill(v) for v in value)
        return value

    state = fill(header["skeleton"])
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"].clone())
    random.setstate(state["python_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state
