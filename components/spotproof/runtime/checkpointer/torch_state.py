"""Training state as checkpoint blobs, for PyTorch loops, with one copy and no pickling of
tensor data.

At a step boundary :meth:`StateBuffer.capture` copies every tensor of the training state
(model, optimizer, RNG states) into one flat CPU buffer that is allocated once and reused
(pinned when CUDA is present, so the device-to-host copy is a DMA that needs no staging).
The checkpoint is two blobs: ``tensors``, a view of that buffer uploaded as it is, and
``skeleton``, the small structure around it (param groups, step, Python RNG state) with
each tensor replaced by its offset, dtype and shape. :func:`restore` rebuilds the tensors
as views of the downloaded buffer and loads them; ``runtime.checkpointer.in_place`` reads
the ``tensors`` blob straight into the model's and optimizer's own tensors instead.

Once training has stopped, a final save needs no copy at all: :meth:`StateBuffer.views`
gives the same two blobs, byte for byte, with ``tensors`` read from the tensors' own
memory (a ``transfer.GatheredBlob``), where they are CPU tensors. A tensor on a GPU still
has to be copied to the host, and then it is a capture.

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
import math
import random
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from spotproof.runtime.checkpointer.checkpoint import RestoreError
from spotproof.runtime.checkpointer.transfer import GatheredBlob
from spotproof.runtime.messages import first_line

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
        layout = _layout(tensors)
        flat = self._flat(sum(size for _, size, _, _ in layout))
        for tensor, (offset, size, _, _) in zip(tensors, layout, strict=True):
            source = tensor.contiguous().reshape(-1).view(torch.uint8)
            flat[offset : offset + size].copy_(source, non_blocking=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return {"skeleton": _header(skeleton, layout), "tensors": byte_view(flat)}

    def views(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, **extra: Any
    ) -> dict[str, bytes | memoryview | GatheredBlob]:
        """What :meth:`capture` returns, byte for byte, with ``tensors`` read from the
        tensors' own memory: for a final save, once training has stopped (the upload
        reads the tensors while it runs, so nothing may write them). Only a state with a
        tensor off the CPU is captured, since that needs its copy to the host anyway."""
        skeleton, tensors = _flatten(_state(model, optimizer, step, extra))
        if any(tensor.device.type != "cpu" for tensor in tensors):
            return self.capture(model, optimizer, step, **extra)
        # A part that spans tensors is assembled in the buffer periodic saves use: idle now,
        # and faulted in already (a fresh part-sized buffer per thread cost more than the
        # whole capture at 512 MiB).
        staging = byte_view(self._buffer) if self._buffer is not None else None
        pieces = GatheredBlob((byte_view(t.contiguous()) for t in tensors), staging)
        return {"skeleton": _header(skeleton, _layout(tensors)), "tensors": pieces}


def _layout(tensors: list[torch.Tensor]) -> list[tuple[int, int, str, list[int]]]:
    """Each tensor's (offset, size, dtype, shape) in the ``tensors`` blob, one after the
    other."""
    layout, offset = [], 0
    for tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        layout.append((offset, size, str(tensor.dtype).removeprefix("torch."), list(tensor.shape)))
        offset += size
    return layout


def _header(skeleton: Any, layout: list[tuple[int, int, str, list[int]]]) -> bytes:
    header = io.BytesIO()
    torch.save({"skeleton": skeleton, "layout": layout}, header)
    return header.getvalue()


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
    """Load state captured by :meth:`StateBuffer.capture`; returns it (``step``, ``extra``).

    Raises :class:`RestoreError` (one line) for blobs that are not such state or do not fit
    ``model`` and ``optimizer``: a checkpoint verifies against its own manifest, which says
    nothing about the model it was taken from. Restoring stops at the first error, with the
    model perhaps already partly loaded: restore another checkpoint or rebuild it."""
    state = _decode(blobs)
    apply(model, optimizer, state)
    return state


def apply(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a decoded state (:func:`fill`) into ``model``, ``optimizer`` and the RNGs; a
    tensor that already is the model's or the optimizer's own is taken without a copy."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        _check_optimizer_state(optimizer)
        torch.set_rng_state(state["torch_rng"].clone())
        random.setstate(state["python_rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
    except (RuntimeError, TypeError, ValueError, KeyError, IndexError) as error:
        raise RestoreError(f"the state does not fit this model: {first_line(error)}") from None


def saved_extra(blobs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``extra`` state captured beside the model and optimizer, read before anything is
    loaded; :class:`RestoreError` for blobs that are not such state."""
    extra = _decode(blobs).get("extra")
    return extra if isinstance(extra, dict) else {}


def _decode(blobs: Mapping[str, Any]) -> dict[str, Any]:
    """The state in ``blobs``, every tensor a view of the ``tensors`` blob at the offset,
    dtype and shape its layout entry gives, each checked to lie inside the blob."""
    for name in ("skeleton", "tensors"):
        if name not in blobs:
            raise RestoreError(f"no {name!r} blob: not state saved by StateBuffer.capture")
    skeleton, entries = read_header(blobs["skeleton"], len(blobs["tensors"]))
    data = blobs["tensors"]
    flat = torch.frombuffer(data, dtype=torch.uint8) if len(data) else torch.empty(0)
    tensors = [flat[e.offset : e.offset + e.size].view(e.dtype).reshape(e.shape) for e in entries]
    return fill(skeleton, tensors)


class Entry(NamedTuple):
    """Where one tensor lies in the ``tensors`` blob, and what it is."""

    offset: int
    size: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def read_header(skeleton: bytes | bytearray, blob_bytes: int) -> tuple[Any, list[Entry]]:
    """The skeleton blob's state structure and its layout, every entry checked to be a
    tensor of that many bytes inside a ``tensors`` blob of ``blob_bytes``."""
    try:
        # weights_only: a checkpoint is data; loading one must never run code from the bucket.
        header = torch.load(io.BytesIO(bytes(skeleton)), weights_only=True)
    except Exception as error:  # torch.load raises what its pickle and zip layers raise
        raise RestoreError(f"the skeleton is unreadable: {first_line(error)}") from None
    if not isinstance(header, dict) or not isinstance(header.get("layout"), list):
        raise RestoreError("the skeleton has no tensor layout")
    return header.get("skeleton"), [_entry(entry, blob_bytes) for entry in header["layout"]]


def fill(skeleton: Any, tensors: list[torch.Tensor]) -> dict[str, Any]:
    """The state with each tensor's index in the skeleton replaced by ``tensors[index]``."""

    def filled(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {TENSOR_KEY}:
                index = value[TENSOR_KEY]
                if not isinstance(index, int) or not 0 <= index < len(tensors):
                    raise RestoreError(f"the skeleton names tensor {index!r}, not in its layout")
                return tensors[index]
            return {k: filled(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(filled(v) for v in value)
        return value

    state = filled(skeleton)
    if not isinstance(state, dict) or not {"step", "model", "optimizer", "torch_rng"} <= set(state):
        raise RestoreError("the skeleton is not a training state (step, model, optimizer)")
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise RestoreError(f"the skeleton's step {step!r} is not a whole number >= 0")
    return state


def _entry(entry: Any, blob_bytes: int) -> Entry:
    """The layout entry ``(offset, size, dtype, shape)``, checked."""
    try:
        offset, size, dtype_name, shape = entry
        dtype = getattr(torch, dtype_name)
        if not isinstance(dtype, torch.dtype) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0
            for n in (offset, size, *shape)
        ):
            raise ValueError("not whole numbers and a dtype")
        if size != math.prod(shape) * dtype.itemsize or offset + size > blob_bytes:
            raise ValueError(f"{size} bytes at {offset} of {blob_bytes}")
        return Entry(offset, size, dtype, tuple(shape))
    except (TypeError, ValueError, AttributeError, RuntimeError) as error:
        raise RestoreError(f"layout entry {entry!r:.80}: {first_line(error)}") from None


ELEMENTWISE_STATE = frozenset(
    {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "sum"}
)
"""Optimizer state that has its parameter's shape (Adam, AdamW, SGD, RMSprop, Adagrad);
factored state such as Adafactor's row and column variances does not."""


def _check_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Element-wise optimizer state has its parameter's shape: ``load_state_dict`` checks
    group sizes, not tensor shapes, and a mismatch would otherwise surface at the next
    step, as a crash of training."""
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            for name, value in optimizer.state.get(parameter, {}).items():
                if name in ELEMENTWISE_STATE and value.shape != parameter.shape:
                    raise ValueError(
                        f"optimizer state {name!r} has shape {tuple(value.shape)}, "
                        f"its parameter {tuple(parameter.shape)}"
                    )
